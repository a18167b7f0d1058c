"""Grids on a cluster (fedaug.sweeps.cluster): ``--shard i/n`` slices are disjoint and cover the grid,
``--list`` prints one command per run that runs exactly that run, ``--device a,b`` puts each run the pool
starts on the least busy device, and ``fedaug report`` merges the run dirs two machines wrote."""

from __future__ import annotations

import json
import re
import shlex
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.cli.main import main
from fedaug.config.identity import result_config
from fedaug.config.load import config_to_dict
from fedaug.errors import ConfigError, FedaugError
from fedaug.sweeps import sweep
from fedaug.sweeps.cluster import least_loaded, on_device, parse_devices, parse_shard, shard_points
from fedaug.sweeps.order import Schedule
from tests.unit.experiments.helpers import write_sweep

FAST = "train: {rounds: 1}\nengine: {num_threads: 1, progress: false}\n"


@given(size=st.integers(0, 60), count=st.integers(1, 12))
def test_shards_are_disjoint_and_cover_the_grid(size: int, count: int) -> None:
    points = list(range(size))
    slices = [shard_points(points, index, count) for index in range(count)]
    assert sorted(p for part in slices for p in part) == points
    assert max(map(len, slices)) - min(map(len, slices)) <= 1  # balanced


@pytest.mark.parametrize(
    "text", ["2/2", "-1/2", "1", "a/b", "0/0", "1/2/3", "", "\u00b2/3", "\u0663/5", "0/\uff12"]
)
def test_a_bad_shard_is_named(text: str) -> None:
    with pytest.raises(ConfigError, match=rf"--shard must be i/n with 0 <= i < n .*got '{text}'"):
        parse_shard(text)


@settings(max_examples=200)
@given(text=st.text(st.sampled_from("0123456789/ -+\u00b2\u0663\uff12\u2070_a"), max_size=8))
def test_any_shard_text_is_a_slice_in_ascii_digits_or_refused(text: str) -> None:
    """Non-ASCII digits (which str.isdigit() takes and int() may not), '' and signs: refused in one line."""
    try:
        index, count = parse_shard(text)
    except ConfigError as error:
        assert str(error).startswith("--shard must be i/n") and "\n" not in str(error)
    else:
        found = re.fullmatch(r" *([0-9]+) */ *([0-9]+) *", text)
        assert found and (index, count) == (int(found[1]), int(found[2])) and 0 <= index < count


def test_a_sweep_with_an_empty_shard_is_refused_not_run_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_sweep(tmp_path, FAST + "grid: {seed: [0, 1]}\n")
    assert main(["sweep", str(path), "--out-dir", str(tmp_path / "runs"), "--shard", ""]) == 2
    assert "--shard must be i/n" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_parse_shard_and_devices() -> None:
    assert parse_shard("3/8") == (3, 8)
    assert parse_devices("cuda:0, cuda:1,cuda:0") == ["cuda:0", "cuda:1"]
    with pytest.raises(FedaugError, match=r"--device='gpu1' is not a device"):
        parse_devices("cuda:0,gpu1")


@given(st.lists(st.integers(0, 2), max_size=20))
def test_least_loaded_picks_a_device_with_the_fewest_runs(running_index: list[int]) -> None:
    devices = ["cuda:0", "cuda:1", "cuda:2"]
    running = [devices[i] for i in running_index]
    pick = least_loaded(devices, running)
    assert running.count(pick) == min(running.count(d) for d in devices)
    assert pick == next(d for d in devices if running.count(d) == running.count(pick))  # first of the tied


class RecordingPool:
    """Stands in for the process pool: records each run's device and ends it at once."""

    def __init__(self) -> None:
        self.devices: list[str] = []

    def submit(self, fn: Any, config: Any, quiet: bool) -> Future[sweep.Outcome]:
        del fn, quiet
        self.devices.append(config.engine.device)
        future: Future[sweep.Outcome] = Future()
        future.set_result(sweep.Outcome("finished"))
        return future


def test_the_pool_spreads_runs_over_the_devices_without_changing_their_run_dirs(tmp_path: Path) -> None:
    points = sweep.expand_sweep(write_sweep(tmp_path, "grid:\n  seed: [0, 1, 2, 3, 4]\n"))
    pool, result = RecordingPool(), sweep.SweepResult()
    sweep._run_pool(pool, {}, Schedule(points), result, 3, 0.0, 5, devices=["cuda:0", "cuda:1"])  # type: ignore[arg-type]
    assert pool.devices == ["cuda:0", "cuda:1", "cuda:0", "cuda:0", "cuda:1"]  # 3 at once, then 2 more
    assert sorted(result.finished) == sorted(p.run_dir for p in points)
    moved = on_device(points[0], "cuda:1")
    assert moved.run_dir == points[0].run_dir
    assert result_config(config_to_dict(moved.config)) == result_config(config_to_dict(points[0].config))


def test_list_prints_one_command_per_run_and_each_runs_that_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    path = write_sweep(tmp_path, FAST + "grid:\n  seed: [0, 1]\n  method: [fedavg, fedprox]\n")
    # Execute
    assert main(["sweep", str(path), "--list", "--grid", "seed=[0, 1]"]) == 0
    commands = capsys.readouterr().out.splitlines()
    # Assert: the third command runs the third point of the grid and nothing else
    assert len(commands) == 4 and commands[2].endswith("--shard 2/4")
    argv = shlex.split(commands[2])
    assert argv[:3] == ["fedaug", "sweep", str(path)] and "--grid=seed=[0, 1]" in argv
    assert main(argv[1:]) == 0
    finished = sorted(p.parent.relative_to(tmp_path / "runs") for p in tmp_path.rglob("summary.json"))
    assert finished == [Path("sw/synthetic-dirichlet0.5_2-K6/fedavg/seed1")]


def test_report_merges_the_run_dirs_of_two_machines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: two slices of one grid run into two folders, as two machines would
    path = write_sweep(tmp_path, FAST + "grid:\n  seed: [0, 1]\n")
    for index in (0, 1):
        assert (
            main(["sweep", str(path), "--shard", f"{index}/2", "--out-dir", str(tmp_path / f"m{index}")]) == 0
        )
    capsys.readouterr()
    # Execute
    assert main(["report", str(tmp_path / "m0"), str(tmp_path / "m1"), "--format", "csv"]) == 0
    # Assert: one row over both seeds, the mean of the two machines' runs
    summaries = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("m*/**/summary.json"))]
    assert [len(list((tmp_path / m).rglob("summary.json"))) for m in ("m0", "m1")] == [1, 1]
    mean = 100 * (summaries[0]["best_acc"] + summaries[1]["best_acc"]) / 2
    row = f'best_acc,fedavg,"synthetic Dir(0.5, 2) K=6",{mean:.4f},'
    assert any(
        line.startswith(row) and line.split(",")[6] == "2" for line in capsys.readouterr().out.splitlines()
    )


def test_a_sweep_checks_every_device_it_spreads_over(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_sweep(tmp_path, FAST + "grid:\n  seed: [0, 1]\n")
    assert main(["sweep", str(path), "--device", "cpu,cuda:7", "--dry-run"]) == 0
    assert "note: this machine could not run them: " in capsys.readouterr().out
    assert main(["sweep", str(path), "--device", "cpu,cuda:7", "--workers", "2"]) == 2
    assert "cuda:7" in capsys.readouterr().err and not (tmp_path / "runs").exists()
