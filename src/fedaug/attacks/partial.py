"""What an interrupted attack keeps: each finished target's results, so that running it again resumes.

``fedaug attack reconstruct`` and ``context`` train per target; after each target its results go to
``OUT/.partial/<key>.pt``, the key a hash of the attack, its settings (every argument except the targets,
``--out``, ``--threads`` and ``--device``, which do not change results) and the target (label, run dir,
round). The same command run again reads the finished targets instead of training them; a changed setting
gives other keys, so nothing stale is reused. The folder is removed once the report is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch

from fedaug.attacks.target import Target

logger = logging.getLogger(__name__)

IGNORED = frozenset({"targets", "out", "threads", "device"})
"""Arguments that do not change an attack's results."""


class Partial:
    """The per-target results of one attack command under ``out/.partial``."""

    def __init__(self, out: Path, attack: str, args: argparse.Namespace) -> None:
        settings = {k: v for k, v in sorted(vars(args).items()) if k not in IGNORED and not callable(v)}
        self.folder = out / ".partial"
        self._base = json.dumps([attack, settings], sort_keys=True, default=str)

    def path(self, target: Target) -> Path:
        """Where ``target``'s results go."""
        text = self._base + json.dumps([target.label, str(target.run_dir), target.round_num])
        return self.folder / f"{hashlib.sha256(text.encode()).hexdigest()[:20]}.pt"

    def load(self, target: Target) -> dict[str, Any] | None:
        """The results saved for ``target`` by an earlier, interrupted run of the same command, or None."""
        path = self.path(target)
        if not path.is_file():
            return None
        try:
            saved: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
        except (OSError, RuntimeError, EOFError) as exc:  # cut off while written: train it again
            logger.warning("%s: unreadable saved results (%s); attacking it again", target.label, exc)
            return None
        logger.info("%s: results of an interrupted run read from %s", target.label, path)
        return saved

    def save(self, target: Target, results: dict[str, Any]) -> None:
        """Keeps ``target``'s results (written to a temporary file, then renamed)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.path(target)
        tmp = path.with_suffix(".tmp")
        torch.save(results, tmp)
        tmp.replace(path)

    def clear(self) -> None:
        """Removes the folder (the report is written)."""
        shutil.rmtree(self.folder, ignore_errors=True)
