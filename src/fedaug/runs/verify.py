"""The checks of a run dir's files before a run resumes, is skipped as finished, or is reported.

* **Identity**: ``identity.json`` records the run's result config (:func:`~fedaug.config.identity.
  result_config`, as JSON) and its SHA-256 when the run starts; a ``config.yaml`` that no longer says the same
  (edited by hand, then run again) is refused, so a run dir never claims settings its rounds were not trained
  with. Run dirs from before it was recorded have none and are not checked for it (legacy).
* **Checkpoint**: ``ckpt/latest.pt`` is read whole and its digest checked
  (:func:`fedaug.engine.checkpoint.read_checkpoint`); its round must be within the run's rounds.
* **Round logs**: ``metrics.jsonl`` and ``timings.jsonl`` are rounds 1..n line by line
  (:mod:`fedaug.engine.round_log`) and agree with the checkpoint's round ``c``: metrics hold ``c`` rounds, or
  ``c + 1`` (a kill between a round's metrics line and its checkpoint: that round is run again, with the same
  result); timings hold ``c`` or ``c - 1`` (a kill before the timings line: the checkpoint carries them). The
  one repair: a last line cut short by a kill, written after the last checkpoint, is dropped (logged).
* **Results**: a finished run's ``metrics.jsonl`` holds all its rounds and its ``summary.json`` equals the
  summary computed from them (to 1e-7 relative: archived runs were written by older code, and their
  gzipped metrics keep 8 significant digits, :mod:`fedaug.results.compact`).

Every refusal is one :class:`~fedaug.errors.CheckpointError` line naming the file (and line) and what to do.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedaug.config.identity import result_config
from fedaug.config.load import config_to_dict
from fedaug.config.schema import ExperimentConfig
from fedaug.data.checksums import file_digests
from fedaug.engine.checkpoint import (
    RunStore,
    check_run_checkpoint,
    corrupt_file,
    read_checkpoint,
    summarize,
    write_json,
)
from fedaug.engine.fairness import fairness_summary
from fedaug.engine.round_log import bad_file, log_digest, read_rounds
from fedaug.errors import CheckpointError, ConfigError, shorten
from fedaug.plugins import changed_inputs, file_digest, plugin_digests
from fedaug.runs.resume import saved_result_config

logger = logging.getLogger(__name__)

IDENTITY_NAME = "identity.json"
"""The run's identity in its run dir, written as it starts."""

PLUGIN, DATA_FILE = "plugin ", "data file "
"""How :func:`input_digests` names a plugin's file and a data file (``data file wearables.npz``)."""

_ABSENT = object()


