"""More than 100 bad inputs through the ``fedaug`` command line: each is exit code 2, exactly one line on
stderr that names the bad value, no traceback, and no run dir created or changed.

Every case runs ``fedaug.cli.main.main`` in-process on ``configs/smoke.yaml`` (synthetic data, an MLP, 6
clients)
with tiny overrides; a few run as real processes. Cases that need a run dir (a corrupt checkpoint or config on
resume) get a copy of one finished 2-round run, with its ``summary.json`` removed so that it resumes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import fedaug.cli.main as cli  # the module (the package also has a function main)
from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config, load_run_config
from fedaug.errors import ClientError
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
TINY = ("--set", "train.rounds=2")
"""The finished run every resume case starts from was made with these overrides (and the smoke preset)."""


@dataclass(frozen=True)
class Case:
    """One bad input: ``argv`` with placeholders, the text the error line must contain, and an optional
    setup that damages the copied run dir (``{RUN}``) before the command runs."""

    id: str
    argv: tuple[str, ...]
    expected: str
    setup: Callable[[Path], None] | None = None
    needs_run: bool = False


def run(*sets: str, extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """``run SMOKE --out-dir {OUT}`` with one ``--set`` per item."""
    argv: tuple[str, ...] = ("run", SMOKE, "--out-dir", "{OUT}", *extra)
    for item in sets:
        argv += ("--set", item)
    return argv


def sweep(name: str, *args: str) -> tuple[str, ...]:
    """``sweep {F}/NAME --out-dir {OUT} ARGS``."""
    return ("sweep", f"{{F}}/{name}", "--out-dir", "{OUT}", *args)


def resume(*extra: str) -> tuple[str, ...]:
    """The command that made the finished run: with ``{RUN}`` damaged, it must refuse to resume."""
    return ("run", SMOKE, "--out-dir", "{OUT}", *TINY, *extra)


def _write(relative: str, data: bytes | str) -> Callable[[Path], None]:
    def setup(run_dir: Path) -> None:
        path = run_dir / relative
        if isinstance(data, bytes):
            path.write_bytes(data)
        else:
            path.write_text(data)

    return setup


def _truncate(relative: str, size: int) -> Callable[[Path], None]:
    def setup(run_dir: Path) -> None:
        path = run_dir / relative
        path.write_bytes(path.read_bytes()[:size])

    return setup


def _keep_lines(relative: str, count: int) -> Callable[[Path], None]:
    def setup(run_dir: Path) -> None:
        path = run_dir / relative
        path.write_text("".join(path.read_text().splitlines(keepends=True)[:count]))

    return setup


def _torch_save(obj: object) -> Callable[[Path], None]:
    def setup(run_dir: Path) -> None:
        torch.save(obj, run_dir / "ckpt" / "latest.pt")

    return setup


def _identity_deleted_and_config_edited(run_dir: Path) -> None:
    (run_dir / "identity.json").unlink()
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.001", "lr: 0.01"))


CKPT = "ckpt/latest.pt"

CONFIG_VALUES = [
    # numbers: finite and in range, naming the key and the valid range
    ("lr-nan", ["train.lr=.nan"], "train.lr must be a finite number > 0, got nan"),
    ("lr-inf", ["train.lr=.inf"], "train.lr must be a finite number > 0, got inf"),
    ("lr-minus-inf", ["train.lr=-.inf"], "train.lr must be a finite number > 0, got -inf"),
    ("lr-zero", ["train.lr=0"], "train.lr must be a finite number > 0, got 0"),
    # issue 68: an lr that overflows in the first step left a run dir behind (a FloatingPointError at step 2)
    (
        "lr-overflows-first-step",
        ["train.lr=1e30"],
        "train.lr=1e+30 (train.optimizer=adam) overflows model 'mlp' on dataset 'synthetic' in one step: the "
        "loss after the first step is nan; lower train.lr",
    ),
    (
        "lr-overflows-first-step-sgd",
        ["train.lr=1e30", "train.optimizer=sgd", "train.weight_decay=0.5"],
        "train.lr=1e+30 (train.optimizer=sgd, train.weight_decay=0.5) overflows model 'mlp'",
    ),
    ("lr-negative-exponent", ["train.lr=-1e-3"], "train.lr must be a finite number > 0, got -0.001"),
    ("lr-underflow", ["train.lr=1e-400"], "train.lr must be a finite number > 0, got 0.0"),
    ("lr-string", ["train.lr=fast"], "train.lr must be of type float, got 'fast'"),
    ("weight-decay-negative", ["train.weight_decay=-5"], "train.weight_decay must be a finite number >= 0"),
    (
        "weight-decay-nan",
        ["train.weight_decay=.nan"],
        "train.weight_decay must be a finite number >= 0, got nan",
    ),
    (
        "weight-decay-inf",
        ["train.weight_decay=.inf"],
        "train.weight_decay must be a finite number >= 0, got inf",
    ),
    (
        "momentum-negative",
        ["train.momentum=-0.1"],
        "train.momentum must be a finite number in [0, 1], got -0.1",
    ),
    (
        "momentum-above-one",
        ["train.momentum=1.5"],
        "train.momentum must be a finite number in [0, 1], got 1.5",
    ),
    ("momentum-nan", ["train.momentum=.nan"], "train.momentum must be a finite number in [0, 1], got nan"),
    ("lr-decay-zero", ["train.lr_decay=0"], "train.lr_decay must be a finite number in (0, 1], got 0"),
    ("lr-decay-above-one", ["train.lr_decay=98"], "train.lr_decay must be a finite number in (0, 1], got 98"),
    ("lr-decay-nan", ["train.lr_decay=.nan"], "train.lr_decay must be a finite number in (0, 1], got nan"),
    ("lr-min-negative", ["train.lr_min=-1e-5"], "train.lr_min must be a finite number >= 0, got -1e-05"),
    ("lr-min-inf", ["train.lr_min=.inf"], "train.lr_min must be a finite number >= 0, got inf"),
    ("rounds-zero", ["train.rounds=0"], "train.rounds must be in 1..100000"),
    ("rounds-negative", ["train.rounds=-3"], "train.rounds must be in 1..100000"),
    (
        "rounds-absurd",
        ["train.rounds=1000000000000"],
        "train.rounds must be in 1..100000 (a cap against typos)",
    ),
    ("rounds-above-cap", ["train.rounds=100001"], "got 100001"),
    ("rounds-float", ["train.rounds=2.5"], "train.rounds must be of type int, got 2.5"),
    ("rounds-bool", ["train.rounds=true"], "train.rounds must be of type int, got True"),
    ("rounds-exponent", ["train.rounds=1e3"], "train.rounds must be of type int, got 1000.0"),
    ("local-epochs-zero", ["train.local_epochs=0"], "train.local_epochs must be in 1..10000"),
    ("local-epochs-absurd", ["train.local_epochs=99999999"], "train.local_epochs must be in 1..10000"),
    ("batch-size-zero", ["train.batch_size=0"], "train.batch_size must be >= 1, got 0"),
    ("batch-size-negative", ["train.batch_size=-4"], "train.batch_size must be >= 1, got -4"),
    (
        "client-fraction-zero",
        ["train.client_fraction=0"],
        "train.client_fraction must be a finite number in (0, 1], got 0",
    ),
    (
        "client-fraction-big",
        ["train.client_fraction=1.5"],
        "train.client_fraction must be a finite number in (0, 1], got 1.5",
    ),
    (
        "client-fraction-nan",
        ["train.client_fraction=.nan"],
        "train.client_fraction must be a finite number in (0, 1], got nan",
    ),
    ("clients-per-round-zero", ["train.clients_per_round=0"], "train.clients_per_round must be >= 1, got 0"),
    ("clients-per-round-1000", ["train.clients_per_round=1000"], "train.clients_per_round must be in 1..6"),
    (
        "clients-per-round-k-plus-1",
        ["train.clients_per_round=7"],
        "(K, the partition's number of clients), got 7",
    ),
    ("optimizer", ["train.optimizer=adagrad"], "train.optimizer must be one of"),
    ("lr-schedule", ["train.lr_schedule=cosine"], "train.lr_schedule must be one of"),
    ("unknown-train-key", ["train.roundz=3"], "unknown config key 'train.roundz'"),
    ("train-not-mapping", ["train=5"], "train must be a mapping, got 5"),
    ("seed-negative", ["seed=-1"], "seed must be in 0..9223372036854775807 (64-bit seeds), got -1"),
    ("seed-float", ["seed=1.5"], "seed must be of type int, got 1.5"),
    (
        "data-seed-beyond-64-bits",
        ["data.seed=99999999999999999999999"],
        "data.seed must be in 0..9223372036854775807 (64-bit seeds), got 99999999999999999999999",
    ),
    (
        "hidden-sizes-empty-string",  # once iterated as no hidden layer: a linear model, in silence
        ["model.hidden_sizes=''"],
        "model.hidden_sizes must be a list of integer widths ([] for a linear model), got ''",
    ),
    ("compare-not-list", ["compare=5"], "compare must be a list, got 5"),
    ("compare-unknown-method", ["compare=[fedavg, nosuch]"], "unknown method 'nosuch'"),
    (
        "method-outside-compare",  # its section would be dropped and the compared methods run instead
        ["compare=[fedavg, flea]", "method=fedprox"],
        "method 'fedprox' is not among the methods this config compares (compare: [fedavg, flea])",
    ),
    # partitions
    ("alpha-negative", ["partition.alpha=-1"], "alpha must be a finite number > 0, got -1"),
    ("alpha-zero", ["partition.alpha=0"], "alpha must be a finite number > 0, got 0"),
    ("alpha-nan", ["partition.alpha=.nan"], "alpha must be a finite number > 0, got nan"),
    ("alpha-overflow", ["partition.alpha=1e400"], "alpha must be a finite number > 0, got inf"),
    ("min-size-negative", ["partition.min_size=-1"], "min_size must be >= 0, got -1"),
    ("num-clients-zero", ["partition.num_clients=0"], "partition.num_clients must be >= 1, got 0"),
    ("num-clients-negative", ["partition.num_clients=-1"], "partition.num_clients must be >= 1, got -1"),
    ("num-clients-huge", ["partition.num_clients=100000"], "100000"),
    (
        "mean-local-size-nan",
        ["partition.num_clients=null", "partition.mean_local_size=.nan"],
        "partition.mean_local_size must be a finite number > 0, got nan",
    ),
    (
        "mean-local-size-negative",
        ["partition.num_clients=null", "partition.mean_local_size=-5"],
        "partition.mean_local_size must be a finite number > 0, got -5",
    ),
    (
        "local-test-fraction-one",
        ["partition.local_test_fraction=1"],
        "partition.local_test_fraction must be a finite number in [0, 1)",
    ),
    ("local-test-fraction-negative", ["partition.local_test_fraction=-0.1"], "got -0.1"),
    ("local-test-fraction-nan", ["partition.local_test_fraction=.nan"], "partition.local_test_fraction"),
    ("partition-seed-negative", ["partition.seed=-1"], "partition.seed must be >= 0, got -1"),
    ("unknown-partitioner", ["partition=nosuch"], "nosuch"),
    ("unknown-partition-option", ["partition.nosuch=1"], "unknown parameter 'nosuch'"),
    # components and their options
    ("unknown-dataset", ["data=nosuch"], "unknown dataset 'nosuch'"),
    ("unknown-dataset-option", ["data.nosuch=1"], "unknown option(s) 'nosuch'"),
    ("unknown-model", ["model=nosuch"], "unknown model 'nosuch'"),
    ("unknown-model-option", ["model.nosuch=1"], "has no option(s) nosuch"),
    ("unknown-method", ["method=nosuch"], "unknown method 'nosuch'"),
    ("unknown-method-option", ["method.nosuch=1"], "unknown config key 'method.nosuch'"),
    (
        "option-of-other-methods",  # the smoke preset's FedAvg has none; the option's owners are named
        ["method.decor_weight=0"],
        "valid keys: none (fedavg has no options); decor_weight is an option of flea, flea_eq6, "
        "flea_official",
    ),
    ("flea-split-layer-99", ["method=flea", "method.split_layer=99"], "method.split_layer: split layer 99"),
    ("flea-split-layer-negative", ["method=flea", "method.split_layer=-5"], "split layer -5 does not exist"),
    (
        "flea-split-layer-in-comparison",
        ["compare=[fedavg, flea]", "method=flea", "method.split_layer=99"],
        "split layer 99",
    ),
    ("flea-mix-beta", ["method=flea", "method.mix_beta=-1"], "method.mix_beta must be a finite number > 0"),
    (
        "fedaugmix-on-signals",
        ["data=uci_har", "data.channels=3", "model=harnet", "method=fedaugmix"],
        "AugMix needs image inputs",
    ),
    (
        "fedprox-mu-negative",
        ["method=fedprox", "method.proximal_mu=-1"],
        "proximal_mu must be a finite number",
    ),
    ("fedprox-mu-nan", ["method=fedprox", "method.proximal_mu=.nan"], "proximal_mu must be a finite number"),
    # engine
    ("threads-zero", ["engine.num_threads=0"], "engine.num_threads must be in 1..1024, got 0"),
    ("threads-absurd", ["engine.num_threads=100000"], "engine.num_threads must be in 1..1024, got 100000"),
    ("eval-batch-zero", ["engine.eval_batch_size=0"], "engine.eval_batch_size must be >= 1, got 0"),
    ("eval-batch-nan", ["engine.eval_batch_size=.nan"], "engine.eval_batch_size must be of type int"),
    ("precision", ["engine.precision=float8"], "engine.precision must be one of"),
    ("channels-last", ["engine.channels_last=maybe"], "engine.channels_last must be one of"),
    (
        "keep-checkpoints-zero",
        ["engine.keep_checkpoints=[0]"],
        "engine.keep_checkpoints must list rounds >= 1",
    ),
    ("local-eval-every-zero", ["engine.local_eval_every=0"], "engine.local_eval_every must be >= 1, got 0"),
    ("device-unknown", ["engine.device=tpu"], "engine.device='tpu' is not a device"),
    ("engine-name", ["engine.name=flower"], "engine.name must be 'simulation', got 'flower'"),
    # run names and out dirs cannot escape out_dir
    ("name-escapes", ["name=../../escape"], "name must be a relative path inside out_dir"),
    ("name-absolute", ["name=/tmp/fedaug-escape"], "got '/tmp/fedaug-escape'"),
    ("name-escapes-midway", ["name=a/../../b"], "got 'a/../../b'"),
    ("name-empty", ["name="], "name must be a relative path inside out_dir"),
    ("dataset-name-escapes", ["data.name=../x"], "data.name must be a name without path characters"),
    ("method-name-escapes", ["method=../../x"], "method.name must be a name without path characters"),
    ("out-dir-empty", ["out_dir="], "out_dir must be a folder path, got ''"),
    # --set values that are not YAML, or not plain YAML
    ("set-malformed-list", ["train.lr=[1,"], "malformed YAML in --set 'train.lr=[1,', line 1, column 4"),
    ("set-malformed-mapping", ["train={rounds: 2"], "malformed YAML in --set 'train={rounds: 2', line 1"),
    (
        "set-python-tag",
        ["train.lr=!!python/object/apply:os.system ['true']"],
        "could not determine a constructor",
    ),
    ("set-no-equals", ["noequals"], "override 'noequals' must look like key.path=value"),
    ("set-empty-key", ["=3"], "override '=3' has an empty key"),
]

FILES = {
    "cycle_a.yaml": "extends: cycle_b.yaml\nname: a\n",
    "cycle_b.yaml": "extends: cycle_a.yaml\nname: b\n",
    "self.yaml": "extends: self.yaml\n",
    "latin1.yaml": "name: caf\xe9\n".encode("latin-1"),
    "unclosed.yaml": "train: {rounds: 3\n",
    "tab.yaml": "train:\n\trounds: 3\n",
    "python_tag.yaml": "name: !!python/object/apply:os.system ['echo pwned']\n",
    "list.yaml": "- train\n- rounds\n",
    "duplicate.yaml": "train:\n  rounds: 2\n  rounds: 3\n",
    "extends_missing.yaml": "extends: nowhere.yaml\n",
    "extends_number.yaml": "extends: 5\n",
    "control_char.yaml": "name: a\x07b\n",
    "deep.yaml": "name: " + "[" * 5000 + "]" * 5000 + "\n",
    "a_file": "not a folder\n",
    "grid_empty_list.yaml": f"extends: {SMOKE}\nname: sw\ngrid: []\n",
    "grid_empty_mapping.yaml": f"extends: {SMOKE}\nname: sw\ngrid: {{}}\n",
    "grid_empty_axis.yaml": f"extends: {SMOKE}\nname: sw\ngrid: {{seed: []}}\n",
    "grid_scalar.yaml": f"extends: {SMOKE}\nname: sw\ngrid: 5\n",
    "grid_ok.yaml": f"extends: {SMOKE}\nname: sw\ngrid: {{seed: [0]}}\n",
    "grid_nan_lr.yaml": f"extends: {SMOKE}\nname: sw\ngrid: {{train.lr: [0.1, .nan]}}\n",
    "grid_escape.yaml": f"extends: {SMOKE}\nname: sw\ngrid: {{name: ['../../x']}}\n",
    "ref_malformed.yaml": "tables: [\n",
    "ref_python.yaml": "tables: !!python/object/apply:os.system ['echo pwned']\n",
    "ref_list.yaml": "- a\n",
    "ref_latin1.yaml": "tables: caf\xe9\n".encode("latin-1"),
    "garbage.pt": b"not a checkpoint",
}

CONFIG_FILES = [
    ("extends-cycle", ("run", "{F}/cycle_a.yaml"), "extends: cycle between config files:"),
    ("extends-itself", ("run", "{F}/self.yaml"), "self.yaml -> "),
    ("non-utf8-config", ("run", "{F}/latin1.yaml"), "latin1.yaml is not UTF-8 text (byte 0xe9 at offset 9)"),
    ("unclosed-brace", ("run", "{F}/unclosed.yaml"), "unclosed.yaml, line 2, column 1"),
    ("tab-indent", ("run", "{F}/tab.yaml"), "tab.yaml, line 2, column 1"),
    ("python-tag-config", ("run", "{F}/python_tag.yaml"), "python_tag.yaml, line 1, column 7: could not"),
    ("config-is-a-list", ("run", "{F}/list.yaml"), "list.yaml must contain a mapping of config keys"),
    ("duplicate-key", ("run", "{F}/duplicate.yaml"), "duplicate.yaml, line 3, column 3"),
    ("extends-missing", ("run", "{F}/extends_missing.yaml"), "nowhere.yaml' does not exist"),
    ("extends-not-a-name", ("run", "{F}/extends_number.yaml"), "must name a config file, got 5"),
    ("control-character", ("run", "{F}/control_char.yaml"), "control_char.yaml, line 1, column 8"),
    ("nested-too-deep", ("run", "{F}/deep.yaml"), "deep.yaml: nested too deeply"),
    ("config-missing", ("run", "{F}/nowhere.yaml"), "nowhere.yaml' does not exist"),
    ("config-is-a-folder", ("run", "{F}"), "is a folder, not a file"),
    ("out-dir-is-a-file", ("run", SMOKE, "--out-dir", "{F}/a_file"), "a_file is a file, not a folder"),
    (
        "out-dir-inside-a-file",
        ("run", SMOKE, "--out-dir", "{F}/a_file/sub"),
        "a_file is a file, not a folder",
    ),
    (
        "method-flag-unknown",
        ("run", SMOKE, "--out-dir", "{OUT}", "--method", "nosuch"),
        "unknown method 'nosuch'",
    ),
    ("device-flag-unknown", ("run", SMOKE, "--out-dir", "{OUT}", "--device", "tpu"), "'tpu' is not a device"),
]

SWEEPS = [
    ("grid-empty-list", sweep("grid_empty_list.yaml"), "grid in"),
    ("grid-empty-mapping", sweep("grid_empty_mapping.yaml"), "is empty"),
    ("grid-empty-axis", sweep("grid_empty_axis.yaml"), "grid.seed in"),
    ("grid-scalar", sweep("grid_scalar.yaml"), "must be a mapping of key: [values]"),
    (
        "grid-flag-malformed",
        sweep("grid_ok.yaml", "--grid", "seed=[0,"),
        "--grid 'seed=[0,', line 1, column 4",
    ),
    ("grid-flag-empty", sweep("grid_ok.yaml", "--grid", "seed=[]"), "--grid 'seed=[]' must look like"),
    ("grid-flag-scalar", sweep("grid_ok.yaml", "--grid", "seed=5"), "--grid 'seed=5' must look like"),
    ("grid-flag-no-key", sweep("grid_ok.yaml", "--grid", "=[1]"), "--grid '=[1]' must look like"),
    (
        "grid-nan-value",
        sweep("grid_nan_lr.yaml", "--dry-run"),
        "train.lr must be a finite number > 0, got nan",
    ),
    ("grid-name-escapes", sweep("grid_escape.yaml", "--dry-run"), "name must be a relative path"),
    (
        "workers-zero-dry-run",
        sweep("grid_ok.yaml", "--workers", "0", "--dry-run"),
        "--workers must be in 1..1024, got 0",
    ),
    ("workers-negative", sweep("grid_ok.yaml", "--workers", "-3", "--dry-run"), "got -3"),
    (
        "workers-absurd",
        sweep("grid_ok.yaml", "--workers", "100000", "--dry-run"),
        "--workers must be in 1..1024",
    ),
    ("heartbeat-negative", sweep("grid_ok.yaml", "--heartbeat", "-5", "--dry-run"), "got -5.0"),
    (
        "heartbeat-nan",
        sweep("grid_ok.yaml", "--heartbeat", "nan", "--dry-run"),
        "--heartbeat must be a finite number >= 0, got nan",
    ),
    ("heartbeat-inf", sweep("grid_ok.yaml", "--heartbeat", "inf", "--dry-run"), "got inf"),
    (
        "sweep-order-unknown",
        sweep("grid_ok.yaml", "--order", "shortest", "--dry-run"),
        "--order must be one of grid, longest-first, got 'shortest'",
    ),
    (
        "sweep-out-dir-file",
        ("sweep", "{F}/grid_ok.yaml", "--out-dir", "{F}/a_file", "--dry-run"),
        "a_file is a",
    ),
    ("sweep-set-escape", sweep("grid_ok.yaml", "--set", "name=../../x", "--dry-run"), "got '../../x'"),
    ("sweep-missing", sweep("nowhere.yaml"), "nowhere.yaml' does not exist"),
    ("shard-empty", sweep("grid_ok.yaml", "--shard", ""), "--shard must be i/n with 0 <= i < n"),
    ("shard-non-ascii-digit", sweep("grid_ok.yaml", "--shard", "\u00b2/3"), "got '\u00b2/3'"),
    ("sweep-cycle", sweep("cycle_a.yaml"), "extends: cycle"),
    ("sweep-non-utf8", sweep("latin1.yaml"), "is not UTF-8 text"),
]

REPORTS = [
    (
        "reference-malformed",
        ("report", "{F}", "--reference", "{F}/ref_malformed.yaml"),
        "ref_malformed.yaml, line",
    ),
    ("reference-python-tag", ("report", "{F}", "--reference", "{F}/ref_python.yaml"), "could not determine"),
    ("reference-list", ("report", "{F}", "--reference", "{F}/ref_list.yaml"), "must hold 'tables:'"),
    ("reference-non-utf8", ("report", "{F}", "--reference", "{F}/ref_latin1.yaml"), "is not UTF-8 text"),
    (
        "reference-missing",
        ("report", "{F}", "--reference", "{F}/nowhere.yaml"),
        "nowhere.yaml' does not exist",
    ),
    ("report-out-is-a-file", ("report", "{F}", "--out", "{F}/a_file"), "--out"),
    ("report-format", ("report", "{F}", "--format", "xyz"), "xyz"),
    ("report-missing-runs", ("report", "{F}/nowhere"), "nowhere"),
    ("archive-out-is-a-file", ("archive", "{F}", "--out", "{F}/a_file"), "a_file is a file, not a folder"),
    ("archive-out-in-a-file", ("archive", "{F}", "--out", "{F}/a_file/x"), "which is a file, not a folder"),
    ("archive-missing-runs", ("archive", "{F}/nowhere", "--out", "{OUT}"), "nowhere"),
    ("partition-plot-xyz", ("partition", SMOKE, "--plot", "{OUT}/out.xyz"), "out.xyz"),
    ("partition-plot-no-suffix", ("partition", SMOKE, "--plot", "{OUT}/heat"), "heat"),
]

RESUMES = [
    (
        "ckpt-empty",
        resume(),
        "latest.pt is corrupt or not a fedaug checkpoint (the file is empty)",
        _write(CKPT, b""),
    ),
    ("ckpt-garbage", resume(), "latest.pt is corrupt", _write(CKPT, b"garbage, not a zip")),
    ("ckpt-truncated", resume(), "PytorchStreamReader", _truncate(CKPT, 300)),
    ("ckpt-a-list", resume(), "it holds a list, not a checkpoint dict", _torch_save([1, 2])),
    ("ckpt-format", resume(), "checkpoint format 99, expected 2 or 3", _torch_save({"format": 99})),
    (
        "ckpt-no-state",
        resume(),
        "missing or malformed entries: state",
        _torch_save({"format": 1, "round_num": 2, "client_states": {}}),
    ),
    (
        "ckpt-bad-state",
        resume(),
        "its state has the keys",
        _torch_save(
            {
                "format": 1,
                "round_num": 2,
                "client_states": {},
                "state": {"round_num": 2, "model_state": {}, "x": 1},
            }
        ),
    ),
    (
        "ckpt-pickle-code",
        resume(),
        "Weights only load failed",
        _write(CKPT, b"\x80\x04cos\nsystem\n\x94\x8c\x04true\x94\x85R."),
    ),
    (
        "config-truncated",
        resume(),
        "config.yaml is incomplete (no data, partition, model, method, train section)",
        _keep_lines("config.yaml", 3),  # name, seed, out_dir
    ),
    ("config-garbage", resume(), "config.yaml is corrupt", _write("config.yaml", "train: {rounds: 3\n")),
    ("config-non-utf8", resume(), "config.yaml is not UTF-8 text", _write("config.yaml", b"name: \xff\n")),
    ("config-a-list", resume(), "must hold a mapping of config keys", _write("config.yaml", "- 1\n")),
    ("env-garbage", resume(), "env.json is corrupt or not a fedaug run record", _write("env.json", "{bad")),
    ("env-a-list", resume(), "env.json is corrupt", _write("env.json", "[1]")),
    (
        "different-config",
        resume("--set", "train.lr=0.01"),
        "holds a run with a different config (differs in: train.lr), 2 of 2 rounds done. To keep it, run "
        "this config in a new run dir: --set name=<new name> or --out-dir <folder>; to go on with that run, "
        "give the values it used: --set train.lr=0.001; only if that run is not needed: --fresh deletes its "
        "2 finished rounds and starts over",
        None,
    ),
    (
        "identity-deleted-config-edited",  # the checkpoint keeps the identity: no other run of this run dir
        resume("--set", "train.lr=0.01"),
        "config.yaml no longer matches the config the run was started with (ckpt/latest.pt): differs in "
        "train.lr (the run used 0.001, config.yaml says 0.01)",
        _identity_deleted_and_config_edited,
    ),
    ("zsdg-ckpt-empty", ("zsdg", "{RUN}", "--out", "{OUT}/z"), "the file is empty", _write(CKPT, b"")),
    ("zsdg-ckpt-garbage", ("zsdg", "{RUN}", "--out", "{OUT}/z"), "latest.pt is corrupt", _write(CKPT, b"x")),
    (
        "zsdg-config-garbage",
        ("zsdg", "{RUN}", "--out", "{OUT}/z"),
        "config.yaml is corrupt",
        _write("config.yaml", "{"),
    ),
    ("zsdg-not-a-run", ("zsdg", "{F}", "--out", "{OUT}/z"), "is not a run directory (no config.yaml)", None),
    ("zsdg-no-kept-round", ("zsdg", "{RUN}@7", "--out", "{OUT}/z"), "has no checkpoint for round 7", None),
    (
        "zsdg-per-class",
        ("zsdg", "{RUN}", "--per-class", "0", "--out", "{OUT}/z"),
        "--per-class must be >= 1",
        None,
    ),
]

CASES = (
    [Case(i, run(*sets), expected) for i, sets, expected in CONFIG_VALUES]
    + [Case(i, argv, expected) for i, argv, expected in CONFIG_FILES + SWEEPS + REPORTS]
    + [Case(i, argv, expected, setup, needs_run=True) for i, argv, expected, setup in RESUMES]
)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Bad files (``files/``), a partition cache, and one finished 2-round smoke run (``finished/``)."""
    root = tmp_path_factory.mktemp("bad_inputs")
    files = root / "files"
    files.mkdir()
    for name, content in FILES.items():
        path = files / name
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDAUG_CACHE", str(root / "cache"))
        assert main(["run", SMOKE, "--out-dir", str(root / "finished"), *TINY]) == 0
    return root


