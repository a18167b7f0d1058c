"""Reading run directories and grouping them into (method x setting) cells; nothing here trains.

A run dir holds ``config.yaml``, ``metrics.jsonl`` and (once finished) ``summary.json``
(:mod:`fedaug.engine.checkpoint`). Runs are grouped into *rows* (the method, plus its options that differ from
the method's defaults, e.g. ``flea (decor_weight=0)``) and *columns* (the setting: dataset, partition and
scarcity, plus any other config key that differs between the runs, e.g. ``local_epochs=1``). The seeds of a
cell are the repetitions that :mod:`fedaug.results.tables` aggregates.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaug import registry
from fedaug.config.identity import changes_results, flatten
from fedaug.config.yamlio import read_yaml_file
from fedaug.engine.checkpoint import read_jsonl, summarize
from fedaug.engine.round_log import read_rounds
from fedaug.errors import FedaugError
from fedaug.results.stand_ins import dataset_label, model_label
from fedaug.runs.resume import saved_env
from fedaug.runs.verify import check_identity, verify_results
from fedaug.runtime.machine import processor_of

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig

logger = logging.getLogger(__name__)


_PARTITION_FIXED = ("partition.name", "partition.num_clients", "partition.mean_local_size")
_PARTITION_APART = ("partition.local_test_fraction", "partition.seed")
"""Partition keys that are not the partitioner's parameters (a fixed partition seed shows as ``pseed=k``)."""
_PARTITION_SHORT = {"quantity": "Qua", "dirichlet": "Dir", "iid": "IID", "shards": "Shards"}
_MISSING = object()


@dataclass(frozen=True)
class Run:
    """One run directory.

    Attributes:
        path: the run dir.
        config: the resolved config, flattened to dotted keys (``partition.alpha``); the method's options
            are completed with the method's defaults when the method is registered.
        summary: ``summary.json`` (or, for an unfinished run, the same numbers computed from its metrics).
        finished: whether ``summary.json`` exists and covers the configured number of rounds.
        method_options: the options given to the method that differ from its defaults.
        cpu: the CPU model it (last) ran on, or the GPU's name for a run on CUDA (``env.json``, rewritten at
            each start; a resume on another CPU is warned about in its log); None for runs from before it
            was recorded.
    """

    path: Path
    config: dict[str, Any]
    summary: dict[str, Any]
    finished: bool
    method_options: dict[str, Any] = field(default_factory=dict)
    cpu: str | None = None

    @property
    def method(self) -> str:
        """The method's registry name."""
        return str(self.config["method.name"])

    @property
    def seed(self) -> int:
        """The run seed."""
        return int(self.config["seed"])

    def metrics(self) -> list[dict[str, Any]]:
        """The per-round records of ``metrics.jsonl``."""
        return read_jsonl(self.path / "metrics.jsonl")


def method_defaults(name: str) -> dict[str, Any]:
    """Defaults of the registered method's config fields (empty for an unknown method)."""
    try:
        cls = registry.get("method", name).config_cls
    except (FedaugError, AttributeError):
        return {}
    defaults = {}
    for item in dataclasses.fields(cls):
        if item.default is not dataclasses.MISSING:
            defaults[item.name] = item.default
        elif item.default_factory is not dataclasses.MISSING:
            defaults[item.name] = item.default_factory()
    return defaults


