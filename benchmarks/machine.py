"""Facts about the machine a benchmark ran on, recorded in every benchmark's JSON.

Timings depend on the CPU (bf16 is 1.5x faster with AVX-512 BF16 and 14x slower without it) and on what else
ran beside the benchmark (the load average), so every result file names both.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from fedaug.precision import native_bf16


def cpu_facts() -> dict[str, Any]:
    """The CPU model, torch's vector capability and whether the CPU has native bfloat16."""
    model = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if "model name" in line
        ]
        model = names[0] if names else model
    return {
        "cpu_model": model,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "native_bf16": native_bf16(),
    }


def machine_facts() -> dict[str, Any]:
    """:func:`cpu_facts` plus the load average now (a value well above 0 means others shared the cores)."""
    return {**cpu_facts(), "loadavg": os.getloadavg()}
