"""Spreading a sweep's grid: over machines (``--shard i/n``, ``--list``) and over one machine's GPUs.

* ``fedaug sweep PRESET --shard i/n`` runs slice ``i`` (0-based, ``0 <= i < n``) of ``n``: the points whose
  position in the expanded grid is ``i`` modulo ``n`` (:func:`shard_points`). The ``n`` slices are disjoint
  and together are the grid, so a scheduler's array job (SLURM: ``--shard $SLURM_ARRAY_TASK_ID/n``) covers
  it once; each slice skips finished runs and resumes interrupted ones, as every sweep does.
* ``fedaug sweep PRESET --list`` prints one command per run (:func:`run_commands`): the same sweep command
  with ``--shard k/N``, ``N`` the number of runs, which runs exactly run ``k``.
* ``fedaug sweep --device cuda:0,cuda:1 --workers N`` puts each run it starts on the listed device with the
  fewest runs at that moment (:func:`least_loaded`); ``engine.device`` does not change a run's identity, so
  the run dirs are those of a one-device sweep.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import TypeVar

from fedaug.errors import ConfigError
from fedaug.runtime.device import check_device_name
from fedaug.sweeps.order import SweepPoint

T = TypeVar("T")


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/n"`` -> ``(i, n)`` with ``0 <= i < n`` in ASCII digits; ConfigError naming the value otherwise
    (an empty one too: it is not "no shard")."""
    found = re.fullmatch(r"\s*([0-9]{1,18})\s*/\s*([0-9]{1,18})\s*", text, flags=re.ASCII)
    index, count = (found.group(1), found.group(2)) if found else ("", "")
    if not found or int(count) < 1 or int(index) >= int(count):
        raise ConfigError(
            f"--shard must be i/n with 0 <= i < n (slice i of n, 0-based: SLURM's $SLURM_ARRAY_TASK_ID), "
            f"got {text!r}"
        )
    return int(index), int(count)


def shard_points(points: Sequence[T], index: int, count: int) -> list[T]:
    """Slice ``index`` of ``count``: every ``count``-th point from position ``index`` (runs of one kind,
    e.g. one method's seeds, are spread over the slices rather than all in one)."""
    return list(points[index::count])


def parse_devices(text: str) -> list[str]:
    """``"cuda:0,cuda:1"`` -> ``["cuda:0", "cuda:1"]`` (each spelled like a device; ConfigError if not)."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ConfigError(f"--device must name a device or a comma-separated list of them, got {text!r}")
    for name in names:
        check_device_name(name, key="--device")
    return list(dict.fromkeys(names))


def least_loaded(devices: Sequence[str], running: Iterable[str]) -> str:
    """The device of ``devices`` with the fewest of the ``running`` runs (the first of those tied)."""
    busy = list(running)
    return min(devices, key=lambda device: (busy.count(device), devices.index(device)))


def on_device(point: SweepPoint, device: str) -> SweepPoint:
    """``point`` with its run on ``device`` (same run dir: ``engine.device`` is not part of its identity)."""
    engine = replace(point.config.engine, device=device)
    return replace(point, config=replace(point.config, engine=engine))


def run_commands(argv: Sequence[str], total: int) -> list[str]:
    """One shell command per run of a sweep: ``argv`` (the sweep's command line without ``--list``,
    ``--shard`` and ``--workers``) with ``--shard k/total``, run ``k`` of the expanded grid."""
    base = shlex.join(["fedaug", "sweep", *argv])
    return [f"{base} --shard {k}/{total}" for k in range(total)]
