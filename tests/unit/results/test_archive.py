"""``fedaug archive``: a committed folder of finished runs that ``fedaug report`` merges with live runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaug.cli import main
from fedaug.errors import FedaugError
from fedaug.results.archive import archive_runs
from fedaug.results.report import write_report
from fedaug.results.store import load_runs


def _with_vectors(run_dir: Path) -> None:
    """Adds the per-client lists a real run logs to every metrics line."""
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for row in rows:
        row.update({"clients": [3, 1], "local/acc": [0.25, 0.75], "test/loss": 1.5})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_archive_keeps_what_report_reads_without_checkpoints_or_early_vectors(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run_dir = make_run(tmp_path / "runs", accs=[0.5, 0.7, 0.6])
    _with_vectors(run_dir)
    (run_dir / "timings.jsonl").write_text('{"round": 1, "round_time": 2.5}\n')
    (run_dir / "env.json").write_text('{"method_config": {"q": 1.0}}\n')
    (run_dir / "ckpt").mkdir()
    (run_dir / "ckpt" / "latest.pt").write_bytes(b"x" * 100)
    make_run(tmp_path / "runs", method="flea", accs=[0.4], finished=False)

    written = archive_runs(tmp_path / "runs", tmp_path / "archive")

    target = tmp_path / "archive" / run_dir.relative_to(tmp_path / "runs")
    assert written == [target]  # the unfinished flea run is not archived
    assert sorted(p.name for p in target.iterdir()) == [
        "config.yaml",
        "env.json",
        "metrics.jsonl",
        "summary.json",
        "timings.jsonl",
    ]
    for name in ("timings.jsonl", "env.json"):
        assert (target / name).read_text() == (run_dir / name).read_text()
    rows = [json.loads(line) for line in (target / "metrics.jsonl").read_text().splitlines()]
    scalars = [{"round": i + 1, "test/acc": a, "test/loss": 1.5} for i, a in enumerate([0.5, 0.7, 0.6])]
    assert rows[:2] == scalars[:2]  # the vectors are kept in the final round only (the fairness plot's)
    assert rows[2] == {**scalars[2], "clients": [3, 1], "local/acc": [0.25, 0.75]}
    (archived,) = load_runs(tmp_path / "archive")
    (live,) = load_runs(tmp_path / "runs")
    assert archived.summary == live.summary and archived.config == live.config


def test_archiving_is_additive_and_refreshes_present_runs(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path / "a", seed=0, accs=[0.5, 0.6])
    archive_runs(tmp_path / "a", tmp_path / "archive")
    make_run(tmp_path / "b", seed=0, accs=[0.9, 0.8])  # the same run measured again elsewhere
    make_run(tmp_path / "b", seed=1, accs=[0.7, 0.7])
    archive_runs(tmp_path / "b", tmp_path / "archive")
    best = {run.seed: run.summary["best_acc"] for run in load_runs(tmp_path / "archive")}
    assert best == {0: 0.9, 1: 0.7}


def test_report_merges_folders_and_the_first_wins_a_repeat(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path / "archive", seed=0, accs=[0.5, 0.6])
    make_run(tmp_path / "archive", seed=1, accs=[0.2, 0.4])
    make_run(tmp_path / "runs", seed=1, accs=[0.7, 0.8])
    make_run(tmp_path / "runs", seed=2, accs=[0.9, 1.0])
    out = write_report([tmp_path / "runs", tmp_path / "archive"], formats=["csv"])
    # best over seeds 0 (archive), 1 (runs, not the archive's 0.4) and 2: (0.6 + 0.8 + 1.0) / 3, std 0.2
    assert "best_acc,fedavg,uci_har Qua(2) K=75,80.0000,20.0000,3," in out.printed[0]
    single = write_report(tmp_path / "archive", formats=["csv"]).printed[0]
    assert "best_acc,fedavg,uci_har Qua(2) K=75,50.0000,14.1421,2," in single  # seeds 0 and 1: 0.6, 0.4


def test_archive_refuses_a_target_inside_the_runs_dir_and_an_empty_runs_dir(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    make_run(tmp_path / "runs")
    with pytest.raises(FedaugError, match="must be outside the runs dir"):
        archive_runs(tmp_path / "runs", tmp_path / "runs" / "archive")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FedaugError, match="no run dirs with results"):
        archive_runs(tmp_path / "empty", tmp_path / "archive")


def test_cli_archive_then_report_two_folders(
    tmp_path: Path, make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    make_run(tmp_path / "old", seed=0, accs=[0.5, 0.6])
    make_run(tmp_path / "runs", seed=1, accs=[0.7, 0.8])
    assert main(["archive", str(tmp_path / "old"), "--out", str(tmp_path / "archive")]) == 0
    assert "archived 1 runs" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "runs"), str(tmp_path / "archive"), "--format", "csv"]) == 0
    assert "best_acc,fedavg,uci_har Qua(2) K=75,70.0000,14.1421,2," in capsys.readouterr().out
    assert main(["archive", str(tmp_path / "missing"), "--out", str(tmp_path / "x")]) == 2
    assert "does not exist" in capsys.readouterr().err