def load_run(path: Path, *, include_unfinished: bool = False) -> Run | None:
    """Reads one run dir; None when it has no results to report (unfinished, unless included)."""
    raw = read_yaml_file(path / "config.yaml", "run config") or {}
    if not isinstance(raw, dict):
        kind = type(raw).__name__
        raise FedaugError(f"{path / 'config.yaml'} must hold a mapping of config keys, got {kind}")
    config = flatten(_resolved(raw))
    summary_path = path / "summary.json"
    try:
        summary = json.loads(summary_path.read_bytes()) if summary_path.exists() else {}
    except ValueError as exc:
        raise FedaugError(f"{summary_path} is not valid JSON ({exc}); restore it or remove it") from exc
    if not isinstance(summary, dict):
        raise FedaugError(f"{summary_path} holds a {type(summary).__name__}, not a summary; restore it")
    check_identity(path)  # config.yaml as the run started (run dirs from before identity.json: not checked)
    finished = bool(summary) and summary.get("rounds") == config.get("train.rounds")
    if finished:
        # metrics 1..n, the summary computed from them, the checkpoint's record of both (its entries only)
        verify_results(path, int(config["train.rounds"]), summary, weights=False)
    else:
        if not include_unfinished:
            return None
        summary = summarize(read_rounds(path / "metrics.jsonl").records)  # a partial last line: still running
    if "best_acc" not in summary:
        return None
    name = str(config.get("method.name"))
    given = {k.removeprefix("method."): v for k, v in config.items() if k.startswith("method.")}
    given.pop("name", None)
    defaults = _as_json(method_defaults(name))
    env = saved_env(path)
    used = _used_options(env)
    if used is not None:  # every option the run used: right even after a default has changed since
        given = {k: v for k, v in used.items() if k in defaults} if defaults else used
    changed = {k: v for k, v in given.items() if defaults.get(k, _MISSING) != v}
    config.update({f"method.{k}": v for k, v in given.items()})
    config.update({f"method.{k}": v for k, v in defaults.items() if f"method.{k}" not in config})
    cpu = processor_of(env)
    return Run(path=path, config=config, summary=summary, finished=finished, method_options=changed, cpu=cpu)


def _used_options(env: dict[str, Any]) -> dict[str, Any] | None:
    """The method options a run recorded in its ``env.json`` (``method_config``: defaults included), or None
    for a run without that record."""
    used = env.get("method_config")
    return dict(used) if isinstance(used, dict) else None


