"""A few-second probe of this host's speed: one reference training step, timed (issues #65, #69).

Archived round times say what a run cost on the host that made it; another host is faster or slower (this
project's CPU hosts differ by 2x). The probe times one fixed step, HARNet forward and backward with an Adam
update on a batch of 32 UCI-HAR-shaped windows, on one thread (as CPU runs go by default), and an estimate
scales an archived run's round times by ``probe here / probe there`` when both hosts were probed
(:func:`speed_ratio`). The campaign (``tools/campaign``) sets ``FEDAUG_HOST_PROBE_S`` for the runs it starts,
and each run's ``env.json`` records it as ``host_probe_s`` (:func:`fedaug.runtime.machine.machine_facts`).

``fedaug run`` and ``fedaug sweep --dry-run`` take this host's probe from :func:`cached_probe`: the one given
in ``FEDAUG_HOST_PROBE_S``, else one measured at most :data:`CACHE_MAX_AGE_S` ago on this machine (kept in
the fedaug cache dir, keyed by the host facts that change its speed), else a fresh one of about
:data:`ESTIMATE_PROBE_S` seconds.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import time

from fedaug.errors import FedaugError
from fedaug.runtime.files import atomic_write_text
from fedaug.runtime.machine import HOST_PROBE_ENV, cpu_model, host_probe_fact
from fedaug.runtime.paths import cache_dir

logger = logging.getLogger(__name__)

PROBE_ENV = HOST_PROBE_ENV
"""The environment variable through which the campaign (or a user) hands a probe to the runs it starts."""

ESTIMATE_PROBE_S = 0.5
"""Seconds of repeats of the probe an estimate measures, 3 steps at least after 1 (the campaign takes 2 s
after 5: it plans hours of runs; a dry run should answer in seconds)."""

CACHE_MAX_AGE_S = 6 * 3600.0
"""How long a measured probe stands for this host (the load changes; six hours of it are one estimate)."""

CACHE_FILE = "host_probe.json"
"""The cached probes' file in the fedaug cache dir: ``{host key: {"probe_s": s, "measured_at": epoch s}}``."""


def host_probe(seconds: float = 2.0, warmup: int = 5, min_steps: int = 5) -> float:
    """Median seconds of the reference step over about ``seconds`` of repeats (``min_steps`` at least, after
    ``warmup`` steps), on one thread; the thread count is restored. A step is timed by the thread's CPU
    clock, so a probe taken while other work shares the core measures the host, not the moment's load (by
    the wall clock a probe on this project's loaded 2-core host read 0.09 to 0.32 s within two hours)."""
    import torch

    from fedaug.models import build_model
    from fedaug.runtime.lazy_dynamo import defer_dynamo_import

    defer_dynamo_import()  # as a run does: building Adam would import torch._dynamo (10 s on a loaded host)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        model = build_model("harnet", num_classes=6, input_shape=(1, 128, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(32, 1, 128, 3, generator=generator)
        y = torch.randint(0, 6, (32,), generator=generator)

        def step() -> float:  # the thread's CPU seconds: time other processes take the core is not counted
            start = time.thread_time()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            return time.thread_time() - start

        for _ in range(warmup):
            step()
        times: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < min_steps:
            times.append(step())
        return statistics.median(times)
    finally:
        torch.set_num_threads(threads)


def given_or_measured() -> float:
    """The probe already given in :data:`PROBE_ENV` (a positive number: a parent campaign's, or the user's),
    read as each run's ``env.json`` reads it (:func:`fedaug.runtime.machine.host_probe_fact`); else
    :func:`host_probe`."""
    given = host_probe_fact().get("host_probe_s")
    return given if given is not None else host_probe()


def host_key() -> str:
    """What a cached probe is valid for: the machine, its CPU model and core count, and torch's version."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        torch_version = version("torch")
    except PackageNotFoundError:
        torch_version = "none"
    return f"{platform.node()}|{cpu_model()}|{os.cpu_count()}|torch {torch_version}"


def cached_probe(now: float | None = None) -> tuple[float, str]:
    """This host's probe for an estimate and where it comes from: ``given`` (:data:`PROBE_ENV`), ``cached``
    (measured here less than :data:`CACHE_MAX_AGE_S` ago) or ``measured`` (now, then cached)."""
    given = host_probe_fact().get("host_probe_s")
    if given is not None:
        return given, "given"
    now = time.time() if now is None else now
    path = cache_dir() / CACHE_FILE
    try:
        cached = json.loads(path.read_text())
    except (OSError, ValueError):
        cached = {}
    cached = cached if isinstance(cached, dict) else {}
    key = host_key()
    entry = cached.get(key)
    if isinstance(entry, dict):
        probe, at = entry.get("probe_s"), entry.get("measured_at")
        fresh = isinstance(at, float) and 0 <= now - at < CACHE_MAX_AGE_S
        if isinstance(probe, float) and probe > 0 and fresh:
            return probe, "cached"
    probe = host_probe(seconds=ESTIMATE_PROBE_S, warmup=1, min_steps=3)
    cached[key] = {"probe_s": probe, "measured_at": now}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(cached, indent=1, sort_keys=True))
    except (OSError, FedaugError) as exc:  # a read-only cache (PathError): the probe still serves now
        logger.debug("host probe not cached in %s: %s", path, exc)
    return probe, "measured"


def speed_ratio(here: float | None, there: float | None) -> float:
    """How many times longer a step takes here than on the host probed as ``there`` (1: either unknown)."""
    if here is None or there is None or here <= 0 or there <= 0:
        return 1.0
    return here / there
