"""The files of one run directory, written so that a run killed at any point resumes exactly.

Layout::

    config.yaml      the fully resolved config (written by the runner)
    metrics.jsonl    one JSON object per round; deterministic (no timings), so two runs can be compared
    timings.jsonl    wall-clock seconds per round and phase (not deterministic, kept apart)
    summary.json     best accuracy and its round, mean of the last 10 rounds, final accuracy
    env.json         versions, git sha, threads
    ckpt/latest.pt   server state and client states after the last finished round
    ckpt/round_NNNN.pt  copies of latest.pt kept after the rounds listed in ``engine.keep_checkpoints``
    ckpt/pool/<sha256>.pt  a method's large server-state tensors (its data pool), written once, named by
                     their digest; the checkpoints refer to them (:mod:`fedaug.engine.pool_files`)

Every file a resume reads (``config.yaml``, ``env.json``, checkpoints, the rewound metrics) is written to a
temporary file, flushed and fsynced, then renamed into place (and the folder fsynced), so a kill or a power
loss leaves either the old or the new file. A checkpoint carries the SHA-256 of its content
(:func:`content_digest`), checked on load; one that is corrupt all the same (a disk error, a copy cut short,
flipped bytes) is one :class:`~fedaug.errors.CheckpointError` naming the file and what to do. The process that
writes a run dir holds its lock (:mod:`fedaug.runs.lock`). On resume, ``metrics.jsonl`` is cut back to the
checkpoint's round (a kill between the metrics line and the checkpoint repeats that round with the same seeds
and the same result), once :mod:`fedaug.runs.verify` has checked it line by line.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import shutil
import warnings
import zlib
from pathlib import Path
from typing import Any

import torch

from fedaug.engine import pool_files
from fedaug.engine.integrity import content_digest as content_digest  # re-exported: where callers look
from fedaug.engine.integrity import corrupt_file as corrupt_file
from fedaug.engine.integrity import feed_digest as feed_digest
from fedaug.engine.round_log import bad_file, read_rounds
from fedaug.errors import CheckpointError, FedaugError, path_error, shorten
from fedaug.runtime.files import atomic_write as atomic_write  # re-exported: the engine's file writers
from fedaug.runtime.files import atomic_write_bytes as _atomic_write_bytes
from fedaug.runtime.files import atomic_write_text as atomic_write_text
from fedaug.runtime.files import write_json as write_json

logger = logging.getLogger(__name__)

CHECKPOINT_FORMAT = 3
"""Format 3 keeps the large tensors of ``state.extra`` (a method's data pool) in pool files, ``ckpt/pool/``,
written once and referred to by their digest (:mod:`fedaug.engine.pool_files`). Every format since 2
carries ``sha256``, a digest of everything else in the checkpoint (:func:`content_digest`: every tensor's
bytes, dtype and shape, every other value and the structure; in format 3 the references, each pool file
checked against its name), checked on every load: a flipped byte that torch's reader does not notice is
refused, never loaded. Format 2 (the pool inside the checkpoint) still loads; format 1 (written by fedaug
before the digest) still loads, unverified, with a warning."""

INLINE_POOL_FORMAT = 2

LEGACY_CHECKPOINT_FORMAT = 1

DIGEST_KEY = "sha256"


def gzipped(path: Path) -> Path:
    """``path``'s compressed twin, ``<name>.gz``: how ``fedaug archive`` keeps a run's JSON lines."""
    return path.with_name(path.name + ".gz")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete JSON lines of ``path``, or of :func:`gzipped` ``path`` when only that exists (an archived
    run); a partial last line from a kill is ignored.

    Raises:
        FedaugError: if the gzipped file is corrupt (named, with what to do).
    """
    if path.exists():
        text = path.read_text()
    elif gzipped(path).exists():
        try:
            text = gzip.decompress(gzipped(path).read_bytes()).decode()
        except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
            raise FedaugError(
                f"{gzipped(path)} is not a readable gzip file of JSON lines ({exc}); restore it from git "
                "or archive the run again"
            ) from exc
    else:
        return []
    records = []
    for line in text.splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


TIMINGS = "timings.jsonl"


def logged_round_times(run_dir: Path) -> list[tuple[int, float]]:
    """``(round, round_time)`` of each line of the run's ``timings.jsonl`` (or its archived ``.gz``) that
    logged a round time, in file order: the one reader of measured round times (estimates, campaign costs)."""
    return [(round_num, wall) for round_num, wall, _ in logged_round_seconds(run_dir)]


def logged_round_seconds(run_dir: Path) -> list[tuple[int, float, float | None]]:
    """:func:`logged_round_times` with each round's process CPU seconds (``cpu_time``: CPU runs log it;
    None where the line has none), from one read of the file."""
    return [
        (int(r["round"]), float(r["round_time"]), float(r["cpu_time"]) if "cpu_time" in r else None)
        for r in read_jsonl(run_dir / TIMINGS)
        if "round_time" in r
    ]


class RunStore:
    """Reads and writes the files of one run directory."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self.metrics_path = run_dir / "metrics.jsonl"
        self.timings_path = run_dir / TIMINGS
        self.summary_path = run_dir / "summary.json"
        self.ckpt_path = run_dir / "ckpt" / "latest.pt"
        self.pools = pool_files.PoolFiles(self.ckpt_path.parent)
        self._pools_in_use: set[str] | None = None  # the pool files the last save referred to

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
        return read_checkpoint(path, map_location=map_location, digests=self.pools.digests)

    def kept_rounds(self) -> list[int]:
        """Rounds with a kept checkpoint (``ckpt/round_NNNN.pt``), ascending."""
        names = (p.stem.removeprefix("round_") for p in (self.run_dir / "ckpt").glob("round_*.pt"))
        return sorted(int(n) for n in names if n.isdigit())

    def keep_checkpoint(self, round_num: int) -> None:
        """Copies ``latest.pt`` (just written for ``round_num``) to ``round_NNNN.pt``, atomically."""
        target = self.round_ckpt_path(round_num)
        with open(self.ckpt_path, "rb") as source:
            atomic_write(target, lambda handle: shutil.copyfileobj(source, handle))

    def save_checkpoint(self, ckpt: dict[str, Any]) -> None:
        """Writes ``latest.pt`` atomically and durably (temporary file, fsync, rename), with its digest; the
        large tensors of ``state.extra`` go to pool files (written once each), the checkpoint refers to them.
        Pool files no checkpoint refers to any more are then removed."""
        content = {**ckpt, "format": CHECKPOINT_FORMAT}
        state = ckpt.get("state")
        if isinstance(state, dict) and "extra" in state:
            content["state"] = {**state, "extra": self.pools.externalize(state["extra"])}
        content[DIGEST_KEY] = content_digest(content)
        atomic_write(self.ckpt_path, lambda handle: torch.save(content, handle))
        in_use = pool_files.references(content)
        if in_use != self._pools_in_use:  # the first save of this process, or a pool that changed
            self.pools.remove_unused(in_use | self._kept_pools())
            self._pools_in_use = in_use

    def _kept_pools(self) -> set[str]:
        """The pool files the kept checkpoints (``round_NNNN.pt``) refer to, read memory-mapped (no tensor
        data); every file when one of them cannot be read (kept, not judged here)."""
        used: set[str] = set()
        for round_num in self.kept_rounds():
            try:
                used |= pool_files.references(load_torch_file(self.round_ckpt_path(round_num), mmap=True))
            except CheckpointError as exc:
                logger.warning("keeping every pool file: %s", exc)
                return {path.stem for path in (self.pools.folder / pool_files.POOL_DIR).glob("*.pt")}
        return used

    def rewind(self, last_round: int) -> list[dict[str, Any]]:
        """Cuts metrics and timings back to rounds ``<= last_round`` (dropping a partial last line, logged);
        returns the kept metrics.

        Raises:
            CheckpointError: a log that is not rounds 1..n line by line (:func:`read_rounds`), or metrics
                that stop before ``last_round``.
        """
        metrics = read_rounds(self.metrics_path)
        if metrics.rounds < last_round:
            problem = f"{metrics.rounds} rounds logged, but the checkpoint is of round {last_round}"
            raise bad_file(self.metrics_path, problem)
        kept = metrics.records[:last_round]
        for path, log in ((self.metrics_path, metrics), (self.timings_path, read_rounds(self.timings_path))):
            if log.partial is not None:
                logger.warning(
                    "%s: dropping its partial last line (%s), written after the last checkpoint",
                    path,
                    shorten(log.partial),
                )
            records = log.records[:last_round]
            _atomic_write_bytes(path, "".join(json.dumps(r) + "\n" for r in records).encode())
        return kept

    def append(self, path: Path, record: dict[str, Any]) -> None:
        with open(path, "a") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


CHECKPOINT_KEYS = ("state", "client_states", "round_num")
"""What every run checkpoint holds (besides ``format``); ``state`` holds a ServerState's fields."""


def short_reason(exc: BaseException) -> str:
    """``Type: first sentence of the message`` on one line (torch's unpickling errors run to paragraphs)."""
    lines = str(exc).strip().splitlines()
    first = lines[0].split(". ")[0].strip() if lines else ""
    return f"{type(exc).__name__}: {first[:120]}" if first else type(exc).__name__


def load_torch_file(
    path: Path, *, map_location: torch.device | str = "cpu", mmap: bool = False, what: str = "checkpoint"
) -> Any:
    """What ``path`` holds, as ``torch.load`` reads it (weights-only unpickling: no code runs; ``mmap``:
    tensors mapped, not read); ``what`` the file is, for the error.

    Raises:
        CheckpointError: a file that torch cannot read (empty, truncated, garbage), naming it.
        PathError: it cannot be read.
    """
    try:
        with warnings.catch_warnings():  # a foreign pickle's protocol warning: the error below says it all
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True, map_location=map_location, mmap=mmap)
    except OSError as exc:
        raise path_error(exc, path, "read") from exc
    except Exception as exc:  # EOFError, UnpicklingError, RuntimeError (zip), ...: all mean a bad file
        empty = path.stat().st_size == 0
        raise corrupt_file(path, "the file is empty" if empty else short_reason(exc), what) from exc


