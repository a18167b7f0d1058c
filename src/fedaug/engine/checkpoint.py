"""The files of one run directory, written so that a run killed at any point resumes exactly.

Layout::

    config.yaml      the fully resolved config (written by the runner)
    metrics.jsonl    one JSON object per round; deterministic (no timings), so two runs can be compared
    timings.jsonl    wall-clock seconds per round and phase (not deterministic, kept apart)
    summary.json     best accuracy and its round, mean of the last 10 rounds, final accuracy
    env.json         versions, git sha, threads
    ckpt/latest.pt   server state and client states after the last finished round
    ckpt/round_NNNN.pt  copies of latest.pt kept after the rounds listed in ``engine.keep_checkpoints``

Every JSON/checkpoint write goes to a temporary file and is renamed into place, so a kill leaves either the
old or the new file. On resume, ``metrics.jsonl`` is cut back to the checkpoint's round (a kill between the
metrics line and the checkpoint repeats that round with the same seeds and the same result).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

CHECKPOINT_FORMAT = 1


def _atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json(path: Path, obj: Any) -> None:
    """Writes ``obj`` as indented JSON atomically."""
    _atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of ``path`` (a partial last line from a kill is ignored)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


class RunStore:
    """Reads and writes the files of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.timings_path = run_dir / "timings.jsonl"
        self.summary_path = run_dir / "summary.json"
        self.ckpt_path = run_dir / "ckpt" / "latest.pt"

    def prepare(self) -> None:
        (self.run_dir / "ckpt").mkdir(parents=True, exist_ok=True)

    def round_ckpt_path(self, round_num: int) -> Path:
        """Where the checkpoint kept after ``round_num`` lives (``ckpt/round_0005.pt``)."""
        return self.run_dir / "ckpt" / f"round_{round_num:04d}.pt"

    def load_checkpoint(
        self, round_num: int | None = None, *, map_location: torch.device | str = "cpu"
    ) -> dict[str, Any] | None:
        """The latest checkpoint, or the one kept after ``round_num``, with its tensors on ``map_location``
        (whatever device it was saved from); None if that file does not exist."""
        path = self.ckpt_path if round_num is None else self.round_ckpt_path(round_num)
        if not path.exists():
            return None
        ckpt: dict[str, Any] = torch.load(path, weights_only=True, map_location=map_location)
        if ckpt.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"unsupported checkpoint format in {path}: {ckpt.get('format')}")
        return ckpt

    def kept_rounds(self) -> list[int]:
        """Rounds with a kept checkpoint (``ckpt/round_NNNN.pt``), ascending."""
        names = (p.stem.removeprefix("round_") for p in (self.run_dir / "ckpt").glob("round_*.pt"))
        return sorted(int(n) for n in names if n.isdigit())

    def keep_checkpoint(self, round_num: int) -> None:
        """Copies ``latest.pt`` (just written for ``round_num``) to ``round_NNNN.pt``, atomically."""
        target = self.round_ckpt_path(round_num)
        tmp = target.with_name(f".{target.name}.tmp")
        shutil.copyfile(self.ckpt_path, tmp)
        os.replace(tmp, target)

    def save_checkpoint(self, ckpt: dict[str, Any]) -> None:
        tmp = self.ckpt_path.with_name(".latest.pt.tmp")
        torch.save({**ckpt, "format": CHECKPOINT_FORMAT}, tmp)
        os.replace(tmp, self.ckpt_path)

    def rewind(self, last_round: int) -> list[dict[str, Any]]:
        """Cuts metrics and timings back to rounds ``<= last_round``; returns the kept metrics."""
        kept = [r for r in read_jsonl(self.metrics_path) if r["round"] <= last_round]
        _atomic_write_bytes(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept).encode())
        timings = [r for r in read_jsonl(self.timings_path) if r["round"] <= last_round]
        _atomic_write_bytes(self.timings_path, "".join(json.dumps(r) + "\n" for r in timings).encode())
        return kept

    def append(self, path: Path, record: dict[str, Any]) -> None:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def summarize(records: list[dict[str, Any]], *, last: int = 10) -> dict[str, Any]:
    """Best accuracy and its round, mean of the last ``last`` rounds and the final accuracy."""
    evaluated = [r for r in records if "test/acc" in r]
    if not evaluated:
        return {"rounds": len(records)}
    accs = [r["test/acc"] for r in evaluated]
    best = max(range(len(accs)), key=lambda i: (accs[i], -i))
    tail = accs[-last:]
    return {
        "rounds": records[-1]["round"],
        "best_acc": accs[best],
        "best_round": evaluated[best]["round"],
        "last10_acc": sum(tail) / len(tail),
        "final_acc": accs[-1],
    }