def _as_json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _digest(flat: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()


def identity_of(config: ExperimentConfig) -> dict[str, Any]:
    """``{"result_config": {...}, "sha256": ...}``: what ``identity.json`` records for ``config``."""
    flat = _as_json(result_config(config_to_dict(config)))
    return {"result_config": flat, "sha256": _digest(flat)}


def record_identity(run_dir: Path, config: ExperimentConfig) -> None:
    """Writes ``identity.json`` for ``config`` (after every check of the run dir has passed)."""
    write_json(run_dir / IDENTITY_NAME, identity_of(config))


def recorded_identity(run_dir: Path) -> dict[str, Any] | None:
    """The result config ``identity.json`` records, its digest checked; None for a run dir without one."""
    path = run_dir / IDENTITY_NAME
    if not path.exists():
        return None
    try:
        identity = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise corrupt_file(path, f"not JSON: {shorten(str(exc))}", "run identity") from None
    flat = identity.get("result_config") if isinstance(identity, dict) else None
    if not isinstance(flat, dict) or identity.get("sha256") != _digest(flat):
        raise corrupt_file(path, "its config does not match its SHA-256 digest", "run identity")
    return flat


def check_identity(run_dir: Path) -> None:
    """Refuses a run dir whose ``config.yaml`` no longer says what ``identity.json`` recorded (keys added to
    fedaug since are not compared; method options missing from ``config.yaml`` are checked against
    ``env.json`` instead, by :func:`~fedaug.runs.resume.check_existing`)."""
    recorded = recorded_identity(run_dir)
    if recorded is not None:
        _check_recorded(run_dir, recorded, IDENTITY_NAME)


CHECKPOINT_IDENTITY_KEY = "identity"
"""The checkpoint's copy of the run's result config (written every round, covered by the checkpoint's
digest): deleting ``identity.json`` and editing ``config.yaml`` does not make another run of a run dir."""


def check_checkpoint_identity(run_dir: Path, ckpt: dict[str, Any], path: Path) -> None:
    """Refuses a run dir whose ``config.yaml`` no longer says what its checkpoint ``ckpt`` (read from
    ``path``) records the run was trained with (checkpoints from before the record hold none)."""
    recorded = ckpt.get(CHECKPOINT_IDENTITY_KEY)
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise corrupt_file(path, f"its {CHECKPOINT_IDENTITY_KEY!r} entry is not a mapping of config keys")
    _check_recorded(run_dir, recorded, f"{path.parent.name}/{path.name}")


def input_digests(plugins: Sequence[str], files: Sequence[Path]) -> dict[str, str]:
    """What a run's numbers came from beyond its config: ``plugin <spec>`` (each of its plugins' files) and
    ``data file <path>`` (each of the user's data files) -> its SHA-256, kept in every checkpoint; a resume
    whose inputs differ is logged as a WARNING naming them (:meth:`fedaug.engine.simulation.Simulation`)."""
    found = {f"{PLUGIN}{spec}": digest for spec, digest in plugin_digests(plugins).items()}
    for file in files:
        found[f"{DATA_FILE}{file}"] = file_digest(Path(file))
    return found


def _check_recorded(run_dir: Path, recorded: dict[str, Any], source: str) -> None:
    """Refuses a ``config.yaml`` that differs from the result config ``recorded`` (read from ``source``)."""
    config_path = run_dir / "config.yaml"
    try:
        saved = _as_json(saved_result_config(config_path))
    except ConfigError as exc:
        raise corrupt_file(config_path, str(exc), "run config") from exc
    changed = [
        key
        for key, used in recorded.items()
        if (key in saved or not key.startswith("method.")) and saved.get(key, _ABSENT) != used
    ]
    if changed:
        shown = ", ".join(
            f"{key} (the run used {shorten(json.dumps(recorded[key]))}, config.yaml says "
            f"{shorten(json.dumps(saved[key])) if key in saved else 'nothing'})"
            for key in changed
        )
        raise CheckpointError(
            f"{config_path} no longer matches the config the run was started with ({source}): "
            f"differs in {shown}; put those values back, or start the run over with `fedaug run ... --fresh`"
        )


def verify_results(
    run_dir: Path, rounds: int, summary: dict[str, Any], *, weights: bool = True
) -> dict[str, Any] | None:
    """Refuses a finished run whose ``metrics.jsonl`` does not hold its ``rounds`` rounds line by line, whose
    ``summary`` (its ``summary.json``) differs from the one computed from them in a value it holds, or whose
    kept ``latest.pt`` is not of its last round, was trained with another config or recorded other metrics
    (metrics and summary copied in from another run). ``weights=False`` (``report``) reads the checkpoint's
    entries without its tensors (mapped to the meta device: about 0.1 s for a 94 MB ResNet-50 checkpoint) and
    so without checking the weights' digest: the metrics' digest and the identity are what a report needs (a
    checkpoint it cannot read is a WARNING there, :func:`_check_checkpoint_record`). Returns the digests of
    the plugin and data files the checkpoint recorded (None: it has none, or there is no checkpoint).

    A value that differs only past the seventh significant digit (a summary of an older fedaug that summed in
    another order, or an edited last digit) passes, and is replaced in ``summary``, in place, by the value
    its metrics give: a skipped or reported run never shows other numbers than its metrics' (the caller that
    may write repairs the file: :func:`repair_summary`)."""
    store = RunStore(run_dir)
    metrics = read_rounds(store.metrics_path)
    if metrics.partial is not None or metrics.rounds != rounds:
        cut = " and a line cut short" if metrics.partial is not None else ""
        problem = f"{metrics.rounds} complete rounds{cut}, but the run finished {rounds}"
        raise bad_file(store.metrics_path, problem)
    inputs = None
    if store.ckpt_path.exists():  # a run dir that keeps its checkpoint (archived ones do not)
        inputs = _check_checkpoint_record(store, rounds, metrics.records, weights=weights)
    core, fairness = summarize(metrics.records), fairness_summary(metrics.records)
    # older summaries lack the fairness keys, all of them; any other missing key is damage
    needed = core.keys() | (fairness.keys() if summary.keys() & fairness.keys() else set())
    missing = sorted(needed - summary.keys())
    if missing:
        gives = store.metrics_path.name
        raise bad_file(store.summary_path, f"it lacks {', '.join(missing)}, which {gives} gives")
    expected = {**core, **fairness}
    unknown = sorted(summary.keys() - expected.keys())
    if unknown:
        raise bad_file(store.summary_path, f"it holds {', '.join(unknown)}, which no run's summary has")
    for key in sorted(summary.keys() & expected.keys()):
        if not _same(summary.get(key), expected.get(key)):
            raise bad_file(
                store.summary_path,
                f"{key} is {shorten(json.dumps(summary.get(key)))}, but {store.metrics_path.name} gives "
                f"{shorten(json.dumps(expected.get(key)))}",
            )
    for key in summary:  # within the tolerance: the metrics' own value, to the last digit (docstring)
        summary[key] = expected[key]
    return inputs


def repair_summary(run_dir: Path, before: dict[str, Any], summary: dict[str, Any]) -> None:
    """Writes ``summary`` (:func:`verify_results`' values from the metrics) over a finished run's
    ``summary.json`` where it differs from ``before`` (the file's values), with a WARNING naming the keys."""
    changed = [key for key in summary if json.dumps(summary[key]) != json.dumps(before.get(key))]
    if not changed:
        return
    store = RunStore(run_dir)
    write_json(store.summary_path, summary)
    logger.warning(
        "%s: %s differed from %s past the seventh significant digit (%s); rewritten from the metrics",
        store.summary_path,
        ", ".join(changed),
        store.metrics_path.name,
        ", ".join(f"{k} {json.dumps(before.get(k))} -> {json.dumps(summary[k])}" for k in changed[:3]),
    )


def _check_checkpoint_record(
    store: RunStore, rounds: int, records: list[dict[str, Any]], *, weights: bool
) -> dict[str, Any] | None:
    """Refuses a finished run whose ``latest.pt`` is not of its last round, of its config or of its metrics.
    Without ``weights`` (``report``), a checkpoint that cannot be read is a WARNING naming the run, not a
    refusal: the run's numbers are still checked against each other, and the run dir is not resumed. Returns
    the inputs' digests the checkpoint recorded (None: none)."""
    if weights:
        ckpt = read_checkpoint(store.ckpt_path)
    else:
        try:
            ckpt = read_checkpoint(store.ckpt_path, map_location="meta")
        except CheckpointError as exc:
            logger.warning("%s: its numbers are not checked against its checkpoint: %s", store.run_dir, exc)
            return None
    check_checkpoint_identity(store.run_dir, ckpt, store.ckpt_path)
    if ckpt.get("round_num") != rounds:
        raise corrupt_file(store.ckpt_path, f"it is of round {ckpt.get('round_num')!r}, but the run finished")
    _check_digest(store, ckpt, records)
    inputs = ckpt.get("inputs")
    return inputs if isinstance(inputs, dict) else None


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-7, abs_tol=1e-12)
    return type(a) is type(b) and a == b


