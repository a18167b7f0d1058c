"""The folded benchmarks run on the CPU with tiny settings and write what their old scripts wrote:
``step_variants.py --compare`` the JSON of ``channels_last.py``, ``precision_step.py`` and ``eval_batch.py``
(the committed results' keys), ``gpu.py --modes default`` the run facts of ``device_runs.py``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT

BENCHMARKS = REPO_ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
MACHINE_KEYS = {
    "cpu_model",
    "cpu_capability",
    "native_bf16",
    "loadavg",
    "device",
    "gpu_name",
    "date",
    "cpu_note",
}


def _run(script: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def _keys(report: dict[str, Any]) -> set[str]:
    return set(report) - MACHINE_KEYS


@pytest.mark.parametrize(
    ("compare", "committed"),
    [
        ("memory_format", "channels_last.json"),
        ("precision", "precision_step_harnet.json"),
        ("eval_batch", "eval_batch.json"),
    ],
)
def test_step_variants_write_the_json_their_old_scripts_wrote(
    tmp_path: Path, compare: str, committed: str
) -> None:
    out = tmp_path / "x.json"
    tiny = [
        "--models",
        "harnet",
        "--repeats",
        "1",
        "--steps",
        "1",
        "--test-size",
        "64",
        "--batches",
        "16",
        "64",
    ]
    done = _run("step_variants.py", "--compare", compare, *tiny, "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    old = json.loads((RESULTS / committed).read_text())
    assert _keys(report) == _keys(old)
    if compare == "memory_format":
        assert list(report["models"]) == ["harnet"]
        # train_batch (--train-batch) is newer than the committed file
        assert set(report["models"]["harnet"]) == set(old["models"]["harnet"]) | {"train_batch"}
        assert set(report["models"]["harnet"]["step_ms"]) == {"contiguous", "channels_last"}
    elif compare == "precision":
        assert set(report["step_ms"]) == {"float32", "bf16"} and report["test_size"] == 64
        assert report["speedup_step"] == pytest.approx(
            report["step_ms"]["float32"] / report["step_ms"]["bf16"]
        )
    else:
        assert set(report["eval_s"]) == {
            f"{f}/{b}" for f in ("contiguous", "channels_last") for b in (16, 64)
        }
    assert all(v > 0 for v in _numbers(report))


def _numbers(report: dict[str, Any]) -> list[float]:
    found: list[float] = []
    for key, value in report.items():
        if key in MACHINE_KEYS or key in {"threads", "input_shape", "test_size", "batch_size"}:
            continue
        if isinstance(value, dict):
            found += _numbers(value)
        elif isinstance(value, float):
            found.append(value)
    return found


def test_an_unknown_comparison_is_refused_naming_the_valid_ones(tmp_path: Path) -> None:
    done = _run("step_variants.py", "--compare", "dtype", "--out", str(tmp_path / "x.json"))
    assert done.returncode == 2
    assert "invalid choice: 'dtype' (choose from 'memory_format', 'precision', 'eval_batch')" in done.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.slow  # a round of the default preset on UCI-HAR after counting HARNet's FLOPs: about a minute
def test_gpu_default_mode_reports_what_device_runs_reported(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "gpu.json"
    args = ["--device", "cpu", "--methods", "fedavg", "--modes", "default", "--rounds", "1"]
    overrides = [
        "--set",
        "engine.num_threads=1",
        "--set",
        "train.local_epochs=1",
        "--set",
        "data.data_dir=" + str(shared_data),
    ]
    done = _run("gpu.py", *args, *overrides, "--out", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["cpu_reference"]["fedavg"]["best_acc"] == 0.7486
    (row,) = report["methods"]["fedavg"]
    assert row["mode"] == "default" and row["rounds"] == 1
    assert row["first_round_s"] == pytest.approx(row["median_round_s"], abs=1e-3)
    assert 0 < row["outside_rounds_s"] < row["wall_s"]
    assert set(row) >= {"best_acc", "last10_acc", "final_acc"}
    startup = row["startup"]  # the first run of the process
    assert "benchmark" in startup["phases"] and startup["total_s"] > 0


@pytest.mark.slow  # clones the repository and starts pytest there: 13 s alone, 66 s in a loaded full run
def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_test_suite_times_a_fresh_clone_and_parses_pytests_summary(tmp_path: Path) -> None:
    out = tmp_path / "suite.json"
    done = _run("test_suite.py", "--pytest-args", "tests/unit/test_steps_files.py", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(out.read_text())
    assert (
        report["exit_code"] == 0 and report["command"] == "python -m pytest -q tests/unit/test_steps_files.py"
    )
    from tests.unit.test_steps_files import STEPS

    assert report["outcomes"] == {"passed": len(STEPS) + 1}  # one case per steps file, plus the smoke check's
    assert report["slowest"] and all(
        r["test"].startswith("tests/unit/test_steps_files.py::") for r in report["slowest"]
    )
    assert report["seconds"] > 0 and len(report["commit"]) == 40
    here = [extra for extra, modules in (("flower", "flwr"), ("tracking", "mlflow")) if _importable(modules)]
    assert report["extras_installed"] == here  # the README says which install its figures are of


def test_test_suite_refuses_to_write_a_subsets_time_where_the_readme_reads_the_whole_suites() -> None:
    done = _run("test_suite.py", "--pytest-args", "tests/unit/test_steps_files.py")
    assert done.returncode == 2 and "give --out" in done.stderr


def test_test_suite_reads_pytests_summary_line_and_durations() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import test_suite
    finally:
        sys.path.remove(str(BENCHMARKS))
    output = (
        "....\n========== slowest 3 durations ==========\n"
        "282.10s call     tests/smoke/test_flower.py::test_tls_demo\n"
        "3.50s setup    tests/unit/a.py::test_b\n"
        "12.00s call     tests/unit/a.py::test_c[x y]\n"
        "2052 passed, 80 skipped, 35 deselected, 1 warning in 973.40s (0:16:13)\n"
    )
    assert test_suite.outcomes(output) == {"passed": 2052, "skipped": 80, "deselected": 35, "warnings": 1}
    assert [(r["seconds"], r["test"]) for r in test_suite.slowest(output, 2)] == [
        (282.1, "tests/smoke/test_flower.py::test_tls_demo"),
        (12.0, "tests/unit/a.py::test_c[x y]"),
    ]
    assert test_suite.outcomes("1 failed, 3 passed, 2 errors in 1.0s") == {
        "failed": 1,
        "passed": 3,
        "errors": 2,
    }


@pytest.mark.slow  # ~30 s: FlopCounterMode over ResNet-18 and MobileNetV2
def test_flops_writes_both_counts_and_they_differ_only_for_mobilenet(tmp_path: Path) -> None:
    out = tmp_path / "flops.json"
    done = _run("flops.py", "--out", str(out))
    assert done.returncode == 0, done.stderr
    models = json.loads(out.read_text())["models"]
    assert models == json.loads((RESULTS / "flops_per_image.json").read_text())["models"]  # nothing timed
    differ = [n for n, m in models.items() if m["gflop_train"] != m["gflop_train_flop_counter_mode"]]
    assert differ == ["mobilenet_v2_cifar"]
