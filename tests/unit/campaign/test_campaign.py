"""`fedaug campaign run / import / status` on the CPU: a tiny campaign of smoke-preset runs in a tmp studies
folder, round trip, budget, unfinished runs, refused imports and the next call continuing the list."""

from __future__ import annotations

import functools
import json
import shutil
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.cli.main import main as fedaug_main
from fedaug.config.load import dump_yaml, load_config
from fedaug.engine.checkpoint import logged_round_times
from fedaug.errors import FedaugError
from fedaug.sweeps.order import SweepPoint
from fedaug.sweeps.sweep import SweepResult, execute
from tests.conftest import SMOKE
from tools.campaign import run as campaign_run
from tools.campaign.__main__ import main as campaign_main
from tools.campaign.importer import unpack
from tools.campaign.ledger import Ledger
from tools.campaign.plan import Pending, makespan, minutes_text, select
from tools.campaign.run import BudgetExpired, BudgetSchedule, hard_stop


@pytest.fixture(autouse=True)
def _given_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host probe given, so that no test spends the probe's seconds of its budget measuring one."""
    monkeypatch.setenv("FEDAUG_HOST_PROBE_S", "0.01")


def main(argv: Sequence[str]) -> int:
    """``fedaug ARGV`` in this process: ``fedaug campaign ...`` is the tool's own command (the installed
    ``fedaug`` runs it as ``python -m tools.campaign``, a subprocess whose output tests cannot capture)."""
    if argv[0] == "campaign":
        return campaign_main(list(argv[1:]))
    return fedaug_main(argv)


CAMPAIGN = """
studies: .
workers: {{cpu: 1}}
grids:
  - name: tiny
    preset: {smoke}
    study: tiny
    set: [train.rounds=2, engine.num_threads=1]
    grid: {{seed: [0, 1, 2], method: [fedavg]}}
    cost_s: {{cpu: 400}}
    report: {{runs: [runs], plots: false}}
  - name: second
    preset: {smoke}
    study: group/second
    set: [train.rounds=2, engine.num_threads=1]
    grid: {{seed: [0], method: [fedprox]}}
    cost_s: {{cpu: 100}}
    report: {{runs: [runs], plots: false}}
"""


@pytest.fixture
def studies(tmp_path: Path) -> Path:
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "campaign.yaml").write_text(CAMPAIGN.format(smoke=SMOKE))
    return folder


def _run(studies: Path, tmp_path: Path, out: str, budget: str) -> int:
    """``campaign run --choose-once``: the runs the budget holds by their estimates, however fast they end
    (a test's runs take seconds against estimates of minutes)."""
    return main(
        [
            "campaign", "run", "--campaign", str(studies / "campaign.yaml"), "--budget", budget,
            "--device", "cpu", "--out", str(tmp_path / out), "--runs-dir", str(tmp_path / "runs"),
            "--data-dir", str(tmp_path / "data"), "--choose-once",
        ]
    )  # fmt: skip


