"""Config values fuzzed with hypothesis through ``load_config`` and the command-line parser: every outcome is
a valid config or one :class:`~fedaug.errors.FedaugError` line of readable length (or argparse's usage error),
never another exception, and never a config outside its limits.

Settings: ``max_examples`` 50 per property in the default suite (a few seconds each on a busy 2-core
machine), 3000 under ``-m slow``.
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedaug.cli.common import load_config as load_cli_config
from fedaug.cli.main import build_parser
from fedaug.config.identity import run_dir_for
from fedaug.config.limits import FLOAT32_MAX, MAX_SEED
from fedaug.config.load import load_config
from fedaug.config.schema import ExperimentConfig
from fedaug.errors import FedaugError
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")

KEYS = [
    *("seed", "name", "out_dir", "compare", "method", "data", "model", "partition"),
    *("train.rounds", "train.lr", "train.lr_min", "train.lr_decay", "train.batch_size", "train.local_epochs"),
    *("train.optimizer", "train.momentum", "train.weight_decay", "train.client_fraction"),
    *("train.clients_per_round", "train.lr_schedule", "engine.num_threads", "engine.keep_checkpoints"),
    *("engine.device", "engine.precision", "engine.eval_batch_size", "engine.cuda_graphs"),
    *("partition.num_clients", "partition.seed", "partition.alpha", "partition.mean_local_size"),
    *("method.name", "method.proximal_mu", "data.name", "data.data_dir", "model.name", "model.hidden_sizes"),
]
"""Known keys, fuzzed with values of every kind (unknown keys come from the text strategy)."""

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1e-40, max_value=1e-40),
    st.text(max_size=40),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=300),
    st.sampled_from(
        ["", " ", "..", "/", "a/b", "\x00", "\x1b[31m", "fedavg", "flea", "cpu", "cuda:9", "1e-3"]
    ),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
KEY = st.one_of(st.sampled_from(KEYS), st.text(max_size=20))


def _as_set(key: str, value: object) -> str:
    """``key=value`` with ``value`` written as YAML (flow style), as a user would type it."""
    try:
        text = yaml.safe_dump(value, default_flow_style=True, width=10**9).strip()
    except (yaml.YAMLError, ValueError):
        text = str(value)
    return f"{key}={text.removesuffix('...').strip()}"


def _within_limits(config: ExperimentConfig) -> None:
    """What an accepted config must satisfy whatever the fuzzer gave."""
    assert 0 <= config.seed <= MAX_SEED
    assert math.isfinite(config.train.lr) and 0 < config.train.lr <= FLOAT32_MAX
    assert config.name.strip() and config.out_dir.strip()
    assert len(set(config.compare)) == len(config.compare)
    assert all(1 <= r <= config.train.rounds for r in config.engine.keep_checkpoints)
    assert all(len(part.encode()) <= 255 for part in run_dir_for(config).parts)


def _one_clean_line(error: FedaugError) -> None:
    line = " ".join(str(error).splitlines())
    assert line and len(line) < 2500, line[:300]


FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_overrides(overrides: list[str]) -> None:
    try:
        config = load_config([SMOKE], overrides)
    except FedaugError as error:
        _one_clean_line(error)
        return
    _within_limits(config)


@FUZZ
@given(st.lists(st.tuples(KEY, VALUES), min_size=1, max_size=4))
def test_fuzzed_overrides_are_a_valid_config_or_one_error_line(pairs: list[tuple[str, object]]) -> None:
    _check_overrides([_as_set(key, value) for key, value in pairs])


@FUZZ
@given(st.lists(st.text(max_size=60), min_size=1, max_size=3))
def test_fuzzed_raw_override_text_is_a_valid_config_or_one_error_line(overrides: list[str]) -> None:
    _check_overrides(overrides)


FLAGS = ["--seed", "--out-dir", "--data-dir", "--method", "--device", "--set", "--smoke"]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(FLAGS), st.text(max_size=30)), max_size=4))
def test_fuzzed_command_lines_are_a_valid_config_or_one_error(flags: list[tuple[str, str]]) -> None:
    argv = ["run", SMOKE]
    for flag, value in flags:
        argv += [flag] if flag == "--smoke" else [f"{flag}={value}"]
    try:
        args = build_parser().parse_args(argv)
        config = load_cli_config(args)
    except SystemExit as exit_:
        assert exit_.code == 2
        return
    except FedaugError as error:
        _one_clean_line(error)
        return
    _within_limits(config)


@pytest.mark.slow
@SLOW
@given(st.lists(st.tuples(KEY, VALUES), min_size=1, max_size=6))
def test_fuzzed_overrides_long(pairs: list[tuple[str, object]]) -> None:
    _check_overrides([_as_set(key, value) for key, value in pairs])
