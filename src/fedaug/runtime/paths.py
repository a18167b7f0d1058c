"""Default locations of caches (override with the ``FEDAUG_CACHE`` environment variable)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$FEDAUG_CACHE`` or ``~/.cache/fedaug``: processed datasets and cached partitions.

    Raises:
        ConfigError: ``FEDAUG_CACHE`` set to an empty value (which would cache into the current folder).
    """
    value = os.environ.get("FEDAUG_CACHE")
    if value is None:
        return Path.home() / ".cache" / "fedaug"
    if not value.strip():
        from fedaug.validation import invalid

        raise invalid("FEDAUG_CACHE", "a folder path (unset it for ~/.cache/fedaug)", value)
    return Path(value)


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
