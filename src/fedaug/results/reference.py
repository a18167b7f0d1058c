"""Published numbers (``docs/published_numbers.yaml``) matched to our (method, setting) cells.

The file holds ``tables:``, each with a ``metric`` (``best_acc``: best test accuracy over rounds, in %),
``settings`` (an id -> a mapping of flattened config keys that a run must have, or a list of such mappings
of which one must hold) and ``results`` (method registry name, or a report row label such as
``ccvr (variant=shared_features)`` -> setting id -> ``"mean ± std"`` or a number)::

    tables:
      - id: flea_kdd2024_table1
        source: FLea (KDD 2024), Table 1
        metric: best_acc
        seeds: 5
        settings:
          uci_har-qua2-d100: {data.name: uci_har, partition.name: quantity, partition.classes_per_client: 2,
                              partition.num_clients: 75}
        results:
          fedavg: {uci_har-qua2-d100: 66.99 ± 0.87}
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedaug.config.yamlio import read_yaml_file
from fedaug.errors import ConfigError
from fedaug.results.store import Stat


@dataclass(frozen=True)
class ReferenceTable:
    """One published table.

    Attributes:
        id: a short name (shown as the reference column's header).
        source: the paper and table.
        metric: which summary number it reports (``best_acc``, ...), in %.
        settings: setting id -> alternative mappings of config key -> required value.
        results: method name -> setting id -> published mean ± std (n = the paper's seeds, 0 if unknown).
    """

    id: str
    source: str
    metric: str
    settings: dict[str, list[dict[str, Any]]]
    results: dict[str, dict[str, Stat]]


def parse_value(value: Any, seeds: int = 0) -> Stat:
    """``"66.99 ± 0.87"`` (or ``"66.99 +- 0.87"``, a number, ``[mean, std]``) as a :class:`Stat`."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Stat(float(value), math.nan, seeds)
    if isinstance(value, list | tuple) and len(value) == 2:
        return Stat(float(value[0]), float(value[1]), seeds)
    if isinstance(value, str):
        parts = value.replace("+-", "±").split("±")
        try:
            std = float(parts[1]) if len(parts) == 2 else math.nan
            return Stat(float(parts[0]), std, seeds)
        except ValueError:
            pass
    raise ConfigError(f"cannot read published number {value!r}; expected 'mean ± std' or a number")


def _table(raw: Mapping[str, Any], path: Path) -> ReferenceTable:
    try:
        seeds = int(raw.get("seeds", 0))
        settings = {
            str(key): [dict(m) for m in (match if isinstance(match, list) else [match])]
            for key, match in raw["settings"].items()
        }
        results = {
            str(method): {str(s): parse_value(v, seeds) for s, v in cells.items()}
            for method, cells in raw["results"].items()
        }
        table = ReferenceTable(
            str(raw["id"]), str(raw.get("source", "")), str(raw["metric"]), settings, results
        )
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ConfigError(f"malformed reference table in {path}: {exc!r}") from exc
    for method, cells in results.items():
        unknown = set(cells) - set(settings)
        if unknown:
            raise ConfigError(f"{path}: {table.id}.{method} names unknown settings {sorted(unknown)}")
    return table


PUBLISHED = Path(__file__).resolve().parent / "published_numbers.yaml"
"""The papers' numbers that ship with fedaug (a checkout's ``docs/published_numbers.yaml`` links to it)."""


def locate_reference(given: str) -> Path:
    """``--reference``'s file: ``papers`` names :data:`PUBLISHED`, as does a path to a
    ``published_numbers.yaml`` that does not exist here (``docs/published_numbers.yaml`` outside a checkout);
    any other value is a path."""
    path = Path(given)
    if given == "papers" or (path.name == PUBLISHED.name and not path.is_file()):
        return PUBLISHED
    return path


def load_reference(path: Path) -> list[ReferenceTable]:
    """Reads a published-numbers file.

    Raises:
        ConfigError: if the file is missing or malformed.
    """
    raw = read_yaml_file(path, "reference file") or {}
    if not isinstance(raw, Mapping) or not isinstance(raw.get("tables"), list):
        raise ConfigError(f"{path} must hold 'tables:', a list of published tables")
    return [_table(t, path) for t in raw["tables"]]


def _matches(config: Mapping[str, Any], alternatives: Sequence[Mapping[str, Any]]) -> bool:
    return any(all(k in config and config[k] == v for k, v in alt.items()) for alt in alternatives)


def match_setting(table: ReferenceTable, config: Mapping[str, Any]) -> str | None:
    """The id of the table's setting that ``config`` (flattened) belongs to, or None."""
    return next((sid for sid, alts in table.settings.items() if _matches(config, alts)), None)


def lookup(
    tables: Sequence[ReferenceTable], metric: str, method: str, config: Mapping[str, Any]
) -> tuple[Stat, ReferenceTable] | None:
    """The published number of ``method`` in the setting of ``config`` for ``metric``, if any table has it."""
    for table in tables:
        if table.metric != metric:
            continue
        setting = match_setting(table, config)
        if setting is not None and setting in table.results.get(method, {}):
            return table.results[method][setting], table
    return None
