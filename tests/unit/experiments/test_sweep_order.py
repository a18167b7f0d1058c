"""Sweep scheduling: a run that branches from a FedAvg run of the same sweep waits for it, then runs first;
``--order longest-first`` hands out the run with the most time left."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.runs.branch import branch_source
from fedaug.sweeps.estimate import remaining_seconds
from fedaug.sweeps.order import Schedule, SweepPoint
from fedaug.sweeps.sweep import run_sweep
from tests.unit.experiments.helpers import BASE, ZDAS, sweep_points


def test_branching_point_waits_for_its_fedavg_point_then_comes_first(tmp_path: Path) -> None:
    # Prepare: Fed-ZDAS (FedAvg in rounds 1-2) listed before FedProx and FedAvg.
    zdas, fedprox, fedavg = sweep_points(tmp_path, f"[{ZDAS}, fedprox, fedavg]")
    fedavg2 = sweep_points(tmp_path, "[fedavg]", "seed=1")[0]  # another FedAvg run, not ZDAS's
    schedule = Schedule([zdas, fedprox, fedavg, fedavg2])
    # Assert: ZDAS waits for the seed-0 FedAvg run dir; FedProx never branches.
    assert branch_source(zdas.config) == fedavg.run_dir
    assert branch_source(fedprox.config) is None and branch_source(fedavg.config) is None
    assert schedule.waits_for() == {zdas.run_dir: fedavg.run_dir}
    # Execute / Assert: the others in order; ZDAS only once FedAvg has ended, and then before the rest.
    assert schedule.next() is fedprox
    schedule.ended(fedprox)
    assert schedule.next() is fedavg
    schedule.ended(fedavg)
    assert schedule.next() is zdas
    assert schedule.next() is fedavg2
    assert schedule.next() is None


def test_points_added_later_wait_for_a_fedavg_point_still_going_not_for_one_that_ended(
    tmp_path: Path,
) -> None:
    zdas, fedavg = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    # added after FedAvg was handed out, before it ended: ZDAS waits for it
    going = Schedule([fedavg])
    assert going.next() is fedavg
    going.add([zdas])
    assert going.waits_for() == {zdas.run_dir: fedavg.run_dir} and going.next() is None
    going.ended(fedavg)
    assert going.next() is zdas
    # added after FedAvg ended: ready at once
    done = Schedule([fedavg])
    assert done.next() is fedavg
    done.ended(fedavg)
    done.add([zdas])
    assert done.waits_for() == {} and done.next() is zdas


def test_without_branching_or_without_its_fedavg_point_nothing_waits(tmp_path: Path) -> None:
    zdas, fedavg = sweep_points(tmp_path, f"[{ZDAS}, fedavg]", "engine.branch_from_fedavg=false")
    assert branch_source(zdas.config) is None
    assert Schedule([zdas, fedavg]).waits_for() == {}
    (alone,) = sweep_points(tmp_path, f"[{ZDAS}]")  # its FedAvg run is not part of this sweep
    assert branch_source(alone.config) is not None
    assert Schedule([alone]).waits_for() == {}


def test_dry_run_says_what_waits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    zdas, fedavg = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    sweep = tmp_path / "sweep.yaml"
    sets = [arg for item in [*BASE, "engine.branch_from_fedavg=true"] for arg in ("--set", item)]
    assert main(["sweep", str(sweep), *sets, "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(f"{zdas.run_dir}  (after {fedavg.run_dir})")
    assert lines[1].endswith(str(fedavg.run_dir))


@pytest.mark.parametrize("workers", [1, 2])
def test_sweep_listing_the_branching_run_first_still_branches(tmp_path: Path, workers: int) -> None:
    # Without the schedule, ZDAS (first in the grid) would start before FedAvg kept its round-2 checkpoint and
    # run rounds 1-2 itself (no branch.json).
    points = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    result = run_sweep(points, workers=workers)
    assert len(result.finished) == 2 and not result.failures
    assert result.finished[-1] == points[0].run_dir
    assert json.loads((points[0].run_dir / "branch.json").read_text())["round"] == 2


def test_a_grid_goes_on_from_its_archive_on_a_fresh_machine(tmp_path: Path) -> None:
    # Prepare: the grid ran (FedAvg, then ZDAS branched off its round-2 checkpoint) and was archived
    from fedaug.results.archive import archive_runs
    from fedaug.sweeps.estimate import dry_run_lines

    points = sweep_points(tmp_path, f"[{ZDAS}, fedavg]")
    zdas, fedavg = points
    assert not run_sweep(points, workers=1).failures
    first = (zdas.run_dir / "metrics.jsonl").read_text()
    root = fedavg.run_dir.parents[2]  # runs/sw
    archive_runs(root, tmp_path / "archive")
    # Execute: a fresh machine: no run dirs, the archive copied back, the ZDAS run not archived yet
    shutil.rmtree(root)
    shutil.copytree(tmp_path / "archive", root)
    shutil.rmtree(zdas.run_dir)
    lines = dry_run_lines(points)
    result = run_sweep(points, workers=1)
    # Assert: FedAvg is taken as finished; ZDAS, with no checkpoint to start from, said so and ran from
    # round 1 to the same metrics as the branched run
    assert lines[0].endswith(f"{zdas.run_dir}  (from round 1: no FedAvg checkpoint in {fedavg.run_dir})")
    assert lines[1].startswith("finished")
    assert result.skipped == [fedavg.run_dir] and result.finished == [zdas.run_dir]
    assert not (zdas.run_dir / "branch.json").exists()
    assert (zdas.run_dir / "metrics.jsonl").read_text() == first


def test_longest_first_hands_out_unknown_costs_first_in_order_then_the_longest(tmp_path: Path) -> None:
    # Prepare: four runs; two without an estimate, two with 10 s and 30 s left
    points = sweep_points(tmp_path, "[fedavg, fedprox, feddecorr, fedlc]")
    fedavg, fedprox, feddecorr, fedlc = points
    left: dict[Path, float | None] = {
        fedavg.run_dir: 10.0,
        fedprox.run_dir: None,
        feddecorr.run_dir: 30.0,
        fedlc.run_dir: None,
    }

    def cost(point: SweepPoint) -> float | None:
        return left[point.run_dir]

    schedule = Schedule(points, cost)
    # Execute / Assert: unknown ones in grid order, then by time left, most first
    assert [schedule.next() for _ in range(5)] == [fedprox, fedlc, feddecorr, fedavg, None]
    # Assert: without a cost the grid's order
    assert Schedule(points).next() is fedavg


def test_longest_first_costs_a_run_by_its_siblings_round_times(tmp_path: Path) -> None:
    # Prepare: seed 1 of FedAvg and FedProx; seed 0 of each logged 3 rounds, FedProx's 4x as slow
    points = sweep_points(tmp_path, "[fedavg, fedprox]", "seed=1")
    for point, seconds in zip(points, (1.0, 4.0), strict=True):
        sibling = point.run_dir.parent / "seed0"
        sibling.mkdir(parents=True)
        lines = [json.dumps({"round": r, "round_time": seconds}) for r in (1, 2, 3)]
        (sibling / "timings.jsonl").write_text("\n".join(lines) + "\n")
    rounds = points[0].config.train.rounds
    # Execute
    costs = [remaining_seconds(p) for p in points]
    schedule = Schedule(points, remaining_seconds)
    # Assert: all rounds left, costed at the sibling's mean round time; FedProx goes first
    assert costs == [1.0 * rounds, 4.0 * rounds]
    assert [schedule.next(), schedule.next()] == [points[1], points[0]]
    # Execute: the sweep itself, one worker, runs them in that order
    result = run_sweep(points, order="longest-first")
    # Assert
    assert result.finished == [points[1].run_dir, points[0].run_dir]
    assert [p.run_dir for p in points] != result.finished  # the grid's order was the other one