def _finished_run_dir(out: Path) -> Path:
    return run_dir_for(load_run_config([SMOKE], ["train.rounds=2", f"out_dir={out}"]))  # as `run` names it


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under ``root`` with its size and mtime (ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if "cache" not in p.relative_to(root).parts[:1]
    }


def _fill(argv: tuple[str, ...], places: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for key, value in places.items():
            arg = arg.replace(f"{{{key}}}", value)
        out.append(arg)
    return out


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 100
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_bad_input_is_one_line_exit_2_and_leaves_no_trace(
    case: Case,
    workspace: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Prepare: a copy of the finished run (damaged by the case), and a snapshot of everything
    monkeypatch.setenv("FEDAUG_CACHE", str(workspace / "cache"))
    out = tmp_path / "runs"
    run_dir = _finished_run_dir(out)
    if case.needs_run:
        shutil.copytree(_finished_run_dir(workspace / "finished"), run_dir)
        (run_dir / "summary.json").unlink()  # interrupted: a rerun resumes from its checkpoint
        if case.setup is not None:
            case.setup(run_dir)
    places = {"OUT": str(out), "F": str(workspace / "files"), "RUN": str(run_dir)}
    argv = _fill(case.argv, places)
    before, files_before = _snapshot(tmp_path), _snapshot(workspace)
    capsys.readouterr()
    # Execute
    code = main(argv)
    # Assert
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith("fedaug: error: "), err
    assert "Traceback" not in err
    assert _fill((case.expected,), places)[0] in lines[0]
    assert _snapshot(tmp_path) == before, "a run dir was created or changed"
    assert _snapshot(workspace) == files_before


def test_an_empty_fedaug_cache_is_refused_not_the_current_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", "")
    monkeypatch.chdir(tmp_path)
    assert main(["run", SMOKE, "--out-dir", str(tmp_path / "runs"), *TINY]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == "fedaug: error: FEDAUG_CACHE must be a folder path (unset it for ~/.cache/fedaug), got ''"
    assert list(tmp_path.iterdir()) == []  # no partitions/ in the current folder, no run dir


def test_resume_after_the_bad_value_is_fixed(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A late failure leaves nothing behind, so the fixed command is not refused as "a different config"."""
    monkeypatch.setenv("FEDAUG_CACHE", str(workspace / "cache"))
    args = ["run", SMOKE, "--out-dir", str(tmp_path), *TINY, "--set", "method=flea"]
    assert main([*args, "--set", "method.split_layer=99"]) == 2
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    assert main([*args, "--set", "method.split_layer=0"]) == 0


def test_exponent_floats_are_numbers(
    workspace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", str(workspace / "cache"))
    preset = tmp_path / "exp.yaml"
    preset.write_text(f"extends: {SMOKE}\ntrain:\n  lr: 1e-3\n  lr_min: 1E-5\n  weight_decay: -0e0\n")
    config = load_config([preset], ["partition.alpha=1e-1", "train.momentum=5e-1"])
    assert (config.train.lr, config.train.lr_min, config.train.weight_decay) == (1e-3, 1e-5, 0.0)
    assert config.partition.options["alpha"] == 0.1 and config.train.momentum == 0.5


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            PermissionError(13, "Permission denied", "/root/runs/x"),
            "cannot use /root/runs/x: Permission denied",
        ),
        (NotADirectoryError(20, "Not a directory", "/a/file/x"), "cannot use /a/file/x: Not a directory"),
        (IsADirectoryError(21, "Is a directory", "/a/dir"), "cannot use /a/dir: Is a directory"),
        (FileExistsError(17, "File exists", "/a/b", None, "/a/c"), "cannot use /a/b -> /a/c: File exists"),
    ],
)
def test_file_system_errors_anywhere_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: OSError, expected: str
) -> None:
    """The last resort in ``main``: an OSError from any command is one line naming the path, exit 2."""

    def fail(*args: object, **kwargs: object) -> list[Path]:
        raise error

    monkeypatch.setattr("fedaug.results.archive.archive_runs", fail)
    assert main(["archive", "runs", "--out", "archived"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"fedaug: error: {expected}"]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", SMOKE, "--set", "train.lr=.nan"], "train.lr must be a finite number > 0, got nan"),
        (["sweep", SMOKE, "--workers", "0", "--dry-run"], "--workers must be in 1..1024, got 0"),
        (["run", "{F}/latin1.yaml"], "latin1.yaml is not UTF-8 text"),
    ],
)
def test_a_real_process_prints_one_line(
    workspace: Path, tmp_path: Path, argv: list[str], expected: str
) -> None:
    env = {**os.environ, "FEDAUG_CACHE": str(workspace / "cache")}
    argv = _fill(tuple(argv), {"F": str(workspace / "files")})
    done = subprocess.run(
        [sys.executable, "-m", "fedaug", *argv, "--out-dir", str(tmp_path / "runs")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr
    assert len(lines) == 1 and lines[0].startswith("fedaug: error: "), done.stderr
    assert expected in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["run", SMOKE, "--seed", "abc"], "fedaug run: error: argument --seed: invalid int value: 'abc'"),
        (["bogus"], "fedaug: error: argument command: invalid choice: 'bogus'"),
        (["sweep"], "fedaug sweep: error: the following arguments are required: config"),
        (["run", SMOKE, "--bogus"], "fedaug: error: unrecognized arguments: --bogus"),
        (["list", "metods"], "invalid choice: 'metods'"),
        (["sweep", SMOKE, "--workers", "two"], "argument --workers: invalid int value: 'two'"),
        (["report", "runs", "--format"], "argument --format: expected one argument"),
        (
            ["flower", "client", "--superlink", "h:1", "--partition-id", "x"],
            "fedaug flower client: error: argument --partition-id: invalid int value: 'x'",
        ),
        # numeric flags of the attacks, zsdg and Flower: refused while parsing, before a checkpoint loads
        (
            ["attack", "reconstruct", "r", "--out", "o", "--epochs", "-1"],
            "fedaug attack reconstruct: error: argument --epochs: must be >= 1, got -1",
        ),
        (
            ["attack", "reconstruct", "r", "--out", "o", "--lr", "nan"],
            "argument --lr: must be a finite number > 0, got nan",
        ),
        (
            ["attack", "reconstruct", "r", "--out", "o", "--width", "0"],
            "argument --width: must be >= 1, got 0",
        ),
        (
            ["attack", "context", "r", "--out", "o", "--threads", "0"],
            "argument --threads: must be in 1..1024",
        ),
        (["attack", "context", "r", "--out", "o", "--eval-size", "0"], "argument --eval-size: must be >= 1"),
        (["attack", "invert", "--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
        (["attack", "invert", "--tv", "-1"], "argument --tv: must be a finite number >= 0, got -1.0"),
        (["attack", "invert", "--seed", "1.5"], "argument --seed: must be an integer, got '1.5'"),
        (
            ["zsdg", "r", "--seed", "-1"],
            "fedaug zsdg: error: argument --seed: must be in 0..9223372036854775807, got -1",
        ),
        (
            ["zsdg", "r", "--seed", str(2**64)],  # once a traceback from torch's generator
            "fedaug zsdg: error: argument --seed: must be in 0..9223372036854775807, got "
            "18446744073709551616",
        ),
        (
            ["analyze", "features", "r@1", "--out", "o", "--scarce-clients", "0"],
            "fedaug analyze features: error: argument --scarce-clients: must be >= 1, got 0",
        ),
        (
            ["flower", "serve", "--node-timeout", "nan"],
            "argument --node-timeout: must be a finite number > 0",
        ),
        (
            ["flower", "client", "--superlink", "h:1", "--partition-id", "0", "--runtime-port", "99999"],
            "argument --runtime-port: must be in 1..65535, got 99999",
        ),
    ],
)
def test_usage_errors_are_one_line_without_the_usage_text(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Execute
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    # Assert: the bad value and where to look, nothing else
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.count("\n") == 1 and expected in err and "--help'" in err and "usage:" not in err


TORCH_OOM = (
    "CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 79.18 GiB of which "
    "1.81 MiB is free. Process 667 has 66.00 MiB memory in use. Process 713 has 3.56 GiB memory in use."
    "\nOf the allocated memory 1.50 GiB is allocated by PyTorch"
)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            lambda: ClientError(f"OutOfMemoryError: {TORCH_OOM}", round_num=1, client_id=6, method="fedavg"),
            "fedaug: error: round 1, client 6, method 'fedavg': OutOfMemoryError: CUDA out of memory. "
            "Tried to allocate 2.00 MiB. The GPU ran out of memory: run fewer runs on it at once",
        ),
        (
            lambda: torch.OutOfMemoryError(TORCH_OOM),
            "fedaug: error: CUDA out of memory. Tried to allocate 2.00 MiB.",
        ),
    ],
    ids=["in a client", "outside clients"],
)
def test_running_out_of_gpu_memory_is_one_line_with_what_to_do(
    error: Callable[[], Exception],
    expected: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # PyTorch's message goes on with every process's memory use, over several lines: the line keeps what
    # failed and says what to do instead.
    def fail(args: object) -> int:
        raise error()

    monkeypatch.setattr(cli, "cmd_run", fail)
    assert main(["run", SMOKE]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(expected), err
    assert "Process 667" not in err and "resumes from the last finished round" in err


def test_other_runtime_errors_still_raise(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(args: object) -> int:
        raise RuntimeError("a bug, with its traceback")

    monkeypatch.setattr(cli, "cmd_run", fail)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["run", SMOKE])