def read_checkpoint(
    path: Path,
    *,
    map_location: torch.device | str = "cpu",
    mmap: bool = False,
    digests: pool_files.DigestCache | None = None,
) -> dict[str, Any]:
    """The run checkpoint in ``path`` (weights-only unpickling: no code runs; ``mmap``: tensors mapped, not
    read, but for the digests), its digest and format checked, its pool files read and checked in place of
    their references (``digests`` remembers their digests: the next save does not hash them again).

    Raises:
        CheckpointError: the file is empty, truncated, changed (its digest), garbage, of another format or
            lacks a run checkpoint's entries; a pool file it refers to is missing, damaged or foreign (one
            line naming the file and what to do).
        PathError: it cannot be read.
    """
    ckpt = load_torch_file(path, map_location=map_location, mmap=mmap)
    if not isinstance(ckpt, dict):
        raise corrupt_file(path, f"it holds a {type(ckpt).__name__}, not a checkpoint dict")
    if ckpt.get("format") == LEGACY_CHECKPOINT_FORMAT:
        logger.warning("%s has no digest (written by an older fedaug); it is read unverified", path)
        return ckpt
    if ckpt.get("format") not in (INLINE_POOL_FORMAT, CHECKPOINT_FORMAT):
        expected = f"{INLINE_POOL_FORMAT} or {CHECKPOINT_FORMAT}"
        raise corrupt_file(path, f"checkpoint format {ckpt.get('format')!r}, expected {expected}")
    digest = ckpt.pop(DIGEST_KEY, None)
    if torch.device(map_location).type != "meta" and digest != content_digest(ckpt):  # meta: no data
        raise corrupt_file(path, "its content does not match its SHA-256 digest")
    if ckpt["format"] == INLINE_POOL_FORMAT:
        return ckpt

    def load(pool: Path) -> Any:
        return load_torch_file(pool, map_location=map_location, mmap=mmap, what=pool_files.POOL_FILE)

    if "state" in ckpt:
        ckpt["state"] = pool_files.resolve(ckpt["state"], path, load=load, digests=digests)
    return ckpt


