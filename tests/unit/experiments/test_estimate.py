"""`fedaug sweep --dry-run`'s run time left: other seeds' round times, branched FedAvg rounds left out."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.engine.checkpoint import RunStore
from fedaug.runs.branch import has_start_checkpoint, start_checkpoint
from fedaug.runtime.machine import cpu_model
from fedaug.sweeps.estimate import (
    dry_run_lines,
    format_duration,
    plan,
    remaining_rounds,
    remaining_seconds,
    running_line,
)
from tests.unit.experiments.helpers import ZDAS, sweep_points, write_sweep


def _log(run_dir: Path, round_times: list[float], *, finished: bool = False) -> None:
    """A run dir that has logged ``len(round_times)`` rounds with these times."""
    run_dir.mkdir(parents=True)
    rounds = range(1, len(round_times) + 1)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"round": r}) + "\n" for r in rounds))
    lines = [
        json.dumps({"round": r, "round_time": t}) + "\n" for r, t in zip(rounds, round_times, strict=True)
    ]
    (run_dir / "timings.jsonl").write_text("".join(lines))
    if finished:
        (run_dir / "summary.json").write_text(json.dumps({"rounds": len(round_times)}))


def test_round_times_of_the_other_seeds_cost_the_rounds_left(tmp_path: Path) -> None:
    # Prepare: 4 rounds; Fed-ZDAS is FedAvg in rounds 1-2 (start_round 3), which it takes from FedAvg's run.
    zdas0, fedavg0 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    zdas1, fedavg1 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]", "seed=1")
    _log(fedavg0.run_dir, [1.0, 2.0, 3.0, 4.0], finished=True)
    # Assert: a new FedAvg seed runs every round, each at seed 0's time
    assert remaining_rounds(fedavg1) == range(1, 5)
    assert remaining_seconds(fedavg1) == pytest.approx(10.0)
    assert remaining_seconds(fedavg0) == 0.0
    # ZDAS: no seed has logged one of its own rounds (3-4) yet: no estimate, although FedAvg's are known
    assert remaining_rounds(zdas1) == range(3, 5)
    assert remaining_seconds(zdas1) is None
    # Prepare: ZDAS seed 0 branched (rounds 1-2 copied with FedAvg's times) and ran round 3 in 30 s
    _log(zdas0.run_dir, [1.0, 2.0, 30.0])
    (zdas0.run_dir / "branch.json").write_text(json.dumps({"from": str(fedavg0.run_dir), "round": 2}))
    # Assert: round 4, logged by no seed, costs the mean of the own rounds logged (30 s), not of FedAvg's
    assert remaining_seconds(zdas0) == pytest.approx(30.0)
    assert remaining_seconds(zdas1) == pytest.approx(60.0)
    # a partial FedAvg seed 1 (round 1 in 5 s): rounds 2-4 at seed 0's times; round 1's mean is now 3 s
    _log(fedavg1.run_dir, [5.0])
    assert remaining_seconds(fedavg1) == pytest.approx(9.0)
    lines = dry_run_lines([zdas0, fedavg0, zdas1, fedavg1])
    assert lines[0].startswith("partial (3/4 rounds)      ~30 s     ")
    assert lines[1].startswith(f"finished                            {fedavg0.run_dir}")
    assert lines[2].startswith("new                       ~1 min    ")
    left = "about 2 min of run time left (round times of their seeds so far)"  # 30 + 60 + 9 s
    assert lines[-1] == f"4 runs: 1 finished, 2 partial, 1 new; {left}"


def test_running_line_gives_each_running_run_its_round_and_time_left(tmp_path: Path) -> None:
    # Prepare: FedAvg seed 0 finished (1-4 s rounds), seed 1 at round 1, ZDAS seed 1 not started (no estimate)
    zdas1, fedavg1 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]", "seed=1")
    fedavg0 = sweep_points(tmp_path, "[fedavg]")[0]
    _log(fedavg0.run_dir, [1.0, 2.0, 3.0, 4.0], finished=True)
    _log(fedavg1.run_dir, [5.0])
    # Assert: rounds 2-4 at the seeds' mean times (2 + 3 + 4 s)
    assert running_line([fedavg1, zdas1]) == (
        f"running: {fedavg1.run_dir} round 1/4 (~9 s left); {zdas1.run_dir} round 0/4"
    )


def test_a_branching_run_whose_fedavg_run_kept_no_checkpoint_runs_every_round(tmp_path: Path) -> None:
    # Prepare: FedAvg seed 0 finished with its times but no checkpoint (restored from `fedaug archive`), and
    # ZDAS seed 1 ran rounds 1-3 (branched from its FedAvg run, 30 s for round 3)
    zdas0, fedavg0 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    zdas1, _ = sweep_points(tmp_path, f"[{ZDAS}, fedavg]", "seed=1")
    _log(fedavg0.run_dir, [1.0, 2.0, 3.0, 4.0], finished=True)
    _log(zdas1.run_dir, [1.0, 2.0, 30.0])
    (zdas1.run_dir / "branch.json").write_text("{}")
    # Assert: ZDAS seed 0 runs FedAvg's rounds too, costed at the siblings' times of rounds 1-2 (1 and 2 s)
    assert remaining_rounds(zdas0) == range(1, 5)
    assert remaining_seconds(zdas0) == pytest.approx(1.0 + 2.0 + 30.0 + 30.0)
    lines = dry_run_lines([zdas0, fedavg0])
    assert lines[0].startswith("new                       ~1 min    ")
    assert lines[0].endswith(f"{zdas0.run_dir}  (from round 1: no FedAvg checkpoint in {fedavg0.run_dir})")
    # the FedAvg run's env.json naming another CPU model: the line says the repeated rounds will differ
    (fedavg0.run_dir / "env.json").write_text(json.dumps({"cpu_model": "Some Other CPU"}))
    other = f"; it ran on Some Other CPU, this is {cpu_model()}: not bit-identical)"
    assert dry_run_lines([zdas0, fedavg0])[0].endswith(f"no FedAvg checkpoint in {fedavg0.run_dir}{other}")
    (fedavg0.run_dir / "env.json").write_text(json.dumps({"cpu_model": cpu_model()}))
    assert dry_run_lines([zdas0, fedavg0])[0].endswith(f"no FedAvg checkpoint in {fedavg0.run_dir})")
    # a kept checkpoint of round 2 (or earlier) is one to start from
    (fedavg0.run_dir / "ckpt").mkdir()
    (fedavg0.run_dir / "ckpt" / "round_0002.pt").touch()
    assert remaining_rounds(zdas0) == range(3, 5)
    assert dry_run_lines([zdas0, fedavg0])[0].endswith(f"{zdas0.run_dir}  (after {fedavg0.run_dir})")
    # a run that started from round 1 (no branch.json) goes on alone after an interruption
    (zdas1.run_dir / "branch.json").unlink()
    assert remaining_rounds(zdas1) == range(4, 5)
    assert plan(zdas1).alone == fedavg0.run_dir.parent.parent / "fedavg" / "seed1"


def test_a_fedavg_run_finished_with_other_rounds_is_not_finished_for_the_branch(tmp_path: Path) -> None:
    # Prepare: FedAvg seed 0 ran 2 rounds and wrote a summary for 2 (a --smoke run) in the 4-round grid's dir,
    # no checkpoint kept: the sweep resumes it to 4 rounds and keeps round 2, so ZDAS will branch
    zdas0, fedavg0 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    _log(fedavg0.run_dir, [1.0, 2.0], finished=True)
    assert plan(zdas0).alone is None and remaining_rounds(zdas0) == range(3, 5)
    assert dry_run_lines([zdas0, fedavg0])[1].startswith("partial (2/4 rounds)")
    # the same run finished with the grid's 4 rounds is finished: ZDAS runs from round 1
    (fedavg0.run_dir / "summary.json").write_text(json.dumps({"rounds": 4}))
    assert plan(zdas0).alone == fedavg0.run_dir and remaining_rounds(zdas0) == range(1, 5)


def test_has_start_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "fedavg"
    _log(run, [1.0, 1.0, 1.0])
    assert not has_start_checkpoint(run, 3)  # no checkpoint at all
    (run / "ckpt").mkdir()
    (run / "ckpt" / "latest.pt").touch()  # after round 3
    assert has_start_checkpoint(run, 3)
    assert not has_start_checkpoint(run, 2)
    (run / "ckpt" / "round_0002.pt").touch()
    assert has_start_checkpoint(run, 2)
    assert not has_start_checkpoint(run, 1)
    assert not has_start_checkpoint(tmp_path / "missing", 5)


@pytest.mark.parametrize(("kept", "latest"), [((), 3), ((2,), 3), ((2, 4), 4), ((1, 3), 3), ((2,), None)])
def test_has_start_checkpoint_agrees_with_the_checkpoint_a_branch_loads(
    tmp_path: Path, kept: tuple[int, ...], latest: int | None
) -> None:
    store = RunStore(tmp_path / "fedavg")
    store.prepare()
    for r in range(1, max((*kept, latest or 0)) + 1):
        store.append(store.metrics_path, {"round": r})
        store.save_checkpoint({"round_num": r, "state": {}})
        if r in kept:
            store.keep_checkpoint(r)
    if latest is None:
        store.ckpt_path.unlink()
    for last in range(6):
        loaded = start_checkpoint(store, last)
        expected = max((r for r in (*kept, latest or 0) if 0 < r <= last), default=None)
        assert (loaded and loaded["round_num"]) == expected, last
        assert has_start_checkpoint(store.run_dir, last) == (loaded is not None), last


def test_no_run_with_an_estimate_says_so_instead_of_0_s(tmp_path: Path) -> None:
    (zdas,) = sweep_points(tmp_path, f"[{ZDAS}]")
    lines = dry_run_lines([zdas])
    assert lines[0].startswith("new                       ?         ")
    assert lines[-1] == (
        "1 run: 1 new; no estimate yet ('?' for each: no seed of these runs has logged that kind of round) "
        "(and no archived runs: no studies/ found, $FEDAUG_STUDIES names one)"
    )


def test_runs_without_an_estimate_are_counted_beside_those_with_one(tmp_path: Path) -> None:
    # Prepare: FedAvg seed 0 finished in 1 s rounds; no seed of Fed-ZDAS has run
    zdas, fedavg0 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    _, fedavg1 = sweep_points(tmp_path, f"[{ZDAS}, fedavg]", "seed=1")
    _log(fedavg0.run_dir, [1.0, 1.0, 1.0, 1.0], finished=True)
    # Assert: seed 1 of FedAvg is costed (4 s), Fed-ZDAS is counted as having no estimate
    assert dry_run_lines([zdas, fedavg0, fedavg1])[-1] == (
        "3 runs: 1 finished, 2 new; about 4 s of run time left (round times of their seeds so far); "
        "1 run without an estimate ('?': no seed has logged that kind of round)"
    )


@pytest.mark.parametrize(
    ("seconds", "text"), [(44.6, "45 s"), (60.0, "1 min"), (3420.0, "57 min"), (78840.0, "21.9 h")]
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_a_sweep_says_how_much_is_left_before_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: two seeds of the smoke config (3 rounds); seed 0 ran, in 2 s a round
    path = write_sweep(tmp_path, "engine: {progress: false}\ngrid:\n  seed: [0, 1]\n")
    seed0 = tmp_path / "runs" / "sw" / "synthetic-dirichlet0.5_2-K6" / "fedavg" / "seed0"
    assert main(["sweep", str(path), "--grid", "seed=[0]"]) == 0
    (seed0 / "timings.jsonl").write_text("".join(f'{{"round": {r}, "round_time": 2.0}}\n' for r in (1, 2, 3)))
    # Execute
    with caplog.at_level(logging.INFO, logger="fedaug"):
        assert main(["sweep", str(path)]) == 0
    # Assert: the first line counts what is done and costs the rest by seed 0's times
    assert caplog.records[0].getMessage() == (
        "2 runs: 1 finished, 1 new; about 6 s of run time left (round times of their seeds so far) "
        "(--dry-run lists them)"
    )
