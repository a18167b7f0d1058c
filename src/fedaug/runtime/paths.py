"""Default locations of caches (override with the ``FEDAUG_CACHE`` environment variable)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$FEDAUG_CACHE`` or ``~/.cache/fedaug``: processed datasets and cached partitions."""
    return Path(os.environ.get("FEDAUG_CACHE", Path.home() / ".cache" / "fedaug"))


def check_folder_target(path: Path, what: str) -> None:
    """Raises PathError (naming ``what`` and the path) unless ``path`` is a folder or can be made one: its
    first existing ancestor must be a folder, not a file. For output folders (``--out``), before any work."""
    from fedaug.errors import PathError

    for existing in (path, *path.parents):
        if existing.exists():
            if not existing.is_dir():
                detail = "is a file" if existing == path else f"is inside {existing}, which is a file"
                raise PathError(f"{what} {path} {detail}, not a folder")
            return
