"""Strict reading of a run's per-round logs (``metrics.jsonl``, ``timings.jsonl``): what a resume and a report
trust.

Every line must be a JSON object whose ``round`` is its line number (rounds 1..n, no gap, no repeat, no blank
line). The one thing tolerated is a last line without its newline: the engine appends a line with one write
and a kill can cut it, so such a line is reported as :attr:`RoundLog.partial` (the caller decides whether it
may be dropped: only when it was written after the last checkpoint). Anything else is a
:class:`~fedaug.errors.CheckpointError` of one line naming the file, the line and what to do.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.errors import CheckpointError, path_error, shorten


@dataclass(frozen=True)
class RoundLog:
    """The complete lines of a round log and, if its last line lacks its newline, that line's text."""

    records: list[dict[str, Any]]
    partial: str | None = None
    exists: bool = True

    @property
    def rounds(self) -> int:
        """How many complete rounds the log holds."""
        return len(self.records)


def bad_file(path: Path, problem: str) -> CheckpointError:
    """The one-line refusal of a run file: which file (and line), what is wrong, what to do."""
    return CheckpointError(
        f"{path}: {problem}; restore the run dir from a copy, or start the run over with "
        "`fedaug run ... --fresh`"
    )


def _text(path: Path) -> str | None:
    """The text of ``path``, or of its gzipped twin (an archived run); None when neither exists."""
    gz = path.with_name(path.name + ".gz")
    source = path if path.exists() else gz if gz.exists() else None
    if source is None:
        return None
    try:
        data = source.read_bytes()
        if source is gz:
            data = gzip.decompress(data)
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise bad_file(source, f"not a readable gzip file ({exc})") from None
    except OSError as exc:
        raise path_error(exc, source, "read") from None
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise bad_file(source, f"byte 0x{data[exc.start]:02x} at offset {exc.start} is not UTF-8") from None


def read_rounds(path: Path) -> RoundLog:
    """The rounds logged in ``path`` (or its ``.gz``; empty when there is neither), checked line by line.

    Raises:
        CheckpointError: a line that is not a JSON object, lacks an integer ``round``, or whose round is not
            its line number (a gap, a repeat, a line edited or lost), naming the file and the line.
        PathError: the file cannot be read.
    """
    text = _text(path)
    if text is None:
        return RoundLog([], exists=False)
    lines = text.split("\n")
    tail = lines.pop()  # '' when the file ends with a newline
    records = [_record(path, number, line) for number, line in enumerate(lines, 1)]
    return RoundLog(records, partial=tail or None)


def _record(path: Path, number: int, line: str) -> dict[str, Any]:
    where = f"line {number}"
    try:
        record = json.loads(line)
    except ValueError:
        raise bad_file(path, f"{where} is not a JSON object: {shorten(line)!r}") from None
    if not isinstance(record, dict):
        raise bad_file(path, f"{where} is not a JSON object: {shorten(line)!r}")
    found = record.get("round")
    if isinstance(found, bool) or not isinstance(found, int):
        raise bad_file(path, f"{where} has no integer 'round': {shorten(line)!r}")
    if found != number:
        raise bad_file(path, f"{where} is round {found}, expected round {number} (rounds must run 1, 2, ...)")
    return record


def log_digest(records: list[dict[str, Any]]) -> str:
    """The SHA-256 of ``records`` as the engine writes them, one JSON line each: what a checkpoint records of
    the metrics it follows, so that an edited or flipped value in an earlier round is noticed."""
    hasher = hashlib.sha256()
    for record in records:
        hasher.update((json.dumps(record) + "\n").encode())
    return hasher.hexdigest()
