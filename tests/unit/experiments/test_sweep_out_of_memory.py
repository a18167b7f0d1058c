"""A multi-worker sweep puts back a run that ran out of device memory beside other runs, and runs fewer at
once from then on (fedaug.sweeps.sweep._run_pool): in a thread pool, with the runs' outcomes scripted."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from fedaug.config.schema import ExperimentConfig
from fedaug.errors import out_of_memory_sentence
from fedaug.sweeps import sweep
from fedaug.sweeps.order import Schedule, SweepPoint
from fedaug.sweeps.sweep import OUT_OF_MEMORY_RETRIES, Outcome, SweepResult, expand_sweep, out_of_memory
from tests.conftest import SMOKE

OOM = (
    "ClientError: round 1, client 6, method 'fedavg': OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 2.00 MiB."
)


def _points(tmp_path: Path, seeds: int) -> list[SweepPoint]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "sweep.yaml"
    path.write_text(f"extends: {SMOKE}\nout_dir: {tmp_path / 'runs'}\ngrid:\n  seed: {list(range(seeds))}\n")
    return expand_sweep(path)


def _sweep(
    points: list[SweepPoint],
    outcomes: dict[int, list[Outcome]],
    workers: int,
    seconds: dict[int, float] | None = None,
) -> tuple[SweepResult, list[int], list[int]]:
    """Runs ``points`` through ``_run_pool`` with ``workers`` threads; seed s's k-th try ends with
    ``outcomes[s][k]`` (default: finished) after ``seconds[s]`` (default 50 ms). Returns the result, the seeds
    in the order they were tried and how many runs were running as each try started."""
    tried: list[int] = []
    at_once: list[int] = []
    running = 0
    lock = threading.Lock()

    def execute(config: ExperimentConfig, *, quiet: bool = False) -> Outcome:
        nonlocal running
        with lock:
            seed = config.seed
            tries = tried.count(seed)
            tried.append(seed)
            running += 1
            at_once.append(running)
        time.sleep((seconds or {}).get(seed, 0.05))
        with lock:
            running -= 1
        scripted = outcomes.get(seed, [])
        return scripted[tries] if tries < len(scripted) else Outcome("finished", summary={})

    result = SweepResult()
    pool_running: dict[Future[Outcome], SweepPoint] = {}
    with pytest.MonkeyPatch.context() as patch, ThreadPoolExecutor(workers) as pool:
        patch.setattr(sweep, "execute", execute)
        sweep._run_pool(pool, pool_running, Schedule(points), result, workers, 0, len(points))  # type: ignore[arg-type]
    return result, tried, at_once


def test_a_run_out_of_memory_beside_others_resumes_later_and_fewer_run_at_once(tmp_path: Path) -> None:
    points = _points(tmp_path, 6)
    seconds = {0: 0.5, 2: 0.5}  # seed 1 fails while seeds 0 and 2 still run
    result, tried, at_once = _sweep(points, {1: [Outcome("failed", error=OOM)]}, 3, seconds)
    assert sorted(p.name for p in result.finished) == [f"seed{s}" for s in range(6)]
    assert result.failures == []
    assert tried.count(1) == 2
    # seeds 0-2 started together; seed 1 failed beside 2 others: from then on at most 2 at once, and seed 1
    # went before the schedule's next point
    assert tried[:4] == [0, 1, 2, 1]
    assert max(at_once[3:]) <= 2


def test_a_run_out_of_memory_alone_or_too_often_fails(tmp_path: Path) -> None:
    # seed 0 runs out of memory at every try. Seeds 1-4 end one after the other, so each retry of seed 0
    # starts when one of them has ended, beside one fewer; the last retry fails for good, beside seed 4.
    always = [Outcome("failed", error=OOM)] * (OUT_OF_MEMORY_RETRIES + 2)
    seconds = {1: 0.3, 2: 0.6, 3: 0.9, 4: 1.5}
    result, tried, at_once = _sweep(_points(tmp_path / "often", 5), {0: always}, 5, seconds)
    assert tried.count(0) == OUT_OF_MEMORY_RETRIES + 1
    assert [p.name for p, _ in result.failures] == ["seed0"]
    assert sorted(p.name for p in result.finished) == ["seed1", "seed2", "seed3", "seed4"]
    assert [n for seed, n in zip(tried, at_once, strict=True) if seed == 0][1:] == [
        4,
        3,
        2,
    ]  # itself included
    # alone on the device, running out of memory is a failure at once
    result, tried, _ = _sweep(_points(tmp_path / "alone", 1), {0: always}, workers=2)
    assert tried == [0] and [p.name for p, _ in result.failures] == ["seed0"]


def test_only_device_memory_errors_count() -> None:
    assert out_of_memory(Outcome("failed", error=OOM))
    assert out_of_memory(Outcome("failed", error="OutOfMemoryError: CUDA out of memory."))
    assert not out_of_memory(Outcome("failed", error="ValueError: loss is nan"))
    assert not out_of_memory(Outcome("finished", error="out of memory"))
    assert out_of_memory(
        Outcome("failed", error="RuntimeError: MPS backend out of memory (MPS allocated: 9 GB)")
    )


def test_the_out_of_memory_sentence_is_cut_from_pytorchs_paragraph() -> None:
    text = "round 3: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has\n79 GiB ..."
    assert out_of_memory_sentence(text) == (
        "round 3: OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB."
    )
    assert out_of_memory_sentence("CUDA out of memory") == "CUDA out of memory"
    assert out_of_memory_sentence("RuntimeError: CUDA error: an illegal memory access") is None


def test_a_worker_gives_its_cached_gpu_memory_back_after_every_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from fedaug.runtime import device

    assert not device.release_cached_memory()  # a process that never used CUDA has nothing to release
    released: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: released.append("empty_cache"))

    def out_of_memory_run(config: ExperimentConfig, quiet: bool, **_: object) -> dict[str, float]:
        released.append("run")
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB.")

    (point,) = _points(tmp_path, 1)
    monkeypatch.setattr(sweep, "run_experiment", out_of_memory_run)
    outcome = sweep.execute(point.config, quiet=True)
    assert out_of_memory(outcome) and released == ["run", "empty_cache"]  # freed before the sweep retries
    monkeypatch.setattr(sweep, "run_experiment", lambda config, quiet, **_: released.append("run") or {})
    assert sweep.execute(point.config, quiet=True).status == "finished"
    assert released == ["run", "empty_cache"] * 2
