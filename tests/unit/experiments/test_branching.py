"""engine.branch_from_fedavg: Fed-ZDAC/ZDAS, FedGen, CCVR branched off FedAvg end as runs from round 1"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from fedaug import registry
from fedaug.api import (
    BranchesFromFedAvg,
    ConvertsFedAvgState,
    Method,
    RunContext,
    ServerState,
    fedavg_rounds_of,
)
from fedaug.config.identity import fedavg_name, parse_suffix, run_dir_for
from fedaug.config.load import load_config
from fedaug.engine.checkpoint import read_jsonl
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.runs.branch import fedavg_start_state
from fedaug.runs.runner import run_experiment
from fedaug.runtime.machine import cpu_model
from fedaug.sweeps.sweep import name_suffix
from tests.conftest import SMOKE
from tests.unit.experiments.helpers import BASE

# each method is FedAvg in rounds 1-2 (start_round 3 / warm-up 3), then does its own thing in rounds 3-4
METHODS = {
    "fedzdac": ["method.start_round=3", "method.samples_per_class=1", "method.gen_iterations=3"],
    "fedzdas": ["method.start_round=3", "method.samples_per_class=1", "method.gen_iterations=3"],
    "fedgen": ["method.warmup_rounds=3", "method.generator_steps=2", "method.generator_batch=4"],
    "ccvr": ["method.virtual_per_class=20"],  # FedAvg in rounds 1-3, calibrated after round 4
}
BRANCH_ROUND = {"fedzdac": 2, "fedzdas": 2, "fedgen": 2, "ccvr": 3}


def _config(out: Path, method: str, *extra: str):  # type: ignore[no-untyped-def]
    overrides = [f"out_dir={out}", *BASE, f"method={method}"]
    if method != "fedavg":
        overrides += METHODS[method]
    return load_config([SMOKE], [*overrides, *extra])


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)["state"][
        "model_state"
    ]
    return state


@pytest.mark.parametrize("method", sorted(METHODS))
def test_branch_from_fedavg_equals_a_run_from_round_one(tmp_path: Path, method: str) -> None:
    # Prepare: FedAvg keeps its checkpoints of rounds 1-3 (3 is one too late but for CCVR); the reference
    # starts at 1.
    run_experiment(_config(tmp_path / "runs", "fedavg", "engine.keep_checkpoints=[1, 2, 3]"))
    reference = _config(tmp_path / "ref", method)
    run_experiment(reference)
    # Execute
    branched = _config(tmp_path / "runs", method, "engine.branch_from_fedavg=true")
    summary = run_experiment(branched)
    # Assert: started after FedAvg's last kept round the method allows; every metric, the summary and the
    # weights equal the reference.
    run_dir, ref_dir = run_dir_for(branched), run_dir_for(reference)
    assert json.loads((run_dir / "branch.json").read_text())["round"] == BRANCH_ROUND[method]
    assert read_jsonl(run_dir / "metrics.jsonl") == read_jsonl(ref_dir / "metrics.jsonl")
    assert summary == json.loads((ref_dir / "summary.json").read_text())
    weights, ref_weights = _final_weights(run_dir), _final_weights(ref_dir)
    assert all(torch.equal(weights[k], ref_weights[k]) for k in ref_weights)
    # and the method really departs from FedAvg after the branch point
    fedavg = read_jsonl(run_dir_for(_config(tmp_path / "runs", "fedavg")) / "metrics.jsonl")
    ours = read_jsonl(run_dir / "metrics.jsonl")
    branch = BRANCH_ROUND[method]
    assert ours[:branch] == fedavg[:branch] and ours[3] != fedavg[3]


def test_without_a_checkpoint_early_enough_the_run_starts_from_round_one(tmp_path: Path) -> None:
    run_experiment(_config(tmp_path / "runs", "fedavg"))  # only latest.pt, after round 4 > 2
    config = _config(tmp_path / "runs", "fedzdas", "engine.branch_from_fedavg=true")
    run_experiment(config)
    assert not (run_dir_for(config) / "branch.json").exists()
    reference = _config(tmp_path / "ref", "fedzdas")
    run_experiment(reference)
    metrics = read_jsonl(run_dir_for(config) / "metrics.jsonl")
    assert metrics == read_jsonl(run_dir_for(reference) / "metrics.jsonl")


def test_repeating_the_fedavg_rounds_on_another_cpu_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a FedAvg run without an early checkpoint, recorded as run on another CPU model
    fedavg_dir = run_dir_for(_config(tmp_path / "runs", "fedavg"))
    run_experiment(_config(tmp_path / "runs", "fedavg"))
    env = json.loads((fedavg_dir / "env.json").read_text())
    (fedavg_dir / "env.json").write_text(json.dumps({**env, "cpu_model": "Some Other CPU"}))
    # Execute
    with caplog.at_level("WARNING", logger="fedaug.runs.branch"):
        run_experiment(_config(tmp_path / "runs", "fedzdas", "engine.branch_from_fedavg=true"))
    # Assert: it names both CPUs and the rounds it repeats; the same CPU says nothing
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warned) == 1
    assert (
        f"{fedavg_dir} ran on Some Other CPU and this run repeats its rounds 1-2 on {cpu_model()}"
        in warned[0]
    )
    caplog.clear()
    (fedavg_dir / "env.json").write_text(json.dumps(env))
    with caplog.at_level("WARNING", logger="fedaug.runs.branch"):
        run_experiment(_config(tmp_path / "again", "fedavg"))
        run_experiment(_config(tmp_path / "again", "fedzdas", "engine.branch_from_fedavg=true"))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_methods_without_fedavg_rounds_ignore_it_and_another_setting_is_refused(tmp_path: Path) -> None:
    run_experiment(_config(tmp_path / "runs", "fedavg", "engine.keep_checkpoints=[2]", "train.lr=0.05"))
    overrides = [f"out_dir={tmp_path / 'runs'}", *BASE, "method=fedprox", "engine.branch_from_fedavg=true"]
    fedprox = load_config([SMOKE], overrides)
    run_experiment(fedprox)
    assert not (run_dir_for(fedprox) / "branch.json").exists()
    with pytest.raises(ConfigError, match=r"another setting \(differs in: train\.lr\)"):
        run_experiment(_config(tmp_path / "runs", "fedzdas", "engine.branch_from_fedavg=true"))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("default/method.variant=shared_features", "default"),
        ("t/method.start_round=90,train.lr=0.1", "t/train.lr=0.1"),
        ("t/train.lr=0.1", "t/train.lr=0.1"),
        ("plain", "plain"),
        ("a/b", "a/b"),
    ],
)
def test_fedavg_name_drops_the_sweeps_method_options(name: str, expected: str) -> None:
    assert fedavg_name(name) == expected


def test_a_sweep_point_with_method_options_branches_off_the_plain_fedavg_run(tmp_path: Path) -> None:
    # Prepare: FedAvg under the plain name, CCVR as a sweep names a point with a method option.
    run_experiment(_config(tmp_path / "runs", "fedavg", "name=t", "engine.keep_checkpoints=[3]"))
    # Execute
    config = _config(
        tmp_path / "runs", "ccvr", "name=t/method.virtual_per_class=20", "engine.branch_from_fedavg=true"
    )
    run_experiment(config)
    # Assert
    assert json.loads((run_dir_for(config) / "branch.json").read_text())["round"] == 3


def test_the_sweeps_name_suffix_reads_back_through_parse_suffix() -> None:
    suffix = name_suffix({"method": {"name": "flea", "mix_beta": 5.0}, "train.lr": 0.1})
    assert parse_suffix(suffix) == [("method.mix_beta", "5.0"), ("train.lr", "0.1")]
    assert fedavg_name(f"t/{suffix}") == "t/train.lr=0.1"
    assert parse_suffix("no_equals") is None


def test_methods_declare_fedavg_rounds_through_the_optional_protocol() -> None:
    # Prepare: a run of 10 rounds; the default options of each method
    rounds = 10
    methods = {name: registry.get("method", name)() for name in ("fedzdac", "fedzdas", "fedgen", "ccvr")}
    # Assert: Fed-ZDA, FedGen and CCVR satisfy it structurally; the base class and FedAvg know nothing of it
    for method in methods.values():
        assert isinstance(method, BranchesFromFedAvg)
        assert fedavg_rounds_of(method, rounds) == method.fedavg_rounds(rounds)
    assert fedavg_rounds_of(methods["ccvr"], rounds) == 9  # every round before the last one's calibration
    assert not hasattr(Method, "fedavg_rounds") and not hasattr(Method, "from_fedavg_state")
    assert not isinstance(FedAvg(), BranchesFromFedAvg)
    assert fedavg_rounds_of(FedAvg(), rounds) == 0


def test_the_start_state_is_init_servers_with_fedavgs_weights_unless_the_method_converts() -> None:
    # Prepare: FedAvg's state after round 2
    run = RunContext(num_clients=4, num_classes=3, input_shape=(8,), seed=0, num_rounds=10)
    state = ServerState(round_num=2, model_state={"w": torch.ones(2)})

    class Converts(FedAvg):
        def from_fedavg_state(self, state: ServerState, run: RunContext) -> ServerState:
            return ServerState(round_num=state.round_num, model_state=state.model_state, extra={"kept": 1})

    # Execute
    fedgen = fedavg_start_state(registry.get("method", "fedgen")(), state, run)
    converted = fedavg_start_state(Converts(), state, run)
    # Assert: FedGen's fresh extras with FedAvg's weights and round; a method's own conversion wins
    assert (fedgen.round_num, fedgen.model_state, fedgen.extra) == (
        2,
        state.model_state,
        {"generator": {}, "metrics": {}},
    )
    assert isinstance(Converts(), ConvertsFedAvgState) and converted.extra == {"kept": 1}
