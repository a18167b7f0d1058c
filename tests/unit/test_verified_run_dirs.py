"""Every file a resume, a skip or a report trusts is verified (fedaug.runs.verify): each failure
class that used to give a wrong result with exit code 0 is refused naming the file, or repaired so that the
run ends byte-identical to an uninterrupted one."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.engine.checkpoint import read_checkpoint
from fedaug.errors import CheckpointError
from fedaug.results.store import load_run, load_runs
from fedaug.runs.runner import run_experiment
from fedaug.runs.verify import IDENTITY_NAME
from tests.conftest import REPO_ROOT
from tests.unit import run_dirs


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_dirs.finished(tmp_path_factory.getbasetemp() / "verified_session")


def refused(capsys: pytest.CaptureFixture[str], argv: list[str], expected: str) -> None:
    """``fedaug ARGV`` is exit 2 with one line containing ``expected``."""
    capsys.readouterr()
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert len(err) == 1, err
    assert expected in err[0], err[0]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in sorted(run_dir.rglob("*")) if p.is_file()}


def edit(path: Path, change: Callable[[list[str]], list[str]]) -> None:
    path.write_text("".join(change(path.read_text().splitlines(keepends=True))))


# --- checkpoints ---


def test_64_flipped_bytes_in_a_checkpoint_are_refused(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: torch's zip reader checks no CRC, so the digest is what notices the weights."""
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    path = run_dir / "ckpt" / "latest.pt"
    data = bytearray(path.read_bytes())
    tensor = max(torch.load(path, weights_only=True)["state"]["model_state"].values(), key=torch.numel)
    weights = data.index(tensor.numpy().tobytes()[:256])  # inside the largest tensor's bytes
    data[weights : weights + 64] = bytes(b ^ 0xFF for b in data[weights : weights + 64])
    path.write_bytes(bytes(data))
    before = snapshot(run_dir)
    refused(capsys, run_dirs.argv(tmp_path), "latest.pt is corrupt or not a fedaug checkpoint (its content")
    assert snapshot(run_dir) == before  # config.yaml, env.json not rewritten


