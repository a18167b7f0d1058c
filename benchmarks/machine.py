"""Facts about the machine a benchmark ran on, recorded in every benchmark's JSON.

Timings depend on the CPU (bf16 is 1.5x faster with AVX-512 BF16 and 14x slower without it) and on what else
ran beside the benchmark (the load average), so every result file names both.
"""

from __future__ import annotations

import os
from typing import Any

from fedaug.machine import cpu_facts

__all__ = ["cpu_facts", "machine_facts"]


def machine_facts() -> dict[str, Any]:
    """:func:`cpu_facts` plus the load average now (a value well above 0 means others shared the cores)."""
    return {**cpu_facts(), "loadavg": os.getloadavg()}
