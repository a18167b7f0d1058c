"""Refactors keep results: ``fedaug run`` reproduces the metrics recorded before them (``tests/golden``).

On the machine kind the goldens were made on (same CPU make, CPU capability and torch version) every
``metrics.jsonl`` must be byte-identical; elsewhere floating-point kernels may differ in the last bits, so
every number is compared to 1e-4 relative (an Intel Xeon against the AMD EPYC goldens: up to 1.1e-5
after two rounds of FLea) and everything else exactly.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from fedaug.cli.main import main
from fedaug.runtime.machine import cpu_model
from tests.conftest import REPO_ROOT, SMOKE

GOLDEN = REPO_ROOT / "tests" / "golden"
SMOKE_METHODS = sorted(p.stem for p in (GOLDEN / "smoke").glob("*.jsonl"))


META = json.loads((GOLDEN / "meta.json").read_text())


@pytest.fixture(autouse=True)
def _golden_threads() -> Iterator[None]:
    """The goldens' torch thread count (another test may have left the process at 1 thread; reductions over
    other thread counts round differently)."""
    before = torch.get_num_threads()
    torch.set_num_threads(META["threads"])
    yield
    torch.set_num_threads(before)


def _same_machine_kind() -> bool:
    """Same torch, vector capability and CPU make: an Intel Xeon and an AMD EPYC are both AVX512 to
    torch but round some kernels differently (``fedaug.runtime.machine``), so bytes are compared on one make
    only."""
    meta = META
    return (
        meta["torch"] == torch.__version__
        and meta["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        and cpu_model().startswith(meta["cpu_model"])
    )


def _close(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7)
    return bool(a == b)


def _assert_matches(made: Path, golden: Path) -> None:
    assert made.is_file(), f"no metrics at {made}"
    if _same_machine_kind():
        assert made.read_bytes() == golden.read_bytes(), f"{made} differs from {golden}"
        return
    rows = [json.loads(line) for line in made.read_text().splitlines()]
    expected = [json.loads(line) for line in golden.read_text().splitlines()]
    assert _close(rows, expected), f"{made} differs from {golden} beyond 1e-4"


def test_goldens_cover_the_methods_that_run_on_the_smoke_preset() -> None:
    assert len(SMOKE_METHODS) == 16 and {
        "fedavg",
        "flea",
        "flea_eq6",
        "flea_official",
        "ccvr",
        "qffl",
    } <= set(SMOKE_METHODS)


def test_smoke_runs_of_every_method_reproduce_the_goldens(tmp_path: Path) -> None:
    # Execute: one command, every method on the smoke preset (synthetic blobs, MLP, 6 clients, 3 rounds)
    argv = ["run", str(SMOKE), "--method", ",".join(SMOKE_METHODS)]
    assert main([*argv, "--out-dir", str(tmp_path)]) == 0
    # Assert
    setting = tmp_path / "smoke" / "synthetic-dirichlet0.5_2-K6"
    for method in SMOKE_METHODS:
        _assert_matches(setting / method / "seed0" / "metrics.jsonl", GOLDEN / "smoke" / f"{method}.jsonl")


@pytest.mark.slow
def test_the_default_main_job_reproduces_its_golden_rounds(tmp_path: Path) -> None:
    """The README's main job (FedAvg and FLea on UCI-HAR), its first 2 rounds (minutes on 2 cores)."""
    # Execute
    assert main(["run", "--set", "train.rounds=2", "--out-dir", str(tmp_path)]) == 0
    # Assert
    setting = tmp_path / "default" / "train.rounds=2" / "uci_har-quantity2-K75"
    for method in ("fedavg", "flea"):
        golden = GOLDEN / "default_2rounds" / f"{method}.jsonl"
        _assert_matches(setting / method / "seed0" / "metrics.jsonl", golden)
