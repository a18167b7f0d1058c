"""Facts about the CPU a run or benchmark ran on (``env.json``, benchmark JSON), the ``env.json`` of a run
dir that records them with the software versions (:func:`write_env`), and the run's torch thread count
(:func:`use_threads`).

The same seed gives bit-identical runs only on the same kind of CPU: torch and oneDNN pick their kernels by
the CPU's features (instruction set extensions, cache sizes), and kernels round differently (an Intel Xeon
and an AMD EPYC, both AVX512 to torch, give the same run a round-1 train loss that differs in the 6th digit,
and the runs drift apart from there). Timings also depend on the CPU (bf16 autocast is about 1.5x faster than
float32 with AVX-512 BF16 and about 14x slower without it), so both are recorded with every run.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from fedaug.runtime.files import write_json
from fedaug.runtime.precision import native_bf16


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``platform.processor()`` where there is none)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def cpu_facts() -> dict[str, Any]:
    """The CPU model, torch's vector capability and whether the CPU has native bfloat16."""
    return {
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_bf16(),
    }


def recorded_cpu(run_dir: Path) -> str | None:
    """The CPU model a run dir's ``env.json`` records (None: no file, unreadable, or from before it was
    recorded)."""
    try:
        env = json.loads((run_dir / "env.json").read_text())
    except (OSError, ValueError):
        return None
    cpu = env.get("cpu_model") if isinstance(env, dict) else None
    return cpu if isinstance(cpu, str) else None


def processor_of(env: Mapping[str, Any]) -> str | None:
    """What computed a run, from its ``env.json`` record: the GPU's name for a run on CUDA (``gpu_name``),
    else its CPU model (None: not recorded). Runs on different processors do not share their float
    rounding."""
    gpu = env.get("gpu_name")
    if str(env.get("device", "")).startswith("cuda") and isinstance(gpu, str):
        return gpu
    cpu = env.get("cpu_model")
    return cpu if isinstance(cpu, str) else None


def other_recorded_cpu(run_dir: Path) -> str | None:
    """The CPU model ``run_dir``'s ``env.json`` records when it is not this machine's (None: the same model,
    or none recorded): rounds computed here will not be that run's bit for bit."""
    cpu = recorded_cpu(run_dir)
    return cpu if cpu is not None and cpu != cpu_model() else None


def default_threads() -> int:
    """The torch thread count of a run whose config leaves ``engine.num_threads`` unset: half the cores this
    process may use, at least 1.

    torch's own default (every core) collapses when another process holds one of them: its threads wait for
    each other at the end of every parallel region, so each op runs at the pace of the thread that shares a
    core (``studies/speed/busy_core.py``, :doc:`the speed guide <docs/guide/speed.md>`). With half the cores
    the operating system finds a free core for each thread while another process holds one.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def use_threads(num_threads: int | None) -> None:
    """Sets torch's intra-op thread count for this process to ``engine.num_threads`` (None:
    :func:`default_threads`); ``env.json`` records the count in effect.

    The one place a run's thread count is set: every start of a run calls it before any data is loaded
    (:func:`fedaug.runs.runner.run_experiment`, and so each sweep worker; the Flower ClientApp).
    Multi-threaded sums round differently with another count.
    """
    torch.set_num_threads(default_threads() if num_threads is None else num_threads)


def git_sha() -> str | None:
    """The commit checked out where fedaug's source lives (None: not a git checkout, or no git)."""
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--verify", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parents[1],
            check=False,
        )
        sha = done.stdout.strip() if done.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        sha = ""
    return sha or None


def write_env(run_dir: Path, extra: dict[str, Any] | None = None) -> None:
    """Writes ``env.json``: python, torch and fedaug versions, threads, platform, CPU (:func:`cpu_facts`),
    git sha."""
    env = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "fedaug": fedaug_version(),
        "num_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "processor": platform.processor(),
        **cpu_facts(),
        **({**probe, "host_probe_clock": HOST_PROBE_CLOCK} if (probe := host_probe_fact()) else {}),
        "git_sha": git_sha(),
        **(extra or {}),
    }
    write_json(run_dir / "env.json", env)


def fedaug_version() -> str:
    """The installed fedaug's version (``fedaug.__version__``); ``unknown`` in a source tree not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("fedaug")
    except PackageNotFoundError:
        return "unknown"


HOST_PROBE_ENV = "FEDAUG_HOST_PROBE_S"
"""Set by the campaign (:mod:`fedaug.sweeps.probe`): the seconds of its reference step on this host, which
``env.json`` records as ``host_probe_s`` so that later estimates can scale this run's round times by host."""


HOST_PROBE_CLOCK = "thread"
"""The clock the host probe is timed by (:func:`fedaug.sweeps.probe.host_probe`): the thread's CPU clock.
``env.json`` records it as ``host_probe_clock`` beside the probe; a probe recorded without it was timed by
the wall clock, which reads a loaded host as a slower one (:mod:`fedaug.sweeps.archived`)."""


def host_probe_fact() -> dict[str, float]:
    """``{"host_probe_s": seconds}`` from :data:`HOST_PROBE_ENV` if that is a positive number, else ``{}``."""
    import math
    import os

    try:
        seconds = float(os.environ.get(HOST_PROBE_ENV, ""))
    except ValueError:
        return {}
    return {"host_probe_s": seconds} if math.isfinite(seconds) and seconds > 0 else {}
