"""``tests/gpu/``: the device seam on CUDA. Every test here is marked ``cuda`` and skips without a GPU, so the
CPU-only CI collects them and reports them as skipped; ``python -m pytest tests/gpu`` runs them on a GPU."""

from __future__ import annotations

import pytest
import torch


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
    for item in items:
        if "tests/gpu/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.cuda)
            if not torch.cuda.is_available():
                item.add_marker(skip)
