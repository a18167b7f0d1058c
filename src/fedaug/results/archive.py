"""``fedaug archive``: the small, reportable part of run dirs, kept where run dirs do not survive.

A run dir holds checkpoints (megabytes) and per-client metric vectors next to what ``fedaug report`` reads.
Long tables are often measured over several machines or sessions whose run dirs are lost when the machine goes
away; archiving each finished run into a folder that is committed (e.g. ``studies/<table>/runs``) lets a
later ``fedaug report runs/<sweep> studies/<table>/runs`` put the old and the new runs in one table.

An archived run is a directory with the same relative path as the run dir: ``config.yaml``, ``env.json``
(versions, git sha, the method's resolved options) and ``summary.json`` as written by the run,
``timings.jsonl.gz`` (per-round wall times) and ``metrics.jsonl.gz`` with the per-round scalars; list-valued
entries (``clients``, ``local/acc``, ``test/class_acc``) are kept in the final round's record only (the
fairness plot of ``fedaug report --plots`` reads them there; the summary already holds the fairness numbers).
It is a valid run dir for :func:`fedaug.results.store.load_runs`: :func:`fedaug.engine.checkpoint.read_jsonl`
reads the gzipped lines where the plain ones are absent (archives written before they were gzipped still
read).

The JSON lines are gzipped (about a quarter of the size) and their floats rounded (metrics to 8 significant
digits, timings to 4: :mod:`fedaug.results.compact`, about half again; ``full_precision`` keeps them as the
run wrote them) because archives are committed, and a study's repository travels whole to a lent GPU machine
under a size limit. The gzip header carries no time or name, so
archiving the same run twice writes the same bytes and leaves git clean.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

from fedaug.engine.checkpoint import gzipped, read_jsonl
from fedaug.errors import FedaugError
from fedaug.results.compact import METRIC_DIGITS, TIMING_DIGITS, compact_text, rounded, write_gzipped
from fedaug.results.portable import portable_text, read_text
from fedaug.results.store import load_runs
from fedaug.runtime.paths import check_folder_target

logger = logging.getLogger(__name__)

COPIED_FILES = ("config.yaml", "env.json", "summary.json")
"""Copied when present, with no absolute path (:func:`fedaug.results.portable.portable_text`: ``out_dir``
and ``data.data_dir`` dropped from the config, the others rewritten); ``timings.jsonl`` is gzipped as it is,
``metrics.jsonl`` gzipped with its scalars only (both then rounded, unless ``full_precision``)."""


def scalar_metrics(record: dict[str, object]) -> dict[str, object]:
    """``record`` without its list- and dict-valued entries."""
    return {k: v for k, v in record.items() if not isinstance(v, list | dict)}


def archive_runs(
    runs_dir: Path, out_dir: Path, *, include_unfinished: bool = False, full_precision: bool = False
) -> list[Path]:
    """Copies the reportable files of each run under ``runs_dir`` to the same relative path under ``out_dir``,
    the floats of its JSON lines rounded as :func:`fedaug.results.compact.compact_run` rounds them, unless
    ``full_precision``.

    An archived run that is already there is replaced (the run dir is the fresher copy); archived runs whose
    run dir is gone are left alone, so archiving is additive across machines.

    Returns:
        The archived run directories, in ``runs_dir``'s order.

    Raises:
        FedaugError: if ``runs_dir`` does not exist, has no run with results, or ``out_dir`` is inside it.
    """
    check_folder_target(out_dir, "archive folder --out")
    runs_dir, out_dir = runs_dir.resolve(), out_dir.resolve()
    if out_dir == runs_dir or runs_dir in out_dir.parents:
        raise FedaugError(f"archive folder {out_dir} must be outside the runs dir {runs_dir}")
    runs = load_runs(runs_dir, include_unfinished=include_unfinished)
    if not runs:
        raise FedaugError(
            f"no run dirs with results under {runs_dir} (unfinished ones need --include-unfinished)"
        )
    written = []
    for run in runs:
        target = out_dir / run.path.resolve().relative_to(runs_dir)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        for name in COPIED_FILES:
            if (run.path / name).exists():
                text = (run.path / name).read_text()
                (target / name).write_text(portable_text(text, config=name == "config.yaml"))
        records = read_jsonl(run.path / "metrics.jsonl")
        rows = [scalar_metrics(r) for r in records[:-1]] + records[-1:]
        if not full_precision:
            rows = [rounded(r, METRIC_DIGITS) for r in rows]
        write_gzipped(
            gzipped(target / "metrics.jsonl"), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
        )
        timings = run.path / "timings.jsonl"
        lines: str | None = None
        if timings.exists():  # the lines as the run wrote them
            lines = portable_text(timings.read_text())
        elif gzipped(timings).exists():  # an archived run archived again
            lines = portable_text(read_text(gzipped(timings)))
        if lines is not None:
            lines = lines if full_precision else compact_text(lines, TIMING_DIGITS)
            write_gzipped(gzipped(target / timings.name), lines)
        written.append(target)
    logger.info("archived %d runs from %s into %s", len(written), runs_dir, out_dir)
    return written
