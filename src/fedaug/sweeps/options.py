"""``fedaug sweep``'s own flags, checked without torch (before the command imports it): ``--workers``,
``--heartbeat``, ``--order`` and ``--shard``."""

from __future__ import annotations

import re

from fedaug.errors import ConfigError
from fedaug.validation import check_choice, check_int, check_number

HEARTBEAT_SECONDS = 600.0
"""How often a sweep with several workers logs how far its running runs are
(:func:`fedaug.sweeps.estimate.running_line`)."""

MAX_WORKERS = 1024
"""Cap on ``--workers``."""

ORDERS = ("grid", "longest-first")
"""``fedaug sweep --order`` choices."""


def check_sweep_options(workers: int, heartbeat: float, order: str = "grid") -> None:
    """Raises ConfigError for a ``--workers`` outside 1..MAX_WORKERS, a ``--heartbeat`` that is not a finite
    number of seconds >= 0 or an unknown ``--order`` (checked before the sweep is read, so ``--dry-run``
    refuses them too)."""
    check_int("--workers", workers, 1, MAX_WORKERS)
    check_number("--heartbeat", heartbeat, 0)
    check_choice("--order", order, ORDERS)


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
