"""``fedaug archive``: a committed folder of finished runs that ``fedaug report`` merges with live runs."""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.engine.checkpoint import read_jsonl
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
        "metrics.jsonl.gz",
        "summary.json",
        "timings.jsonl.gz",
    ]
    assert (target / "env.json").read_text() == (run_dir / "env.json").read_text()
    assert gzip.decompress((target / "timings.jsonl.gz").read_bytes()) == b'{"round": 1, "round_time": 2.5}\n'
    rows = [
        json.loads(line) for line in gzip.decompress((target / "metrics.jsonl.gz").read_bytes()).splitlines()
    ]
    assert read_jsonl(target / "metrics.jsonl") == rows  # the run-dir reader finds the gzipped lines
    scalars = [{"round": i + 1, "test/acc": a, "test/loss": 1.5} for i, a in enumerate([0.5, 0.7, 0.6])]
    assert rows[:2] == scalars[:2]  # the vectors are kept in the final round only (the fairness plot's)
    assert rows[2] == {**scalars[2], "clients": [3, 1], "local/acc": [0.25, 0.75]}
    (archived,) = load_runs(tmp_path / "archive")
    (live,) = load_runs(tmp_path / "runs")
    assert archived.summary == live.summary
    # the same config but where the runs were: out_dir never changes results and is dropped when absolute
    assert archived.config == {**live.config, "out_dir": "runs"}


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


def test_archiving_twice_writes_the_same_bytes_and_old_plain_archives_still_report(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run_dir = make_run(tmp_path / "runs", accs=[0.5, 0.7, 0.6])
    (target,) = archive_runs(tmp_path / "runs", tmp_path / "archive")
    first = (target / "metrics.jsonl.gz").read_bytes()
    assert first[3:8] == bytes(5)  # the gzip header holds no file name (flags 0) and no time (mtime 0)
    os.utime(run_dir / "metrics.jsonl", (1, 1))
    archive_runs(tmp_path / "runs", tmp_path / "archive")
    assert (target / "metrics.jsonl.gz").read_bytes() == first  # git sees no change
    (run_dir / "timings.jsonl").write_text('{"round_time": 2.5, "round": 1}\n')
    archive_runs(tmp_path / "runs", tmp_path / "archive")
    (again,) = archive_runs(tmp_path / "archive", tmp_path / "archive2")  # an archive archived again
    for name in ("metrics.jsonl.gz", "timings.jsonl.gz"):
        assert (again / name).read_bytes() == (target / name).read_bytes()
    assert gzip.decompress((again / "timings.jsonl.gz").read_bytes()) == b'{"round": 1, "round_time": 2.5}\n'
    (kept,) = archive_runs(tmp_path / "runs", tmp_path / "archive3", full_precision=True)
    assert gzip.decompress((kept / "timings.jsonl.gz").read_bytes()) == b'{"round_time": 2.5, "round": 1}\n'
    # an archive written before the lines were gzipped: plain metrics.jsonl, read the same way
    (target / "metrics.jsonl").write_bytes(gzip.decompress(first))
    (target / "metrics.jsonl.gz").unlink()
    (run,) = load_runs(tmp_path / "archive", include_unfinished=True)
    assert [r["test/acc"] for r in run.metrics()] == [0.5, 0.7, 0.6]


def test_a_corrupt_gzipped_archive_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl.gz").write_bytes(b"not gzip at all")
    with pytest.raises(FedaugError, match=r"metrics\.jsonl\.gz is not a readable gzip file.*restore it"):
        read_jsonl(tmp_path / "metrics.jsonl")
    whole = gzip.compress(b'{"round": 1}\n' * 100, mtime=0)
    flipped = whole[:15] + bytes(b ^ 0xFF for b in whole[15:30]) + whole[30:]  # deflate data damaged
    for damaged in (whole[:-6], flipped):  # cut short (EOFError), damaged (zlib.error)
        (tmp_path / "metrics.jsonl.gz").write_bytes(damaged)
        with pytest.raises(FedaugError, match="not a readable gzip file"):
            read_jsonl(tmp_path / "metrics.jsonl")


def test_archived_floats_are_rounded_unless_full_precision(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run_dir = make_run(tmp_path / "runs", accs=[0.5, 0.7, 1 / 3])
    (run_dir / "timings.jsonl").write_text('{"round": 1, "round_time": 14.21572292700148}\n')
    (target,) = archive_runs(tmp_path / "runs", tmp_path / "archive")
    metrics = [
        json.loads(line) for line in gzip.decompress((target / "metrics.jsonl.gz").read_bytes()).splitlines()
    ]
    assert [m["test/acc"] for m in metrics] == [0.5, 0.7, 0.33333333]  # 8 significant digits
    timings = json.loads(gzip.decompress((target / "timings.jsonl.gz").read_bytes()))
    assert timings == {"round": 1, "round_time": 14.22}  # 4
    (kept,) = archive_runs(tmp_path / "runs", tmp_path / "full", full_precision=True)
    metrics = [
        json.loads(line) for line in gzip.decompress((kept / "metrics.jsonl.gz").read_bytes()).splitlines()
    ]
    assert metrics[-1]["test/acc"] == 1 / 3
    assert (
        json.loads(gzip.decompress((kept / "timings.jsonl.gz").read_bytes()))["round_time"]
        == 14.21572292700148
    )