def _status(studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    capsys.readouterr()
    args = ["campaign", "status", "--campaign", str(studies / "campaign.yaml"), "--kind", "cpu"]
    assert main([*args, "--runs-dir", str(tmp_path / "runs")]) == 0
    return capsys.readouterr().out.splitlines()


def _members(archive: Path) -> list[str]:
    with tarfile.open(archive) as tar:
        return sorted(m.name for m in tar.getmembers() if m.isfile())


def test_run_import_status_round_trip_within_the_budget_and_resumed(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: nothing archived; 3 + 1 runs of 400 s and 100 s by the cost table, one at a time.
    lines = _status(studies, tmp_path, capsys)
    assert lines[1].split() == ["tiny", "0/3", "0.0", "0.3", "20.0"] and lines[2].split() == [
        "second",
        "0/1",
        "0.0",
        "0.0",
        "1.7",
    ]
    # core-hours spent, core-hours left, then minutes one at a time
    assert lines[3].split() == ["all", "0/4", "0.0", "0.4", "21.7"]
    # A budget of 850 s holds two 400-s runs (in list order), not the third, nor the 100-s run after it.
    assert _run(studies, tmp_path, "out1", "850") == 0
    summary = json.loads((tmp_path / "out1" / "campaign_summary.json").read_text())
    paths = [r["path"] for r in summary["runs"]]
    assert [r["status"] for r in summary["runs"]] == ["finished", "finished"]
    assert [Path(p).name for p in paths] == ["seed0", "seed1"] and summary["unfinished"] == []
    assert summary["archives"] == ["tiny.tar.gz"] and summary["per_grid"]["tiny"]["finished"] == 2
    assert all(r["measured_s"] > 0 and r["estimate_s"] == 400.0 for r in summary["runs"])
    assert summary["data"]["room_mib"] < 64 and (tmp_path / "out1" / "campaign.log").read_text()
    files = _members(tmp_path / "out1" / "tiny.tar.gz")
    assert {Path(f).name for f in files} == {
        "config.yaml", "env.json", "summary.json", "metrics.jsonl.gz", "timings.jsonl.gz"
    }  # fmt: skip
    assert all(f.startswith("tiny/runs/synthetic-") for f in files) and len(files) == 10
    # Import: the runs land in the study, its report is rebuilt, status counts them.
    assert (
        main(["campaign", "import", str(tmp_path / "out1"), "--campaign", str(studies / "campaign.yaml")])
        == 0
    )
    for path in paths:
        assert (studies / "tiny" / "runs" / path / "summary.json").is_file()
    assert "fedavg" in (studies / "tiny" / "report.md").read_text()
    # the last tiny run is now costed by the archived runs' round times (well under a second) and a 5-s start,
    # not by the table's 400 s; the second grid's FedProx run, of the same setting but untimed, by those
    # FedAvg runs (their probe is the thread clock's) times FedProx's round ratio, not by its table's 100 s
    tiny, second, total = (line.split() for line in _status(studies, tmp_path, capsys)[1:4])
    assert tiny[:2] == ["tiny", "2/3"] and 5 / 60 < float(tiny[4]) < 0.2  # [3]: core-hours left
    assert second[:2] == ["second", "0/1"] and 5 / 60 < float(second[4]) < 0.2
    assert total[:2] == ["all", "2/4"]
    assert float(total[4]) == pytest.approx(float(tiny[4]) + float(second[4]), abs=0.11)
    spent = sum(t for p in paths for _, t in logged_round_times(studies / "tiny" / "runs" / p))
    assert spent > 0 and tiny[2] == total[2] == f"{spent / 3600:.1f}"  # the two archived runs' rounds
    ledger = Ledger(studies)
    run = studies / "tiny" / "runs" / paths[0]
    assert ledger.spent(run, "cpu") == pytest.approx(sum(t for _, t in logged_round_times(run)))
    assert ledger.spent(run, "cuda") is None  # spent on another device kind: not this kind's hours
    # The next call continues the list: tiny's seed 2, then the second grid, into a second archive.
    assert _run(studies, tmp_path, "out2", "1000") == 0
    summary = json.loads((tmp_path / "out2" / "campaign_summary.json").read_text())
    assert [(r["grid"], Path(r["path"]).name) for r in summary["runs"]] == [
        ("tiny", "seed2"),
        ("second", "seed0"),
    ]
    assert summary["archives"] == ["tiny.tar.gz", "group__second.tar.gz"]
    assert (
        main(["campaign", "import", str(tmp_path / "out2"), "--campaign", str(studies / "campaign.yaml")])
        == 0
    )
    assert (studies / "group" / "second" / "report.md").is_file()
    assert [line.split()[1] for line in _status(studies, tmp_path, capsys)[1:]] == ["3/3", "1/1", "4/4"]


def test_a_run_cut_by_the_budget_is_listed_and_never_archived(
    studies: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cut(points: Sequence[SweepPoint], *, schedule: BudgetSchedule, **kwargs: Any) -> None:
        first, second = schedule.next(), schedule.next()
        assert first is not None and second is not None
        execute(first.config)  # the first finishes, the second is stopped after one round
        second.run_dir.mkdir(parents=True)
        (second.run_dir / "config.yaml").write_text(dump_yaml(second.config))
        (second.run_dir / "metrics.jsonl").write_text('{"round": 1, "test/acc": 0.5}\n')
        raise BudgetExpired

    monkeypatch.setattr(campaign_run, "run_sweep", cut)
    assert _run(studies, tmp_path, "out", "850") == 0  # two 400-s runs
    summary = json.loads((tmp_path / "out" / "campaign_summary.json").read_text())
    assert [(r["status"], r["rounds"]) for r in summary["runs"]] == [
        ("finished", "2/2"),
        ("unfinished", "1/2"),
    ]
    assert summary["stopped_at_budget"] and summary["unfinished"] == [summary["runs"][1]["path"]]
    assert {Path(f).parts[-2] for f in _members(tmp_path / "out" / "tiny.tar.gz")} == {"seed0"}


def _one_run_archive(studies: Path, tmp_path: Path) -> Path:
    """A campaign output with seed 0 of tiny (budget 500: one 400-s run), unpacked into ``tmp/x``."""
    assert _run(studies, tmp_path, "out", "500") == 0
    with tarfile.open(tmp_path / "out" / "tiny.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    (run_dir,) = [p.parent for p in (tmp_path / "x").rglob("config.yaml")]
    return run_dir


def _repack(tmp_path: Path) -> None:
    (tmp_path / "out" / "tiny.tar.gz").unlink()
    with tarfile.open(tmp_path / "out" / "tiny.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "x" / "tiny", arcname="tiny")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("lr", "does not match its grid point of tiny: train.lr differ"),
        ("unfinished", "is unfinished (no summary.json of 2 rounds)"),
        ("moved", "is at no grid point of study tiny"),
        ("occupied", "a finished run of another config"),
    ],
)
def test_import_refuses_a_run_off_its_grid_point_or_unfinished_and_writes_nothing(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: str, message: str
) -> None:
    run_dir = _one_run_archive(studies, tmp_path)
    if change == "lr":
        config = run_dir / "config.yaml"
        config.write_text(config.read_text().replace("lr: 0.001", "lr: 0.01"))
    elif change == "unfinished":
        (run_dir / "summary.json").unlink()
    elif change == "moved":
        run_dir.rename(run_dir.parent / "seed7")
    else:  # the study already holds a finished run of another config where this one would go
        there = studies / run_dir.relative_to(tmp_path / "x")
        shutil.copytree(run_dir, there)
        (there / "config.yaml").write_text(
            (there / "config.yaml").read_text().replace("lr: 0.001", "lr: 0.01")
        )
    _repack(tmp_path)
    before = sorted((p, p.stat().st_mtime_ns) for p in studies.rglob("*"))
    capsys.readouterr()
    assert (
        main(["campaign", "import", str(tmp_path / "out"), "--campaign", str(studies / "campaign.yaml")]) == 2
    )
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("fedaug: error: run tiny/runs/synthetic-") and message in line
    assert sorted((p, p.stat().st_mtime_ns) for p in studies.rglob("*")) == before  # nothing written


def test_budget_schedule_starts_only_what_ends_before_the_deadline(tmp_path: Path) -> None:
    points = [SweepPoint(load_config([SMOKE], [f"seed={k}"]), tmp_path / str(k), {}) for k in range(3)]
    costs = {points[0].run_dir: 50.0, points[1].run_dir: 30.0, points[2].run_dir: 5.0}
    schedule = BudgetSchedule(points, lambda p: costs[p.run_dir], deadline=100.0, clock=lambda: 60.0)
    # at 60 s of 100: the 50-s run would end at 110 and is passed over; the 30-s and 5-s runs start
    assert [schedule.next(), schedule.next(), schedule.next()] == [points[1], points[2], None]
    assert schedule.not_started == [points[0]]
    # the round lines' job eta costs later runs by the same estimates (0, the advancing run's: unknown)
    costs[points[2].run_dir] = 0.0
    assert [schedule.estimate(p) for p in points] == [50.0, 30.0, None]


def test_a_budget_schedule_asks_for_more_when_a_worker_is_free_and_stops_asking_when_none_fit(
    tmp_path: Path,
) -> None:
    points = [SweepPoint(load_config([SMOKE], [f"seed={k}"]), tmp_path / str(k), {}) for k in range(4)]
    costs = {p.run_dir: 10.0 for p in points}
    answers = [[points[1], points[2]], [points[3]], []]
    asked: list[int] = []

    def refill() -> list[SweepPoint]:
        asked.append(1)
        return answers.pop(0)

    schedule = BudgetSchedule(points[:1], lambda p: costs[p.run_dir], 100.0, lambda: 0.0, refill=refill)
    # Act: a worker asks five times (two workers, each asking again as its run ends)
    handed = [schedule.next() for _ in range(5)]
    # Assert: its own point, then the refills' in order; the empty answer ends the asking
    assert handed == [points[0], points[1], points[2], points[3], None]
    assert len(asked) == 3 and schedule.next() is None and len(asked) == 3
    assert schedule.started == {p.run_dir for p in points}


def test_makespan_hands_the_longest_first_to_the_free_slot() -> None:
    assert makespan([3, 5, 3, 4, 3], 2) == 10.0  # 5 | 4, then 3 -> 7, 3 -> 8, 3 -> 10
    assert makespan([], 4) == 0.0 and makespan([7.0], 16) == 7.0


def test_minutes_text_counts_the_runs_without_an_estimate() -> None:
    def pending(*costs: float | None) -> Any:
        return cast(Any, [SimpleNamespace(cost=c) for c in costs])

    assert minutes_text(pending(), 4) == "0.0"
    assert minutes_text(pending(600.0, 300.0, 300.0), 2) == "10.0"  # 600 | 300 + 300
    assert minutes_text(pending(120.0, None), 16) == "2.0 (+1 runs without an estimate)"
    assert minutes_text(pending(None, None), 16) == "? (+2 runs without an estimate)"


def test_hard_stop_raises_in_the_main_thread_at_the_deadline() -> None:
    with pytest.raises(BudgetExpired), hard_stop(0.05):
        time.sleep(2)
    with hard_stop(0.05):  # ends before: nothing raised, the timer cleared
        pass
    time.sleep(0.1)


def test_the_data_step_passes_over_a_grid_whose_data_is_missing_and_counts_what_is_carried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "campaign.yaml").write_text(
        CAMPAIGN.format(smoke=SMOKE).replace("    study: tiny\n", "    study: tiny\n    data: [blobs]\n")
    )
    started: list[list[str]] = []
    monkeypatch.setattr(
        campaign_run, "run_sweep", lambda points, **kw: started.append([p.config.method.name for p in points])
    )
    assert _run(folder, tmp_path, "out", "1000") == 0  # no data/blobs: tiny is passed over, second runs
    summary = json.loads((tmp_path / "out" / "campaign_summary.json").read_text())
    assert summary["data"]["skipped_grids"] == ["tiny"] and started == [["fedprox"]]
    assert summary["data"]["data_mib"] == {} and summary["runs"][0]["status"] == "not_started"
    assert summary["archives"] == []  # the (faked) run never started: nothing archived
    (tmp_path / "data" / "blobs").mkdir(parents=True)
    (tmp_path / "data" / "blobs" / "x.bin").write_bytes(b"\0" * 2**19)
    assert _run(folder, tmp_path, "out2", "850") == 0  # two 400-s runs of tiny
    summary = json.loads((tmp_path / "out2" / "campaign_summary.json").read_text())
    assert summary["data"]["skipped_grids"] == [] and summary["data"]["data_mib"] == {"blobs": 0.5}
    room = 64 - summary["data"]["tree_mib"] - 0.5
    assert summary["data"]["room_mib"] == pytest.approx(room) and started[-1] == ["fedavg", "fedavg"]


def test_dry_run_lists_what_the_budget_takes_longest_first_and_writes_nothing(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["campaign", "run", "--campaign", str(studies / "campaign.yaml"), "--budget", "1000", "--dry-run"]
    capsys.readouterr()
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "out"), "--workers", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # two slots: 400 + 400 | 400 + 100 fit in 1000 s; the list's order is kept, the runs start longest first
    assert [line.split()[0] for line in lines[:-1]] == ["~400", "~400", "~400", "~100"]
    assert lines[-1] == "4 runs, 2 at once: about 800 s of the 1000 s budget"
    assert not (tmp_path / "out").exists() and not (tmp_path / "runs").exists()
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "out"), "--only", "second"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("1 runs, ")
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "out"), "--only", "tiny,third"]) == 2
    assert capsys.readouterr().err.strip().startswith("fedaug: error: no grid 'third' in ")
    # --set reaches the plan as it reaches the runs: a bad override is refused, not passed over
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "out"), "--set", "train.rounds=0"]) == 2
    assert "train.rounds" in capsys.readouterr().err