def verify_resume(run_dir: Path, rounds: int) -> int:
    """Checks the files an unfinished run resumes from; returns the checkpoint's round (0: none)."""
    store = RunStore(run_dir)
    done, ckpt = 0, {}
    if store.ckpt_path.exists():
        ckpt = read_checkpoint(store.ckpt_path)
        check_run_checkpoint(ckpt, store.ckpt_path)
        check_checkpoint_identity(run_dir, ckpt, store.ckpt_path)
        done = ckpt["round_num"]
        if not 0 <= done <= rounds:
            raise corrupt_file(store.ckpt_path, f"it is of round {done}, but the run has {rounds}")
    where = f"the checkpoint ({store.ckpt_path.name}) is of round {done}" if done else "no checkpoint"
    metrics = read_rounds(store.metrics_path)
    _check_span(store.metrics_path, metrics.rounds, metrics.partial, (done, done + 1), where)
    if done:
        _check_digest(store, ckpt, metrics.records[:done])
    timings = read_rounds(store.timings_path)
    _check_span(store.timings_path, timings.rounds, timings.partial, (max(done - 1, 0), done), where)
    return done


def _check_digest(store: RunStore, ckpt: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """Refuses metrics whose rounds up to the checkpoint's are not those it recorded (checkpoints from before
    the record, and branched runs' first checkpoints, have none)."""
    recorded = ckpt.get("metrics_sha256")
    if recorded is not None and recorded != log_digest(records):
        raise bad_file(
            store.metrics_path,
            f"its rounds 1..{len(records)} differ from those {store.ckpt_path.name} recorded (SHA-256): "
            "a value was changed, or the file was copied in from another run",
        )


def _check_span(path: Path, found: int, partial: str | None, span: tuple[int, int], where: str) -> None:
    """Refuses a log of ``found`` complete rounds outside ``span``, or cut short other than after them all
    (the last line of a round not checkpointed yet)."""
    low, high = span
    if not low <= found <= high:
        expected = f"{low}" if low == high else f"{low} or {high}"
        raise bad_file(path, f"{found} rounds logged where {expected} belong ({where})")
    if partial is not None and found != low:
        problem = f"line {found + 1} is cut short, but it is not after the last checkpoint ({where})"
        raise bad_file(path, problem)


def verify_run_dir(run_dir: Path, rounds: int, summary: dict[str, Any] | None) -> dict[str, Any] | None:
    """Every check above before a run of ``rounds`` rounds resumes from ``run_dir`` or, finished with
    ``summary`` (its readable ``summary.json``), is skipped; for a finished run, returns the digests of the
    plugin and data files its checkpoint recorded (for :func:`warn_changed_inputs`). A summary value off its
    metrics' only past the seventh significant digit is rewritten from them, in ``summary`` and its file
    (:func:`repair_summary`), so the skipped run returns its metrics' numbers."""
    check_identity(run_dir)
    if summary is not None:
        before = dict(summary)
        inputs = verify_results(run_dir, rounds, summary)
        repair_summary(run_dir, before, summary)  # a value off past the seventh digit: the metrics' one
        return inputs
    verify_resume(run_dir, rounds)
    return None


def warn_changed_inputs(run_dir: Path, recorded: dict[str, Any] | None, plugins: Sequence[str]) -> None:
    """A WARNING when a finished run, about to be skipped, was trained with other content of a plugin or data
    file than the one there now (``recorded``: its checkpoint's digests; :func:`input_digests`). Only the
    files both name are compared, so moving a plugin or running from another folder says nothing; data files
    are hashed only when their size or mtime changed (:func:`fedaug.data.checksums.file_digests`)."""
    if not recorded:
        return
    files = [Path(name[len(DATA_FILE) :]) for name in recorded if name.startswith(DATA_FILE)]
    now = {f"{PLUGIN}{spec}": digest for spec, digest in plugin_digests(plugins).items()}
    now |= {
        f"{DATA_FILE}{file}": digest
        for file, digest in file_digests([f for f in files if f.is_file()]).items()
    }
    both = recorded.keys() & now.keys()
    changed = changed_inputs({k: recorded[k] for k in both}, {k: now[k] for k in both})
    if changed:
        logger.warning(
            "%s is finished, but %s changed since it was trained: skipping it keeps the results of the old "
            "content (--fresh runs it again with the new)",
            run_dir,
            ", ".join(changed),
        )