def _as_json(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` as JSON would give them back (tuples as lists, a nested config such as ``share_dp`` as its
    mapping), to compare with a recorded ``env.json``."""

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return str(value)

    return {key: json.loads(json.dumps(value, default=plain)) for key, value in values.items()}


def _resolved(raw: dict[str, Any]) -> dict[str, Any]:
    """The saved config re-read through the loader, so keys added since then get their defaults."""
    from fedaug.config.load import config_from_dict, config_to_dict

    try:
        return config_to_dict(config_from_dict(raw))
    except FedaugError:  # a key removed since: compare what was saved
        return raw


def load_runs(root: Path, *, include_unfinished: bool = False) -> list[Run]:
    """Every run dir under ``root`` (any depth), sorted by path; unfinished runs are skipped unless included.

    Raises:
        FedaugError: if ``root`` does not exist.
    """
    if not root.is_dir():
        raise FedaugError(f"runs dir {str(root)!r} does not exist")
    runs, skipped = [], 0
    for config_path in sorted(root.rglob("config.yaml")):
        run = load_run(config_path.parent, include_unfinished=include_unfinished)
        if run is None:
            skipped += 1
        else:
            runs.append(run)
    if skipped:
        logger.info(
            "skipped %d run dirs without results (unfinished; --include-unfinished uses them)", skipped
        )
    return runs


@dataclass(frozen=True)
class Stat:
    """Mean and sample standard deviation (ddof = 1; NaN for one seed) of ``n`` values."""

    mean: float
    std: float
    n: int

    @property
    def spread(self) -> float:
        """``std``, or 0 for one value (its NaN): an error bar's or an axis limit's half-width."""
        return 0.0 if math.isnan(self.std) else self.std


def aggregate(values: Sequence[float]) -> Stat:
    """:class:`Stat` of ``values`` (at least one)."""
    if not values:
        raise ValueError("aggregate needs at least one value")
    std = statistics.stdev(values) if len(values) > 1 else math.nan
    return Stat(mean=math.fsum(values) / len(values), std=std, n=len(values))


@dataclass
class Grouping:
    """Runs arranged as rows (methods) x columns (settings).

    Attributes:
        rows: row labels in display order.
        columns: column labels in display order.
        cells: the runs of each (row, column), one per seed.
        row_info: per row, the method name and its non-default options.
        column_config: per column, the config values shared by all its runs.
    """

    rows: list[str]
    columns: list[str]
    cells: dict[tuple[str, str], list[Run]]
    row_info: dict[str, tuple[str, dict[str, Any]]]
    column_config: dict[str, dict[str, Any]]


METHOD_ORDER = (
    "local",  # the floor (a reference run), above FedAvg
    *("fedavg", "fedprox", "feddecorr", "fedlc", "fedntd", "fedrs", "moon", "qffl", "fedbr", "ccvr"),
    *("fedgen", "fedmix", "feddata", "fedzdac", "fedzdas", "augmix", "flea", "flea_official"),
)
"""Row order (the papers' Table 1 order, after the ``local`` floor); other methods follow alphabetically,
then the rows of :data:`LAST_ROWS`."""
LAST_ROWS = ("centralized",)
"""Rows below every other: the ceiling (a reference run)."""


def row_label(run: Run) -> str:
    """``method`` or ``method (key=value, ...)`` for options that differ from the defaults."""
    if not run.method_options:
        return run.method
    options = ", ".join(f"{k}={v}" for k, v in sorted(run.method_options.items()))
    return f"{run.method} ({options})"


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def setting_label(config: Mapping[str, Any], extra_keys: Iterable[str] = ()) -> str:
    """E.g. ``uci_har Dir(0.3) K=75`` (+ ``, key=value`` for each extra key); a stand-in dataset by its label,
    e.g. ``CIFAR-10 (JPEG q75 copy) Qua(3) K=500``, and a stand-in model always, e.g. ``..., bn_cnn_cifar
    (stand-in model for MobileNetV2)`` (:mod:`fedaug.results.stand_ins`)."""
    name = str(config.get("partition.name"))
    params = [
        _fmt(v)
        for k, v in config.items()
        if k.startswith("partition.") and k not in (*_PARTITION_FIXED, *_PARTITION_APART)
    ]
    partition = _PARTITION_SHORT.get(name, name) + (f"({', '.join(params)})" if params else "")
    clients = config.get("partition.num_clients")
    size = f"K={clients}" if clients is not None else f"n={_fmt(config.get('partition.mean_local_size'))}"
    if config.get("partition.seed") is not None:
        size += f" pseed={config['partition.seed']}"
    stand_in_model = config.get("model.stand_in_for") is not None
    extras = "".join(
        f", {k.split('.', 1)[-1]}={_fmt(config.get(k))}"
        for k in extra_keys
        if not (stand_in_model and k == "model.name")  # in the model's label below
    )
    model = f", {model_label(config)}" if stand_in_model else ""
    return f"{dataset_label(config)} {partition} {size}{model}{extras}"


def config_setting_label(config: ExperimentConfig) -> str:
    """:func:`setting_label` of a config: the column ``fedaug report`` puts its runs under, in the papers'
    notation (``uci_har Qua(2) K=75``), for the titles of ``fedaug run`` and ``fedaug partition``."""
    from fedaug.config.load import config_to_dict

    return setting_label(flatten(config_to_dict(config)))


def _setting_keys(run: Run) -> dict[str, Any]:
    return {
        k: v
        for k, v in run.config.items()
        if k != "seed" and changes_results(k) and not k.startswith("method.")
    }


def _varying(runs: Sequence[Run]) -> list[str]:
    """Setting keys not in the dataset/partition label whose values differ between runs."""
    keys = sorted({k for run in runs for k in _setting_keys(run)})
    return [k for k in keys if not _in_label(k) and len({repr(_setting_keys(r).get(k)) for r in runs}) > 1]


def _in_label(key: str) -> bool:
    return key == "data.name" or (key.startswith("partition.") and key != "partition.local_test_fraction")


def _per_row(runs: Sequence[Run], keys: Sequence[str]) -> dict[str, Any]:
    """Keys of ``keys`` that never differ between runs of one row, with their most common value.

    Such a key is part of how a method is run (e.g. ``flea_official``'s preset sets ``train.lr_schedule``),
    not of the setting: it labels the rows that differ from the usual value instead of splitting columns.
    """
    per_row: dict[str, Any] = {}
    for key in keys:
        values: dict[str, set[str]] = {}
        for run in runs:
            values.setdefault(row_label(run), set()).add(repr(_setting_keys(run).get(key)))
        if all(len(v) == 1 for v in values.values()):
            counts = Counter(repr(_setting_keys(run).get(key)) for run in runs)
            per_row[key] = counts.most_common(1)[0][0]
    return per_row


def _label(run: Run, per_row: Mapping[str, Any]) -> str:
    keys = _setting_keys(run)
    unusual = {k: keys.get(k) for k, usual in per_row.items() if repr(keys.get(k)) != usual}
    if not unusual:
        return row_label(run)
    options = {**run.method_options, **{k.split(".", 1)[-1]: v for k, v in unusual.items()}}
    return f"{run.method} ({', '.join(f'{k}={_fmt(v)}' for k, v in sorted(options.items()))})"


def group_runs(runs: Sequence[Run]) -> Grouping:
    """Arranges ``runs`` into rows and columns; a repeated (row, column, seed) keeps the first run dir.

    Columns are settings (dataset, partition, and other keys that differ between runs of one method); a key
    that differs only between methods (a method preset's training settings) goes into the row label instead.
    """
    varying = _varying(runs)
    per_row = _per_row(runs, varying)
    extra = [k for k in varying if k not in per_row]
    cells: dict[tuple[str, str], list[Run]] = {}
    row_info: dict[str, tuple[str, dict[str, Any]]] = {}
    members: dict[str, list[Run]] = {}
    for run in runs:
        row, column = _label(run, per_row), setting_label(run.config, extra)
        cell = cells.setdefault((row, column), [])
        duplicate = next((r for r in cell if r.seed == run.seed), None)
        if duplicate is not None:
            logger.warning("%s repeats seed %d of %s; ignoring it", run.path, run.seed, duplicate.path)
            continue
        cell.append(run)
        row_info[row] = (run.method, run.method_options)
        members.setdefault(column, []).append(run)
    column_config = {col: _common(rs) for col, rs in members.items()}
    rows = sorted(row_info, key=lambda r: _row_key(row_info[r][0], r))
    columns = sorted(column_config, key=lambda c: _column_key(column_config[c], c))
    return Grouping(rows, columns, cells, row_info, column_config)


def _common(runs: Sequence[Run]) -> dict[str, Any]:
    first = _setting_keys(runs[0])
    return {k: v for k, v in first.items() if all(_setting_keys(r).get(k, _MISSING) == v for r in runs)}


def _row_key(method: str, label: str) -> tuple[int, str, str]:
    if method in LAST_ROWS:
        rank = len(METHOD_ORDER) + 1 + LAST_ROWS.index(method)
    else:
        rank = METHOD_ORDER.index(method) if method in METHOD_ORDER else len(METHOD_ORDER)
    return (rank, method, label)


def _column_key(config: Mapping[str, Any], label: str) -> tuple[Any, ...]:
    clients = config.get("partition.num_clients")
    size = -float(config.get("partition.mean_local_size") or 0) if clients is None else float(clients)
    order = ("iid", "quantity", "shards", "multimodal", "dirichlet")
    name = str(config.get("partition.name"))
    rank = order.index(name) if name in order else len(order)
    params = [
        -v
        for k, v in config.items()
        if k.startswith("partition.") and k not in (*_PARTITION_FIXED, *_PARTITION_APART)
        if isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return (str(config.get("data.name")), size, rank, params, label)