def test_a_run_in_two_grids_is_planned_once_in_the_earlier_grid(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pilot's point that is also a point of a later grid (same identity, another run dir) is pending only
    in the earlier grid: the later one plans its other points, and status still counts the point in both."""
    text = (studies / "campaign.yaml").read_text()
    pilot = (
        "  - name: pilot\n    preset: {0}\n    study: tiny\n    set: [train.rounds=2, engine.num_threads=1]\n"
    )
    pilot += "    grid: {{seed: [1], method: [fedavg], train.lr: [0.001]}}\n    cost_s: {{cpu: 300}}\n"
    pilot += "    report: {{runs: [runs], plots: false}}\n"
    (studies / "campaign.yaml").write_text(text.replace("grids:\n", "grids:\n" + pilot.format(SMOKE), 1))
    args = ["campaign", "run", "--campaign", str(studies / "campaign.yaml"), "--budget", "5000", "--dry-run"]
    capsys.readouterr()
    assert main([*args, "--device", "cpu", "--out", str(tmp_path / "out")]) == 0
    lines = capsys.readouterr().out.splitlines()
    # tiny's seed 1 is the pilot's run (train.lr=0.001 is the smoke preset's own value): four runs, not five
    assert [line.split()[0] for line in lines[:-1]] == ["~400", "~400", "~300", "~100"]
    assert [x.split()[-1] for x in lines if "seed1" in x] == [
        "tiny/runs/train.lr=0.001/synthetic-dirichlet0.5_2-K6/fedavg/seed1"  # the pilot's run dir
    ]
    status = _status(studies, tmp_path, capsys)
    assert [line.split()[:2] for line in status[1:4]] == [
        ["pilot", "0/1"],
        ["tiny", "0/3"],
        ["second", "0/1"],
    ]


def _long_grid(tmp_path: Path, *, workers: int, seeds: str, cost_s: float) -> Path:
    """A studies folder whose campaign has one grid of 400-round smoke runs priced at ``cost_s``."""
    folder = tmp_path / "studies"
    folder.mkdir()
    (folder / "campaign.yaml").write_text(
        f"workers: {{cpu: {workers}}}\ngrids:\n  - {{name: long, preset: {SMOKE}, study: long, "
        f"set: [train.rounds=400], grid: {{seed: [{seeds}]}}, cost_s: {{cpu: {cost_s}}}}}\n"
    )
    return folder


def test_the_budget_stops_runs_going_in_worker_processes(tmp_path: Path) -> None:
    # two 400-round runs, 2 workers, a 6-s budget: both start (cost table: 1 s), neither finishes
    folder = _long_grid(tmp_path, workers=2, seeds="0, 1", cost_s=1)
    start = time.monotonic()
    assert _run(folder, tmp_path, "out", "6") == 0
    summary = json.loads((tmp_path / "out" / "campaign_summary.json").read_text())
    assert summary["stopped_at_budget"] and time.monotonic() - start < 30
    assert [r["status"] for r in summary["runs"]] == ["unfinished", "unfinished"] and summary[
        "archives"
    ] == []
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["campaign.log", "campaign_summary.json"]


def test_import_refuses_an_archive_member_outside_its_folder(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "payload").write_text("x")
    with tarfile.open(tmp_path / "out" / "tiny.tar.gz", "w:gz") as tar:
        tar.add(tmp_path / "payload", arcname="../escaped.txt")
    capsys.readouterr()
    assert (
        main(["campaign", "import", str(tmp_path / "out"), "--campaign", str(studies / "campaign.yaml")]) == 2
    )
    assert "holds '../escaped.txt', not a run's file; refusing it" in capsys.readouterr().err
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "out" / "escaped.txt").exists()


def test_a_failed_run_is_listed_with_its_error_and_not_archived(
    studies: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(points: Sequence[SweepPoint], *, schedule: BudgetSchedule, **kwargs: Any) -> SweepResult:
        point = schedule.next()
        assert point is not None
        return SweepResult(failures=[(point.run_dir, "ValueError: boom")])

    monkeypatch.setattr(campaign_run, "run_sweep", fail)
    assert _run(studies, tmp_path, "out", "500") == 0
    summary = json.loads((tmp_path / "out" / "campaign_summary.json").read_text())
    (row,) = summary["runs"]
    assert (row["status"], row["error"], row["rounds"]) == ("unfinished", "ValueError: boom", "0/2")
    assert summary["archives"] == [] and summary["unfinished"] == [row["path"]]


def test_a_method_option_set_before_a_method_axis_is_refused_not_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`set: [method.proximal_mu=0.5]` with `grid: {method: [fedprox]}`: the axis replaces the method and
    drops the option, so the runs would use the default mu."""
    folder = tmp_path / "studies"
    folder.mkdir()
    grid = f"preset: {SMOKE}, study: s, grid: {{method: [fedprox]}}, cost_s: {{cpu: 10}}"
    (folder / "campaign.yaml").write_text(
        f"grids:\n  - {{name: lost, set: [method.proximal_mu=0.5], {grid}}}\n"
        f"  - {{name: kept, {grid.replace('[fedprox]', '[{name: fedprox, proximal_mu: 0.5}]')}}}\n"
    )
    args = ["campaign", "status", "--campaign", str(folder / "campaign.yaml"), "--kind", "cpu"]
    assert main([*args, "--only", "lost"]) == 2
    err = capsys.readouterr().err.strip()
    assert "grid lost: set method.proximal_mu=0.5 does not reach fedprox" in err and "\n" not in err
    assert "{name: fedprox, proximal_mu: 0.5}" in err
    assert main([*args, "--only", "kept", "--runs-dir", str(tmp_path / "runs")]) == 0
    run = ["campaign", "run", "--campaign", str(folder / "campaign.yaml"), "--budget", "100", "--dry-run"]
    capsys.readouterr()
    assert (
        main([*run, "--only", "kept", "--out", str(tmp_path / "o"), "--set", "method.proximal_mu=0.1"]) == 2
    )
    assert "set method.proximal_mu=0.1 does not reach fedprox" in capsys.readouterr().err


def test_select_stops_at_the_archive_limit() -> None:
    """Runs of a new study start only while the command may write another archive (``--max-archives``):
    three studies of one 1-s run each, a 100-s budget."""

    def state(study: str) -> Any:
        grid = SimpleNamespace(name=study, study=study)
        return SimpleNamespace(grid=grid, pending=[SimpleNamespace(grid=grid, cost=1.0, point=None)])

    states = cast(Any, [state("a"), state("b"), state("c")])
    assert [c.grid.study for c in select(states, 100.0, 1)] == ["a", "b", "c"]
    assert [c.grid.study for c in select(states, 100.0, 1, max_studies=2)] == ["a", "b"]
    assert [c.grid.study for c in select(states, 100.0, 1, max_studies=1)] == ["a"]
    assert [c.grid.study for c in select(states, 100.0, 1, max_studies=1, taken=["c"])] == ["c"]


def test_fedaug_campaign_hands_its_arguments_to_the_checkouts_tool(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    from fedaug.cli import campaign as cli

    assert cli.campaign_argv(["-v", "campaign", "status", "--kind", "cpu"]) == [
        "-v",
        "status",
        "--kind",
        "cpu",
    ]
    assert cli.campaign_argv(["run", "campaign"]) is None  # a config named campaign is not the command
    assert fedaug_main(["campaign", "status", "--campaign", str(tmp_path / "none.yaml")]) == 2
    assert "campaign file" in capfd.readouterr().err  # the tool's own one-line error, through the subprocess


def test_fedaug_campaign_outside_a_checkout_says_where_it_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fedaug.cli import campaign as cli

    monkeypatch.setattr(cli, "checkout_with_tools", lambda start: None)
    assert fedaug_main(["campaign", "status"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fedaug: error: fedaug campaign runs the project's campaign from a source checkout")


def _small_archive(path: Path) -> bytes:
    """A .tar.gz of one run-like folder, its bytes (big enough that a cut lands inside the data)."""
    source = path.parent / "src"
    (source / "tiny" / "runs" / "seed0").mkdir(parents=True)
    (source / "tiny" / "runs" / "seed0" / "config.yaml").write_text("name: x\n" + "# pad\n" * 2000)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(source / "tiny", arcname="tiny")
    return path.read_bytes()


def test_import_of_a_truncated_archive_is_one_line_and_writes_nothing(
    studies: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "out").mkdir()
    whole = _small_archive(tmp_path / "whole.tar.gz")
    (tmp_path / "out" / "tiny.tar.gz").write_bytes(whole[: len(whole) // 2])
    before = sorted((p, p.stat().st_mtime_ns) for p in studies.rglob("*"))
    capsys.readouterr()
    assert (
        main(["campaign", "import", str(tmp_path / "out"), "--campaign", str(studies / "campaign.yaml")]) == 2
    )
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"fedaug: error: cannot unpack {tmp_path / 'out' / 'tiny.tar.gz'}: ")
    assert "Traceback" not in err
    assert sorted((p, p.stat().st_mtime_ns) for p in studies.rglob("*")) == before


@functools.cache
def _valid_archive() -> bytes:
    """The valid archive the property damages, made once (a gzip header holds the time it was made)."""
    with tempfile.TemporaryDirectory() as folder:
        return _small_archive(Path(folder) / "whole.tar.gz")


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_a_damaged_archive_unpacks_or_is_refused_naming_it(data: st.DataObject) -> None:
    _damaged_archive_property(data)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None)
@given(data=st.data())
def test_a_damaged_archive_unpacks_or_is_refused_naming_it_long(data: st.DataObject) -> None:
    _damaged_archive_property(data)


def _damaged_archive_property(data: st.DataObject) -> None:
    """Any cut of a valid archive, or any bytes of it changed, unpacks or is one FedaugError naming it."""
    with tempfile.TemporaryDirectory() as folder_name:
        folder = Path(folder_name)
        whole = _valid_archive()
        cut = data.draw(st.integers(0, len(whole)), label="cut")
        damaged = bytearray(whole[:cut])
        for _ in range(data.draw(st.integers(0, 3), label="flips")):
            if damaged:
                at = data.draw(st.integers(0, len(damaged) - 1), label="at")
                damaged[at] = data.draw(st.integers(0, 255), label="byte")
        archive = folder / "damaged.tar.gz"
        archive.write_bytes(bytes(damaged))
        try:
            unpack(archive, folder / "into")
        except FedaugError as error:
            assert str(error).startswith(f"cannot unpack {archive}: ") or str(archive) in str(error)
            assert "\n" not in str(error)


def test_advance_starts_the_next_run_that_cannot_finish_and_it_resumes_next_time(tmp_path: Path) -> None:
    # a 400-round run priced at 1000 s, a 5-s budget: without --advance nothing starts; with it the run
    # starts, stops at the budget with rounds done, and the next command continues from there
    folder = _long_grid(tmp_path, workers=1, seeds="0", cost_s=1000)
    assert _run(folder, tmp_path, "out", "5") == 0
    assert json.loads((tmp_path / "out" / "campaign_summary.json").read_text())["runs"] == []
    base = ["--advance", "--runs-dir", str(tmp_path / "runs"), "--data-dir", str(tmp_path / "data")]
    base += ["--campaign", str(folder / "campaign.yaml"), "--device", "cpu"]
    assert main(["campaign", "run", "--budget", "5", "--out", str(tmp_path / "a"), *base]) == 0
    summary = json.loads((tmp_path / "a" / "campaign_summary.json").read_text())
    assert [r["status"] for r in summary["runs"]] == ["unfinished"] and summary["archives"] == []
    (metrics,) = (tmp_path / "runs").rglob("metrics.jsonl")
    first = len(metrics.read_text().splitlines())
    assert 0 < first < 400
    assert main(["campaign", "run", "--budget", "5", "--out", str(tmp_path / "b"), *base]) == 0
    assert len(metrics.read_text().splitlines()) > first  # resumed, not restarted


def test_select_with_advance_adds_the_first_point_that_does_not_fit_and_stops() -> None:
    grid = SimpleNamespace(name="g", study="g")
    pending = [Pending(cast(Any, grid), cast(Any, i), c) for i, c in enumerate((30.0, 50.0, 80.0, 1.0))]
    states = cast(Any, [SimpleNamespace(grid=grid, pending=pending)])
    chosen = select(states, 100.0, 1, advance=True)
    assert [(c.point, c.advances) for c in chosen] == [(0, False), (1, False), (2, True)]


def test_select_passes_over_what_does_not_fit_and_takes_later_points_that_do() -> None:
    """Backfill: 30 + 50 of 100 s, then the 80-s point cannot fit (passed over), the 1-s one after it can;
    an unknown cost is passed over too; on two workers the 80-s point fits beside the others."""
    grid = SimpleNamespace(name="g", study="g")
    costs = (30.0, 50.0, 80.0, None, 1.0, 19.0, 0.5)
    points = [SimpleNamespace(run_dir=Path(f"p{i}")) for i in range(len(costs))]
    pending = [Pending(cast(Any, grid), cast(Any, p), c) for p, c in zip(points, costs, strict=True)]
    states = cast(Any, [SimpleNamespace(grid=grid, pending=pending)])

    def chosen(*args: Any, **kwargs: Any) -> list[int]:
        return [points.index(c.point) for c in select(states, *args, **kwargs)]

    assert chosen(100.0, 1) == [0, 1, 4, 5]  # 30 + 50 + 1 + 19: the 0.5-s one no longer fits
    assert chosen(100.0, 2) == [0, 1, 2, 4, 5, 6]  # longest first on two: 80 | 50 + 30 + 19 = 99
    assert chosen(10.0, 1) == [4, 6]
    assert chosen(200.0, 1, advance=True) == [0, 1, 2]  # --advance: the unknown cost ends it
    assert chosen(100.0, 1, advance=True) == [0, 1, 2] and select(states, 100.0, 1, advance=True)[-1].advances


def _tiny_campaign(studies: Path, tmp_path: Path, *flags: str) -> tuple[dict[str, Any], str]:
    """Runs the fixture's campaign on the CPU with ``flags``; its summary and log."""
    args = ["campaign", "run", "--campaign", str(studies / "campaign.yaml"), *flags, "--device", "cpu"]
    args += ["--out", str(tmp_path / "out"), "--runs-dir", str(tmp_path / "runs")]
    assert main([*args, "--data-dir", str(tmp_path / "data")]) == 0
    summary = json.loads((tmp_path / "out" / "campaign_summary.json").read_text())
    assert [(r["grid"], Path(r["path"]).name, r["status"]) for r in summary["runs"]] == [
        ("tiny", "seed0", "finished"),
        ("tiny", "seed1", "finished"),
        ("tiny", "seed2", "finished"),
        ("second", "seed0", "finished"),
    ]
    return summary, (tmp_path / "out" / "campaign.log").read_text()


def test_without_advance_a_command_still_chooses_again_when_its_runs_end_early(
    studies: Path, tmp_path: Path
) -> None:
    # 400-s estimates, a 900-s budget: the first pass takes seeds 0-1 (800 s); they end in seconds, so the
    # command chooses again from what is left (seed 2 and the second grid's run fit) and starts nothing
    # that cannot finish: all four runs (asserted by the helper) finished, none was cut
    _, log = _tiny_campaign(studies, tmp_path, "--budget", "900")
    assert log.count("choosing again") == 1 and "advancing" not in log


def test_advance_chooses_again_when_the_runs_end_before_the_budget(studies: Path, tmp_path: Path) -> None:
    # 400-s estimates, a 500-s budget: the first pass takes seed 0 and advances seed 1; both end in seconds,
    # so the command chooses again (seed 2, then the second grid advancing) rather than leave the core idle
    summary, log = _tiny_campaign(studies, tmp_path, "--budget", "500", "--advance")
    assert summary["archives"] == ["tiny.tar.gz", "group__second.tar.gz"] and not summary["stopped_at_budget"]
    # the first pass's schedule asked for more when its runs were handed out: one selection, one refill
    assert log.count("choosing again") == 1 and log.count("runs selected") == 1
    assert sum(n.endswith("summary.json") for n in _members(tmp_path / "out" / "tiny.tar.gz")) == 3


def test_an_import_while_the_campaign_runs_takes_the_runs_finished_so_far(
    studies: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: while the second of two runs goes (seeds 0 and 1 by the 850-s budget), `campaign import` of
    # the --out folder, as a session about to end does
    from fedaug.sweeps import sweep

    imported: list[list[str]] = []

    def execute_after_import(config: Any, **kwargs: Any) -> Any:
        if config.seed == 1:
            argv = [
                "campaign",
                "import",
                str(tmp_path / "out1"),
                "--campaign",
                str(studies / "campaign.yaml"),
            ]
            assert main(argv) == 0
            imported.append(sorted(p.parent.name for p in (studies / "tiny").rglob("summary.json")))
        return execute(config, **kwargs)

    monkeypatch.setattr(sweep, "execute", execute_after_import)
    # Act
    assert _run(studies, tmp_path, "out1", "850") == 0
    # Assert: the mid-campaign import found seed 0 archived and nothing of the run still going; nothing but
    # archives is left in the folder (the rename left no partial file); a second import adds seed 1
    assert imported == [["seed0"]]
    assert sorted(p.name for p in (tmp_path / "out1").iterdir()) == [
        "campaign.log", "campaign_summary.json", "tiny.tar.gz"
    ]  # fmt: skip
    assert (
        main(["campaign", "import", str(tmp_path / "out1"), "--campaign", str(studies / "campaign.yaml")])
        == 0
    )
    assert sorted(p.parent.name for p in (studies / "tiny").rglob("summary.json")) == ["seed0", "seed1"]
