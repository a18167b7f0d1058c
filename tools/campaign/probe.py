"""A few-second probe of this host's speed: one reference training step, timed (issue #65).

Archived round times say what a run cost on the host that made it; another host is faster or slower (this
project's CPU hosts differ by 2x). The probe times one fixed step, HARNet forward and backward with an Adam
update on a batch of 32 UCI-HAR-shaped windows, on one thread (as the CPU campaign runs), and the campaign
scales an archived run's round times by ``probe here / probe there`` when both hosts were probed: the
campaign sets ``FEDAUG_HOST_PROBE_S`` for its runs, and each run's ``env.json`` records it as
``host_probe_s`` (:func:`fedaug.runtime.machine.machine_facts`).
"""

from __future__ import annotations

import statistics
import time

import torch

from fedaug.models import build_model
from fedaug.runtime.machine import HOST_PROBE_ENV, host_probe_fact

PROBE_ENV = HOST_PROBE_ENV
"""The environment variable through which the campaign hands its probe to the runs it starts."""


def host_probe(seconds: float = 2.0, warmup: int = 5) -> float:
    """Median seconds of the reference step over about ``seconds`` of repeats (after ``warmup`` steps), on one
    thread; the thread count is restored."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        generator = torch.Generator().manual_seed(0)
        model = build_model("harnet", num_classes=6, input_shape=(1, 128, 3))
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(32, 1, 128, 3, generator=generator)
        y = torch.randint(0, 6, (32,), generator=generator)

        def step() -> float:
            start = time.perf_counter()
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            return time.perf_counter() - start

        for _ in range(warmup):
            step()
        times: list[float] = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
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


def speed_ratio(here: float | None, there: float | None) -> float:
    """How many times longer a step takes here than on the host probed as ``there`` (1: either unknown)."""
    if here is None or there is None or here <= 0 or there <= 0:
        return 1.0
    return here / there