def check_run_checkpoint(ckpt: dict[str, Any], path: Path) -> None:
    """Raises CheckpointError unless ``ckpt`` (read from ``path``) holds what a run resumes from: ``state``
    (a ServerState's fields), ``client_states`` and ``round_num``."""
    missing = [key for key in CHECKPOINT_KEYS if key not in ckpt]
    state = ckpt.get("state")
    if missing or not isinstance(state, dict) or not isinstance(ckpt["client_states"], dict):
        entries = ", ".join(missing) or "state/client_states"
        raise corrupt_file(path, f"missing or malformed entries: {entries}")
    fields = {"round_num", "model_state", "extra"}
    if not {"round_num", "model_state"} <= state.keys() <= fields or not isinstance(ckpt["round_num"], int):
        raise corrupt_file(path, f"its state has the keys {sorted(state)}, expected {sorted(fields)}")


def summarize(records: list[dict[str, Any]], *, last: int = 10) -> dict[str, Any]:
    """Best accuracy and its round, mean of the last ``last`` rounds and the final accuracy; with
    ``method.share_dp`` on, the epsilon its shares spent by the last round and its delta."""
    evaluated = [r for r in records if "test/acc" in r]
    if not evaluated:
        return {"rounds": len(records), **_privacy_spent(records)}
    accs = [r["test/acc"] for r in evaluated]
    best = max(range(len(accs)), key=lambda i: (accs[i], -i))
    tail = accs[-last:]
    return {
        "rounds": records[-1]["round"],
        "best_acc": accs[best],
        "best_round": evaluated[best]["round"],
        "last10_acc": sum(tail) / len(tail),
        "final_acc": accs[-1],
        **_privacy_spent(records),
    }


def _privacy_spent(records: list[dict[str, Any]]) -> dict[str, Any]:
    """``share_dp_epsilon`` and ``share_dp_delta`` of the last round that logged them (none: nothing)."""
    logged = [r for r in records if "share_dp/epsilon" in r]
    if not logged:
        return {}
    return {
        "share_dp_epsilon": logged[-1]["share_dp/epsilon"],
        "share_dp_delta": logged[-1]["share_dp/delta"],
    }
