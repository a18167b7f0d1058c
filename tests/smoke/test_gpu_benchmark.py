"""``benchmarks/gpu.py --preset`` runs every conv-net mode and its floor on the CPU with tiny settings (the
graph modes unrecorded) and writes the rows the GPU window reads; a bad preset or mode: one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "benchmarks" / "gpu.py"
TINY = [
    "--device",
    "cpu",
    "--steps",
    "1",
    "--batch",
    "2",
    "--clients",
    "2",
    "--floor-batch",
    "4",
    "--packed",
    "3",
]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=REPO_ROOT
    )


def test_conv_preset_reports_every_mode_against_the_floor(tmp_path: Path) -> None:
    out = tmp_path / "conv.json"
    done = _run("--preset", "smoke_bn_cnn", *TINY, "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["device"] == "cpu"
    (preset,) = report["presets"]
    assert preset["model"] == "bn_cnn_mnist"
    assert preset["floor"]["batch"] == 4
    modes = [row["mode"] for row in preset["modes"]]
    assert modes == [
        "eager",
        "channels_last",
        "bf16",
        "bf16_channels_last",
        "graphs",
        "batched",
        "batched_graphs",
        "packed",
    ]
    assert preset["processes_packed"] == 3
    expected_images = {"batched": 4, "batched_graphs": 4, "packed": 6}  # batch 2 x 2 clients, x 3 processes
    for row in preset["modes"]:
        assert row["images_per_step"] == expected_images.get(row["mode"], 2)
        assert row["images_per_s"] > 0
        # s/round, s/run and runs/hour follow from images/s and the preset's 1,000 images x 2 rounds
        assert row["s_per_round"] == pytest.approx(1000 / row["images_per_s"], rel=1e-2)
        assert row["runs_per_hour"] == pytest.approx(3600 / (2 * row["s_per_round"]), rel=1e-2)
        assert row["fraction_of_peak"] is None  # no dense peak known for a CPU


def test_bad_preset_and_mode_are_one_line_and_exit_2(tmp_path: Path) -> None:
    done = _run("--preset", "cifar10_vgg", *TINY, "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert "unknown --preset cifar10_vgg; valid choices: default, cifar10_mobilenet" in done.stderr
    done = _run(
        "--preset", "smoke_bn_cnn", "--modes", "packed_graphs", *TINY, "--out", str(tmp_path / "x.json")
    )
    assert done.returncode == 2
    assert "unknown --modes packed_graphs for --preset; valid choices: eager," in done.stderr
    done = _run("--preset", "smoke_bn_cnn", *TINY, "--packed", "0", "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert "--packed must be at least 1, got 0" in done.stderr
    assert not (tmp_path / "x.json").exists()


def test_failing_packed_processes_are_reported_with_their_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # each process sends its error back instead of leaving the parent waiting for a result (600 s)
    monkeypatch.syspath_prepend(str(REPO_ROOT / "benchmarks"))  # spawned processes import gpu_steps too
    import gpu_steps

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="a packed process failed: KeyError: 'no_such_preset'"):
        gpu_steps.packed_seconds("no_such_preset", torch.device("cpu"), 2, 1, 2)
    assert time.monotonic() - start < 120


@pytest.mark.slow  # about 30 s of CPU: two runs, the tests' imports, two benchmarks
def test_throughput_script_writes_its_eight_files_on_the_cpu(tmp_path: Path) -> None:
    # scripts/gpu_throughput.sh with tiny settings: every stage exits 0 within its TIME budget
    out = tmp_path / "out"
    env = {
        **os.environ,
        "OUT": str(out),
        "DEVICE": "cpu",
        "RUN_CONFIG": "smoke",
        "ROUNDS": "1",
        "PRESETS": "smoke_bn_cnn",
        "STEPS": "1",
        "CONV_ARGS": "--batch 2 --clients 2 --floor-batch 4 --packed 2",
        "EVAL_ARGS": "--model harnet --runs 1 2 --samples 8 --eval-batch 4 --check-samples 4 --repeats 1",
        "HEAD_ARGS": "--samples 32 --repeats 1 --threads 1",
        "OMP_NUM_THREADS": "1",
    }
    script = REPO_ROOT / "scripts" / "gpu_throughput.sh"
    done = subprocess.run(["bash", str(script), "400"], env=env, capture_output=True, text=True, timeout=450)
    assert done.returncode == 0, done.stdout + done.stderr
    files = sorted(p.name for p in out.iterdir())
    assert files == [
        "conv.json",
        "conv.log",
        "flea_head_passes.json",
        "machine.txt",
        "many_run_eval.json",
        "runs.txt",
        "stages.txt",
        "tests_throughput.txt",
    ]
    stages = (out / "stages.txt").read_text().splitlines()
    assert [line.split(" exit ")[0] for line in stages] == [
        "tests",
        "run_fedavg_false",
        "run_fedavg_padded",
        "run_flea_false",
        "run_flea_padded",
        "flea_head_passes",
        "flea_head_passes_graphs",
        "many_run_eval",
        "conv",
    ]
    assert all(" exit 0 at " in line for line in stages), stages
    runs = (out / "runs.txt").read_text()
    for method in ("fedavg", "flea"):  # sequential (with graphs on a GPU) and padded batched clients
        for batched in ("false", "padded"):
            assert f"{method} batched_clients={batched} rounds 1 wall_s " in runs
    assert runs.count(" INFO start-up ") == 4  # each run's cold start, phase by phase
    heads = json.loads((out / "flea_head_passes.json").read_text())  # both head-pass runs in one file
    assert [c["method"] for c in heads["eager"]["cases"]] == ["flea", "flea_official"]
    assert heads["graphs"]["command"].endswith(" --graphs")
    assert all(c["cuda_graphs"] for c in heads["graphs"]["cases"])
    assert not any(c["cuda_graphs"] for c in heads["eager"]["cases"])
    evaluation = json.loads((out / "many_run_eval.json").read_text())
    assert [row["runs"] for row in evaluation["cases"][0]["rows"]] == [1, 2]
    conv = json.loads((out / "conv.json").read_text())
    assert conv["presets"][0]["modes"][-1]["mode"] == "packed"


def test_many_run_eval_checks_the_stacked_pass_then_times_both_ways(tmp_path: Path) -> None:
    # 3 HARNets on 10 samples in batches of 4 (a short last batch): stacked predictions equal separate ones
    out = tmp_path / "eval.json"
    script = REPO_ROOT / "benchmarks" / "many_run_eval.py"
    tiny = ["--device", "cpu", "--model", "harnet", "--samples", "10", "--eval-batch", "4", "--repeats", "2"]
    done = subprocess.run(
        [sys.executable, str(script), *tiny, "--runs", "1", "3", "--check-samples", "5", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["device"] == "cpu" and report["benchmark"] == "many_run_eval"
    (case,) = report["cases"]
    assert (case["model"], case["input_shape"], case["samples"]) == ("harnet", [1, 128, 9], 10)
    assert case["float64_max_logit_diff"] < 1e-12
    assert [row["runs"] for row in case["rows"]] == [1, 3]
    for row in case["rows"]:
        assert row["float32_argmax_agreement"] == 1.0
        assert [len(t) for t in row["times_s"].values()] == [2, 2]
        assert row["speedup"] == pytest.approx(row["separate_s"] / row["stacked_s"], rel=1e-2)
        assert row["samples_per_s_stacked"] == pytest.approx(row["runs"] * 10 / row["stacked_s"], rel=1e-2)
    done = subprocess.run(
        [sys.executable, str(script), *tiny, "--runs", "0", "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("error: --runs must be at least 1, got 0")
    assert not (tmp_path / "x.json").exists()
