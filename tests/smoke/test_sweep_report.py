"""Tiny sweeps on synthetic data: crash or SIGKILL + rerun == uncut, 2 workers == serial, sweep -> report."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.engine.checkpoint import RunStore
from fedaug.results.report import build_tables, render
from fedaug.results.store import group_runs, load_runs
from fedaug.sweeps.sweep import expand_sweep, run_sweep
from tests.conftest import SMOKE


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))  # inherited by worker processes


def _sweep_file(tmp_path: Path, grid: str, rounds: int = 3) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"extends: {SMOKE}\nname: sw\ntrain: {{rounds: {rounds}}}\ngrid:\n{grid}")
    return path


def _files(root: Path, name: str) -> dict[Path, str]:
    return {p.relative_to(root): p.read_text() for p in sorted(root.rglob(name))}


def _report(root: Path) -> str:
    return render(build_tables(group_runs(load_runs(root)), highlight="flea"), "md")


def test_failed_run_is_reported_then_resumed_and_finished_runs_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: a reference sweep, and a crash after round 2 of seed 1 in a second one
    path = _sweep_file(tmp_path, "  method: [fedavg]\n  seed: [0, 1]\n", rounds=4)
    assert main(["sweep", str(path), "--out-dir", str(tmp_path / "ref")]) == 0
    save = RunStore.save_checkpoint

    def crash(store: RunStore, ckpt: dict) -> None:
        save(store, ckpt)
        if store.run_dir.name == "seed1" and ckpt["round_num"] == 2:
            raise RuntimeError("simulated crash")

    monkeypatch.setattr(RunStore, "save_checkpoint", crash)
    # Execute: the crash fails one run, the sweep goes on and exits 1 with the failure listed
    assert main(["sweep", str(path), "--out-dir", str(tmp_path / "cut")]) == 1
    out = capsys.readouterr().out
    assert "1 finished now, 0 already finished, 1 failed" in out
    assert "FAILED" in out and "seed1: RuntimeError: simulated crash" in out
    monkeypatch.setattr(RunStore, "save_checkpoint", save)
    cut = tmp_path / "cut" / "sw"
    timings = _files(cut, "timings.jsonl")
    result = run_sweep(expand_sweep(path, [f"out_dir={tmp_path / 'cut'}"]))
    # Assert: seed 0 skipped (its timings untouched), seed 1 resumed; every file and the report as uncut
    assert [p.name for p in result.skipped] == ["seed0"] and [p.name for p in result.finished] == ["seed1"]
    seed0 = next(p for p in timings if p.parts[-2] == "seed0")
    assert _files(cut, "timings.jsonl")[seed0] == timings[seed0]
    for name in ("metrics.jsonl", "summary.json"):
        assert _files(cut, name) == _files(tmp_path / "ref" / "sw", name)
    assert _report(cut) == _report(tmp_path / "ref" / "sw")


def test_sigkilled_sweep_reruns_nothing_finished_and_reports_the_same(tmp_path: Path) -> None:
    # Prepare: an uncut reference sweep of two runs; local_epochs makes each round long enough to kill
    path = _sweep_file(tmp_path, "  method: [fedavg]\n  seed: [0, 1]\n  train.local_epochs: [15]\n", rounds=4)

    def sweep(out: str) -> list[str]:
        return [sys.executable, "-m", "fedaug", "sweep", str(path), "--out-dir", str(tmp_path / out)]

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(sweep("ref"), check=True, env=env, capture_output=True)
    # Execute: SIGKILL the sweep once seed 0 has finished and seed 1 has written 2 rounds, then rerun it
    proc = subprocess.Popen(sweep("cut"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    cut = tmp_path / "cut" / "sw"
    deadline = time.time() + 300
    while time.time() < deadline:
        seed1 = list(cut.rglob("seed1/metrics.jsonl"))
        if seed1 and len(seed1[0].read_text().splitlines()) >= 2:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list(cut.rglob("summary.json"))) == 1, "expected seed 0 finished and seed 1 cut"
    seed0 = _files(cut, "timings.jsonl")
    done = subprocess.run(sweep("cut"), check=True, env=env, capture_output=True, text=True)
    # Assert: seed 0 not run again (its files untouched), every file and the report as the uncut sweep's
    assert "1 finished now, 1 already finished, 0 failed" in done.stdout
    assert done.stdout.endswith(f"\ntables and plots: fedaug report {cut} --plots\n")
    assert {p: t for p, t in _files(cut, "timings.jsonl").items() if "seed0" in p.parts} == {
        p: t for p, t in seed0.items() if "seed0" in p.parts
    }
    for name in ("metrics.jsonl", "summary.json"):
        assert _files(cut, name) == _files(tmp_path / "ref" / "sw", name)
    assert _report(cut) == _report(tmp_path / "ref" / "sw")


def test_two_workers_give_the_serial_results(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _sweep_file(tmp_path, "  - {method: [fedavg], seed: [0, 1]}\n  - {method: [flea], seed: [0]}\n")
    serial = run_sweep(expand_sweep(path, [f"out_dir={tmp_path / 'serial'}"]))
    with caplog.at_level(logging.INFO, logger="fedaug.sweeps.sweep"):
        parallel = run_sweep(
            expand_sweep(path, [f"out_dir={tmp_path / 'parallel'}"]), workers=2, heartbeat=0.05
        )
    assert len(serial.finished) == len(parallel.finished) == 3 and not parallel.failures
    # the workers log no rounds; the sweep says every 0.05 s how far its running runs are
    running = [r.getMessage() for r in caplog.records if r.getMessage().startswith("running: ")]
    assert running and all("/seed0 round " in line for line in running[:1])
    metrics = _files(tmp_path / "serial", "metrics.jsonl")
    assert len(metrics) == 3
    assert _files(tmp_path / "parallel", "metrics.jsonl") == metrics
    # each config.yaml is the config as given, not the workers' quiet engine: a rerun from it logs rounds
    configs = _files(tmp_path / "parallel", "config.yaml")
    assert configs == {
        p: t.replace(str(tmp_path / "serial"), str(tmp_path / "parallel"))
        for p, t in _files(tmp_path / "serial", "config.yaml").items()
    }
    assert all("progress: true" in text for text in configs.values())


def test_sweep_then_report_with_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    grid = (
        "  - {method: [fedavg, flea], seed: [0, 1]}\n"
        "  - {method: [flea], method.decor_weight: [0.0], seed: [0]}\n"
    )
    path = _sweep_file(tmp_path, grid)
    runs = tmp_path / "runs"
    assert main(["sweep", str(path), "--out-dir", str(runs)]) == 0
    out = tmp_path / "report"
    argv = [
        "report",
        str(runs),
        "--format",
        "md,csv,tex",
        "--out",
        str(out),
        "--highlight",
        "flea",
        "--plots",
    ]
    assert main(argv) == 0
    markdown = (out / "report.md").read_text()
    assert "| flea (decor_weight=0.0) |" in markdown and "(n=2)" in markdown
    assert "flea vs best other" in markdown
    assert (out / "report.tex").read_text().count("\\begin{tabular}") == 2
    assert (out / "report.csv").read_text().startswith("metric,method,setting,mean,std,n")
    pngs = sorted(p.name for p in (out / "plots").glob("*.png"))
    assert "beta_density.png" in pngs and "hparam_flea_decor_weight.png" in pngs
    assert any(name.startswith("flea_privacy_") for name in pngs)
    assert main(["report", str(runs)]) == 0
    assert "**Best test accuracy (%)**" in capsys.readouterr().out