def test_a_checkpoint_whose_weights_changed_under_its_digest_is_refused(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    path = run_dir / "ckpt" / "latest.pt"
    ckpt = torch.load(path, weights_only=True)
    assert ckpt["format"] == 3 and len(ckpt["sha256"]) == 64
    first = next(iter(ckpt["state"]["model_state"].values()))
    first.view(-1)[0] += 1e-3
    torch.save(ckpt, path)
    refused(capsys, run_dirs.argv(tmp_path), "(its content does not match its SHA-256 digest)")


def test_a_legacy_checkpoint_without_digest_still_loads_with_a_warning(
    finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    path = run_dir / "ckpt" / "latest.pt"
    ckpt = read_checkpoint(path)
    torch.save({**ckpt, "format": 1}, path)  # as fedaug wrote it before the digest
    with caplog.at_level(logging.WARNING):
        run_experiment(run_dirs.config(tmp_path))
    assert "has no digest (written by an older fedaug)" in caplog.text
    assert run_dirs.results(run_dir) == run_dirs.results(finished)


# --- round logs ---


def test_a_partial_last_line_after_the_checkpoint_is_dropped_and_the_run_ends_identical(
    finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    third = (finished / "metrics.jsonl").read_text().splitlines(keepends=True)[2]
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write(third[: len(third) // 2])  # killed while writing round 3's line
    with caplog.at_level(logging.WARNING):
        run_experiment(run_dirs.config(tmp_path))
    assert "metrics.jsonl: dropping its partial last line" in caplog.text
    assert run_dirs.results(run_dir) == run_dirs.results(finished)


def test_a_kill_between_metrics_line_and_checkpoint_repeats_that_round_identically(
    finished: Path, tmp_path: Path
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    third = (finished / "metrics.jsonl").read_text().splitlines(keepends=True)[2]
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write(third)
    run_experiment(run_dirs.config(tmp_path))
    assert run_dirs.results(run_dir) == run_dirs.results(finished)


DIGEST_REFUSAL = "differ from those latest.pt recorded (SHA-256): a value was changed"

BAD_LOGS = [
    # (id, file, damage, expected text); the run is cut back to round 2 unless finished
    ("cut-mid-line", "metrics.jsonl", lambda ls: [ls[0][:40]], "metrics.jsonl: 0 rounds logged where 2 or 3"),
    ("garbled-middle", "metrics.jsonl", lambda ls: [ls[0], "{garbled\n"], "line 2 is not a JSON object"),
    ("duplicated", "metrics.jsonl", lambda ls: [ls[0], ls[0]], "line 2 is round 1, expected round 2"),
    ("no-round", "metrics.jsonl", lambda ls: [ls[0], '{"lr": 0.001}\n'], "line 2 has no integer 'round'"),
    ("deleted", "metrics.jsonl", lambda ls: [], "metrics.jsonl: 0 rounds logged where 2 or 3 belong"),
    ("gap", "metrics.jsonl", lambda ls: [ls[1]], "line 1 is round 2, expected round 1"),
    ("timings-gap", "timings.jsonl", lambda ls: [ls[1]], "timings.jsonl: line 1 is round 2"),
    ("timings-deleted", "timings.jsonl", lambda ls: [], "timings.jsonl: 0 rounds logged where 1 or 2"),
    ("blank-line", "metrics.jsonl", lambda ls: [ls[0], "\n", ls[1]], "line 2 is not a JSON object: ''"),
    ("value-edited", "metrics.jsonl", lambda ls: [ls[0].replace("0.001", "0.002", 1), ls[1]], DIGEST_REFUSAL),
]


@pytest.mark.parametrize(
    ("name", "damage", "expected"), [case[1:] for case in BAD_LOGS], ids=[c[0] for c in BAD_LOGS]
)
def test_a_damaged_log_of_an_unfinished_run_is_refused_before_anything_is_rewritten(
    finished: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    damage: Callable[[list[str]], list[str]],
    expected: str,
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    edit(run_dir / name, damage)
    before = snapshot(run_dir)
    refused(capsys, run_dirs.argv(tmp_path), expected)
    assert snapshot(run_dir) == before


# --- finished runs: skip and report ---

FINISHED_DAMAGE = [
    ("metrics-deleted", "metrics.jsonl", lambda ls: [], "0 complete rounds, but the run finished 3"),
    (
        "metrics-cut",
        "metrics.jsonl",
        lambda ls: [*ls[:2], ls[2][:30]],
        "2 complete rounds and a line cut short",
    ),
    ("metrics-duplicated", "metrics.jsonl", lambda ls: [ls[0], ls[0], ls[2]], "line 2 is round 1"),
    (
        "metrics-value-edited",
        "metrics.jsonl",
        lambda ls: [ls[0].replace("0.001", "0.002", 1), *ls[1:]],
        DIGEST_REFUSAL,
    ),
    (
        "summary-edited",
        "summary.json",
        lambda ls: [json.dumps({**json.loads("".join(ls)), "best_acc": 0.99})],
        "summary.json: best_acc is 0.99, but metrics.jsonl gives",
    ),
]


@pytest.mark.parametrize(
    ("name", "damage", "expected"), [c[1:] for c in FINISHED_DAMAGE], ids=[c[0] for c in FINISHED_DAMAGE]
)
def test_a_damaged_finished_run_is_neither_skipped_nor_reported(
    finished: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    damage: Callable[[list[str]], list[str]],
    expected: str,
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path)
    edit(run_dir / name, damage)
    before = snapshot(run_dir)
    refused(capsys, run_dirs.argv(tmp_path), expected)
    refused(capsys, ["report", str(tmp_path)], expected)  # it reads the checkpoint's record (not its weights)
    assert snapshot(run_dir) == before


@pytest.mark.parametrize(
    "copied",
    [("metrics.jsonl", "summary.json"), ("metrics.jsonl", "summary.json", IDENTITY_NAME, "config.yaml")],
)
def test_numbers_copied_in_from_another_run_are_refused_by_report(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], copied: tuple[str, ...]
) -> None:
    """Issue 68: metrics and summary that agree with each other but come from another run (here seed 1)
    were reported as this run's; its checkpoint recorded other metrics (and, with its config, another
    config)."""
    # Prepare: another finished run, and a copy of the finished run with that run's files put in
    other = dataclasses.replace(run_dirs.config(tmp_path / "other"), seed=1)
    run_experiment(other)
    run_dir = run_dirs.copy_run(finished, tmp_path / "runs")
    for name in copied:
        shutil.copyfile(run_dir_for(other) / name, run_dir / name)
    before = snapshot(run_dir)
    # Execute, Assert
    expected = (
        "metrics.jsonl: its rounds 1..3 differ from those latest.pt recorded (SHA-256): a value was changed, "
        "or the file was copied in from another run"
        if len(copied) == 2  # with the other run's config too, the checkpoint's identity refuses it first
        else "(ckpt/latest.pt): differs in seed (the run used 0, config.yaml says 1)"
    )
    refused(capsys, ["report", str(tmp_path / "runs")], expected)
    assert snapshot(run_dir) == before


def test_an_edited_config_yaml_is_refused_by_run_and_report(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path)
    edit(run_dir / "config.yaml", lambda ls: [line.replace("lr: 0.001", "lr: 0.01") for line in ls])
    before = snapshot(run_dir)
    expected = (
        "config.yaml no longer matches the config the run was started with (identity.json): differs in "
        "train.lr (the run used 0.001, config.yaml says 0.01)"
    )
    refused(capsys, ["run", str(run_dir / "config.yaml")], expected)
    refused(capsys, ["report", str(tmp_path)], expected)
    assert snapshot(run_dir) == before


def test_an_edited_identity_is_refused(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path)
    edit(run_dir / IDENTITY_NAME, lambda ls: [line.replace("0.001", "0.01") for line in ls])
    refused(capsys, run_dirs.argv(tmp_path), "identity.json is corrupt or not a fedaug run identity")


def test_the_intact_finished_run_is_skipped_and_reported(finished: Path, tmp_path: Path) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path)
    before = snapshot(run_dir)
    assert run_experiment(run_dirs.config(tmp_path)) == run_dirs.results(finished)[1]
    run = load_run(run_dir)
    assert run is not None and run.finished and run.summary == run_dirs.results(finished)[1]
    assert snapshot(run_dir) == before


def test_a_summary_off_its_metrics_past_the_seventh_digit_is_rewritten_from_them(
    finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the run-dir fuzzer: a summary.json value edited at its 11th significant digit passed the
    check (it compares to 7 digits, for summaries of older versions) and the skipped run reported that
    number. Now the run rewrites the summary from its metrics with a WARNING, and report shows the metrics'
    value without writing."""
    run_dir = run_dirs.copy_run(finished, tmp_path)
    good = run_dirs.results(finished)[1]
    edited = {**good, "best_acc": float(good["best_acc"]) * (1 + 3e-11)}  # type: ignore[arg-type]
    assert edited["best_acc"] != good["best_acc"]
    (run_dir / "summary.json").write_text(json.dumps(edited))
    run = load_run(run_dir)  # report: the metrics' numbers, the file untouched
    assert run is not None and run.summary == good
    assert json.loads((run_dir / "summary.json").read_text()) == edited
    with caplog.at_level(logging.WARNING, logger="fedaug"):
        assert run_experiment(run_dirs.config(tmp_path)) == good
    assert json.loads((run_dir / "summary.json").read_text()) == good
    assert any("best_acc" in r.message and "rewritten from the metrics" in r.message for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedaug"):
        assert run_experiment(run_dirs.config(tmp_path)) == good  # repaired: nothing more to say
    assert not [r for r in caplog.records if "rewritten" in r.message]


def test_archived_legacy_runs_without_digests_are_still_reported() -> None:
    """Run dirs archived under studies/ before identity.json (gzipped logs, summaries from older code)."""
    root = REPO_ROOT / "studies" / "flea_table1_har" / "h200" / "runs" / "uci_har-dirichlet0.1-K75"
    runs = load_runs(root)
    assert len(runs) == 5  # flea seed2 was archived unfinished
    assert not any((run.path / IDENTITY_NAME).exists() for run in runs)
    assert all(run.finished for run in runs)


def test_an_unfinished_run_is_reported_with_a_partial_last_line(finished: Path, tmp_path: Path) -> None:
    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=2)
    with open(run_dir / "metrics.jsonl", "a") as handle:
        handle.write('{"round": 3, "lr"')  # a run still writing
    run = load_run(run_dir, include_unfinished=True)
    assert run is not None and not run.finished and run.summary["rounds"] == 2


def test_rewind_refuses_metrics_shorter_than_the_checkpoint(finished: Path, tmp_path: Path) -> None:
    from fedaug.engine.checkpoint import RunStore

    run_dir = run_dirs.copy_run(finished, tmp_path, after_round=1)
    with pytest.raises(CheckpointError, match="1 rounds logged, but the checkpoint is of round 2"):
        RunStore(run_dir).rewind(2)


def test_report_reads_a_run_whose_checkpoint_it_cannot_read_with_a_warning(
    finished: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Only a checkpoint that says otherwise refuses a report; one that cannot be read is named."""
    run_dir = run_dirs.copy_run(finished, tmp_path)
    (run_dir / "ckpt" / "latest.pt").write_bytes(b"x" * 100)
    with caplog.at_level(logging.WARNING):
        run = load_run(run_dir)
    assert run is not None and run.summary == run_dirs.results(finished)[1]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning.startswith(f"{run_dir}: its numbers are not checked against its checkpoint: "), warning
    assert "latest.pt is corrupt or not a fedaug checkpoint" in warning
