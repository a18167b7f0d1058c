"""Default locations of caches (override with the ``FEDAUG_CACHE`` environment variable)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$FEDAUG_CACHE`` or ``~/.cache/fedaug``: processed datasets and cached partitions."""
    return Path(os.environ.get("FEDAUG_CACHE", Path.home() / ".cache" / "fedaug"))
