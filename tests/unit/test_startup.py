"""A run's start-up breakdown (``fedaug.runtime.startup``): its phases sum to its total, which a fresh
``fedaug run``
measured from outside exceeds; a comparison loads its data once and logs the same metrics as separate runs."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.cli.main import main
from fedaug.data import datasets
from fedaug.runs import resolve
from fedaug.runtime import startup
from fedaug.runtime.startup import StartupClock
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")


@settings(max_examples=25, deadline=None)
@given(st.lists(st.sampled_from(["cli", "imports", "data", "model"]), min_size=1, max_size=8))
def test_phases_sum_to_the_total_and_repeated_phases_add_up(names: list[str]) -> None:
    clock = StartupClock(time.perf_counter(), python_s=0.123)
    for name in names:
        clock.mark(name)
    breakdown = clock.take()
    assert breakdown is not None
    assert list(breakdown["phases"]) == [*dict.fromkeys(names), "other"]  # first-seen order, then other
    assert math.fsum(breakdown["phases"].values()) == pytest.approx(breakdown["total_s"], abs=1e-3)
    assert breakdown["python_s"] == 0.12
    assert clock.take() is None  # once per process
    clock.mark("late")  # after the take: ignored
    assert "late" not in clock.phases


def test_describe_lists_the_largest_phases_first() -> None:
    breakdown = {"phases": {"cli": 0.1, "imports": 2.5, "data": 0.42}, "total_s": 3.02, "python_s": 0.05}
    line = startup.describe(breakdown)
    assert line == "start-up 3.02 s (python 0.05 s before it): imports 2.50, data 0.42, cli 0.10"
    assert startup.describe({**breakdown, "python_s": None}).startswith("start-up 3.02 s: imports 2.50")


def test_a_fresh_run_records_its_start_up_in_the_first_timings_record_within_its_wall_time(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "fedaug", "run", SMOKE, "--out-dir", str(tmp_path)]
    command += ["--set", "engine.num_threads=1", "--set", "train.rounds=2"]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    (timings,) = tmp_path.rglob("timings.jsonl")
    first, second = (json.loads(line) for line in timings.read_text().splitlines())
    assert "startup" not in second
    breakdown = first["startup"]
    phases = breakdown["phases"]
    expected = ["cli", "imports", "config", "command", "run_dir", "device", "method", "data"]
    expected += ["partition", "model", "record", "to_device", "engine_init", "other"]
    assert list(phases) == expected
    assert all(seconds >= 0 for seconds in phases.values())
    assert math.fsum(phases.values()) == pytest.approx(breakdown["total_s"], abs=2e-3)
    python_s = breakdown["python_s"] if breakdown["python_s"] is not None else 0.0
    assert breakdown["total_s"] + python_s <= wall  # the process ran all of it and its rounds and exit
    assert breakdown["total_s"] + first["round_time"] <= wall
    assert f"INFO start-up {breakdown['total_s']:.2f} s" in done.stderr


def test_a_comparison_loads_its_data_once_and_logs_what_separate_runs_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    loads: list[str] = []
    real = resolve.load_dataset

    def counted(name: str, **kwargs: object) -> datasets.Dataset:
        loads.append(name)
        return real(name, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(resolve, "load_dataset", counted)
    common = [SMOKE, "--set", "train.rounds=2", "--set", "engine.num_threads=1"]
    both = ["run", *common, "--out-dir", str(tmp_path / "both"), "--set", "compare=[fedavg, flea]"]
    assert main(both) == 0
    assert loads == ["synthetic"]  # checks of both methods and both runs: one load (four without the reuse)
    for method in ("fedavg", "flea"):
        assert main(["run", *common, "--out-dir", str(tmp_path / method), "--method", method]) == 0
    assert loads == ["synthetic"] * 3  # a separate run loads its own
    assert resolve._reused is None  # nothing kept after the command
    for method in ("fedavg", "flea"):
        (compared,) = (tmp_path / "both").rglob(f"{method}/seed0/metrics.jsonl")
        (alone,) = (tmp_path / method).rglob(f"{method}/seed0/metrics.jsonl")
        assert compared.read_bytes() == alone.read_bytes()
        assert compared.stat().st_size > 0


def test_reuse_is_keyed_by_data_partition_and_seed_and_ends_with_its_block() -> None:
    from fedaug.config.load import load_config

    config = load_config([SMOKE])
    other_seed = load_config([SMOKE], ["seed=1"])
    other_method = load_config([SMOKE], ["method=flea"])
    with resolve.reusing_data():
        first = resolve.load_data_and_partition(config)
        assert resolve.load_data_and_partition(other_method) is first  # another method: the same objects
        reseeded = resolve.load_data_and_partition(other_seed)
        assert reseeded is not first
        pairs = zip(reseeded[1].train_indices, first[1].train_indices, strict=True)
        assert not all(np.array_equal(a, b) for a, b in pairs)  # another seed: its own partition
        with resolve.reusing_data():  # nested: the outer block's loads stay
            assert resolve.load_data_and_partition(config) is first
    assert resolve._reused is None
    assert resolve.load_data_and_partition(config) is not first  # outside: loaded afresh


HEAVY = ("matplotlib", "flwr", "scipy", "dcor", "hypothesis", "PIL", "pandas", "sklearn", "ray")
PROBE = """
import json, sys
import fedaug.runtime.startup as startup
from fedaug.cli.main import main
real_take, found = startup.take, {}
def take():
    found["loaded"] = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[2].split(",")))
    return real_take()
startup.take = take
code = main(["run", sys.argv[3], "--out-dir", sys.argv[1], "--set", "train.rounds=1"])
print(json.dumps({"code": code, **found}))
"""


def test_a_plain_run_reaches_its_first_round_without_the_optional_heavy_modules(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", PROBE, str(tmp_path), ",".join(HEAVY), SMOKE]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {
        "code": 0,
        "loaded": [],
    }  # plotting, Flower, analysis and test libraries: later or never
