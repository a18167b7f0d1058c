"""A campaign file: the grids still to run, in priority order, and where each grid's runs are archived.

``studies/campaign.yaml`` lists grids; each is a sweep preset (``fedaug list presets``) with optional
``--set`` overrides and ``--grid`` axes, the study folder whose ``runs/`` receives its archived runs, the data
folders it needs on the machine, a cost table for runs no archived run has timed, and how to rebuild the
study's report::

    studies: .                     # where archived runs are looked for (default: the file's folder)
    workers: {cuda: 16, cpu: 0}    # runs at once per device kind (0: one per usable core)
    order: {cpu: [flea_table1_har]}   # per device kind, the grids that run there (default: all, in order)
    grids:
      - name: flea_table1_har
        preset: flea_table1_har
        study: flea_table1_har     # archives go to <studies>/flea_table1_har/runs
        set: [engine.num_threads=1]
        grid: {seed: [0, 1, 2], method: [fedprox, fedlc]}
        data: []                   # folders under --data-dir (e.g. cifar10_jpeg_lossy)
        cost_s: {cuda: 20, cpu: 1800}   # seconds per run (as one of `workers` runs at once)
        report: {runs: [runs], baseline: fedavg, reference: papers, highlight: flea, out: .}
        runs_with: other_grid      # optional: run dirs in that grid's folder (below)
        axes_from: study/chosen.json   # optional: more axes from a generated file (below)

A grid's points are those of ``fedaug sweep PRESET --set ... --grid ...`` (:func:`grid_points`), with their
run dirs under ``runs_dir/<grid name>``, or under ``runs_dir/<runs_with>``: a grid whose runs branch from
another grid's FedAvg runs (``engine.branch_from_fedavg``: Fed-ZDA's last 20 rounds after FedAvg's 80) finds
them there as siblings, instead of training FedAvg's rounds again.

``axes_from`` names a JSON file (relative to the campaign file's folder) mapping config keys to lists, as
``grid`` does, merged over ``grid``: a grid whose values another grid's results choose, such as the tuned
values the UCI-HAR tuning search chose on seed 0 (``python -m tools.results`` writes them). While the file
is missing, or one of its lists is empty, the grid has no points yet.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedaug.config.limits import check_name
from fedaug.config.yamlio import read_yaml_file
from fedaug.errors import ConfigError
from fedaug.sweeps.order import SweepPoint
from fedaug.sweeps.sweep import expand_sweep

DEVICE_KINDS = ("cuda", "cpu")
"""The device kinds a campaign's workers and costs are given for."""

DEFAULT_WORKERS = {"cuda": 16, "cpu": 0}
"""Runs at once: 16 HARNet runs shared an H100 fastest (docs/guide/gpu.md); 0: one per usable CPU core."""

_GRID_KEYS = {"name", "preset", "study", "set", "grid", "data", "cost_s", "report", "runs_with", "axes_from"}
_REPORT_KEYS = {"runs", "baseline", "reference", "highlight", "out", "plots"}


@dataclass(frozen=True)
class ReportSpec:
    """How a study's report is rebuilt after an import: ``fedaug report <runs...> --out <out>`` with these
    options (folders relative to the study's)."""

    runs: tuple[str, ...] = ("runs",)
    out: str = "."
    baseline: str | None = None
    reference: str | None = None
    highlight: str | None = None
    plots: bool = True


@dataclass(frozen=True)
class Grid:
    """One grid of a campaign (module docstring)."""

    name: str
    preset: str
    study: str
    overrides: tuple[str, ...] = ()
    axes: Mapping[str, list[Any]] = field(default_factory=dict)
    data: tuple[str, ...] = ()
    cost_s: Mapping[str, Any] = field(default_factory=dict)
    report: ReportSpec = ReportSpec()
    runs_with: str | None = None
    """Another grid whose runs folder this grid's run dirs go in (its FedAvg runs are their siblings)."""
    axes_from: Path | None = None
    """A JSON file of more axes (module docstring; None: the grid's own alone)."""

    def chosen_axes(self) -> dict[str, list[Any]] | None:
        """:attr:`axes` with :attr:`axes_from`'s merged over them; None: that file is missing or one of its
        lists is empty (nothing chosen yet).

        Raises:
            ConfigError: a file that is not a JSON mapping of config keys to lists.
        """
        if self.axes_from is None:
            return dict(self.axes)
        try:
            text = self.axes_from.read_text()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ConfigError(
                f"grid {self.name}: axes_from {self.axes_from} is not readable ({exc})"
            ) from exc
        try:
            more = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"grid {self.name}: axes_from {self.axes_from} is not JSON ({exc})") from exc
        if not isinstance(more, Mapping) or not all(
            isinstance(k, str) and isinstance(v, list) for k, v in more.items()
        ):
            raise ConfigError(
                f"grid {self.name}: axes_from {self.axes_from} must map config keys to lists, got {more!r}"
            )
        if any(not values for values in more.values()):
            return None
        return {**self.axes, **more}

    @property
    def folder(self) -> str:
        """The folder under the runs dir that holds this grid's run dirs."""
        return self.runs_with or self.name

    def grid_overrides(self, axes: Mapping[str, list[Any]] | None = None) -> list[str]:
        """The axes (default :attr:`axes`) as ``fedaug sweep --grid key=[...]`` arguments."""
        return [
            f"{key}={json.dumps(values)}" for key, values in (self.axes if axes is None else axes).items()
        ]

    def table_cost(self, kind: str, method: str) -> float | None:
        """Seconds per run from the cost table (``cost_s[kind]``: a number or ``{method: s, default: s}``)."""
        entry = self.cost_s.get(kind)
        if isinstance(entry, Mapping):
            entry = entry.get(method, entry.get("default"))
        return None if entry is None else float(entry)


@dataclass(frozen=True)
class Campaign:
    """A campaign file, read (:func:`read_campaign`)."""

    path: Path
    studies: Path
    workers: Mapping[str, int]
    grids: tuple[Grid, ...]
    order: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Per device kind, the grids that run there, in priority order (a kind not named: every grid, in the
    file's order): the CPU works through CPU-sized grids, the GPU through the file."""

    def in_order(self, kind: str) -> tuple[Grid, ...]:
        """The grids a ``kind`` campaign works through, in its order (:attr:`order`)."""
        if kind not in self.order:
            return self.grids
        chosen = {g.name: g for g in self.grids}
        return tuple(chosen[name] for name in self.order[kind] if name in chosen)

    def grid(self, name: str) -> Grid:
        for grid in self.grids:
            if grid.name == name:
                return grid
        raise ConfigError(f"no grid {name!r} in {self.path}; grids: {', '.join(g.name for g in self.grids)}")

    def only(self, names: Sequence[str]) -> Campaign:
        """The campaign of the named grids alone, in the file's order (no names: all of them).

        Raises:
            ConfigError: a name that is no grid of the file.
        """
        for name in names:
            self.grid(name)
        return replace(self, grids=tuple(g for g in self.grids if g.name in names)) if names else self

    def study_dir(self, grid: Grid) -> Path:
        return self.studies / grid.study


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of strings, got {value!r}")
    return tuple(value)


def _is_seconds(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < float("inf")


def _is_cost_table(cost: Any) -> bool:
    """``{cuda: 20, cpu: {default: 900, flea: 1400}}``: per device kind, seconds or seconds per method."""
    if not isinstance(cost, Mapping) or set(cost) - set(DEVICE_KINDS):
        return False
    for entry in cost.values():
        per_method = entry if isinstance(entry, Mapping) else {"default": entry}
        if not all(isinstance(k, str) and _is_seconds(v) for k, v in per_method.items()):
            return False
    return True


def _report(raw: Any, where: str) -> ReportSpec:
    if raw is None:
        return ReportSpec()
    if not isinstance(raw, Mapping) or set(raw) - _REPORT_KEYS:
        raise ConfigError(f"{where} must be a mapping of {', '.join(sorted(_REPORT_KEYS))}, got {raw!r}")
    runs = _strings(raw.get("runs", ["runs"]), f"{where}.runs") or ("runs",)
    for key in ("out", "baseline", "reference", "highlight"):
        if raw.get(key) is not None and not isinstance(raw[key], str):
            raise ConfigError(f"{where}.{key} must be a string, got {raw[key]!r}")
    return ReportSpec(
        runs=runs,
        out=str(raw.get("out", ".")),
        baseline=raw.get("baseline"),
        reference=raw.get("reference"),
        highlight=raw.get("highlight"),
        plots=bool(raw.get("plots", True)),
    )


def _grid(raw: Any, index: int, path: Path) -> Grid:
    where = f"grids[{index}] of {path}"
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - _GRID_KEYS)
    missing = [
        key for key in ("name", "preset", "study") if not isinstance(raw.get(key), str) or not raw[key]
    ]
    if unknown or missing:
        bad = f"unknown key(s) {', '.join(unknown)}" if unknown else f"no {', '.join(missing)}"
        raise ConfigError(
            f"{where}: {bad}; keys: {', '.join(sorted(_GRID_KEYS))} (name, preset, study needed)"
        )
    axes = raw.get("grid") or {}
    if not isinstance(axes, Mapping) or not all(isinstance(v, list) and v for v in axes.values()):
        raise ConfigError(f"{where}.grid must map config keys to non-empty lists, got {axes!r}")
    cost = raw.get("cost_s") or {}
    if not _is_cost_table(cost):
        raise ConfigError(
            f"{where}.cost_s must map {' / '.join(DEVICE_KINDS)} to seconds (a number >= 0, or a mapping of "
            f"method names and 'default' to numbers), got {cost!r}"
        )
    # the name becomes a folder under the runs dir (grid_points): one name, no path characters
    check_name(f"grids[{index}].name of {path}", str(raw["name"]), path=False)
    runs_with = raw.get("runs_with")
    if runs_with is not None:
        check_name(f"grids[{index}].runs_with of {path}", str(runs_with), path=False)
    study = str(raw["study"])
    if Path(study).is_absolute() or ".." in Path(study).parts:
        raise ConfigError(f"{where}.study {study!r} must be a folder inside the studies folder")
    axes_from = raw.get("axes_from")
    if axes_from is not None and (
        not isinstance(axes_from, str)
        or not axes_from
        or Path(axes_from).is_absolute()
        or ".." in Path(axes_from).parts
    ):
        raise ConfigError(
            f"{where}.axes_from must be a file inside the campaign file's folder, got {axes_from!r}"
        )
    return Grid(
        name=str(raw["name"]),
        preset=str(raw["preset"]),
        study=study,
        overrides=_strings(raw.get("set"), f"{where}.set"),
        axes=dict(axes),
        data=_strings(raw.get("data"), f"{where}.data"),
        cost_s=dict(cost),
        report=_report(raw.get("report"), f"{where}.report"),
        runs_with=None if runs_with is None else str(runs_with),
        axes_from=None if axes_from is None else path.parent / axes_from,
    )


def read_campaign(path: str | Path) -> Campaign:
    """Reads and checks a campaign file.

    Raises:
        ConfigError: a missing or malformed file, an unknown key, two grids of one name.
    """
    path = Path(path)
    raw = read_yaml_file(path, "campaign file")
    if not isinstance(raw, Mapping) or not isinstance(raw.get("grids"), list) or not raw["grids"]:
        raise ConfigError(f"campaign file {path} must hold a mapping with a non-empty list grids:")
    grids = tuple(_grid(g, i, path) for i, g in enumerate(raw["grids"]))
    names = [g.name for g in grids]
    if len(set(names)) != len(names):
        raise ConfigError(f"campaign file {path}: grid names must differ, got {', '.join(names)}")
    for grid in grids:
        if grid.runs_with is not None and (grid.runs_with == grid.name or grid.runs_with not in names):
            raise ConfigError(
                f"campaign file {path}: grid {grid.name}: runs_with must name another grid, got "
                f"{grid.runs_with!r}; grids: {', '.join(n for n in names if n != grid.name)}"
            )
    given = raw.get("workers") or {}
    workers = {**DEFAULT_WORKERS, **given} if isinstance(given, Mapping) else {}
    counts = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in workers.values())
    if not workers or set(workers) - set(DEVICE_KINDS) or not counts:
        raise ConfigError(f"campaign file {path}: workers must map cuda / cpu to counts >= 0, got {given!r}")
    if not isinstance(raw.get("studies", "."), str):
        raise ConfigError(f"campaign file {path}: studies must be a folder, got {raw['studies']!r}")
    studies = path.parent / str(raw.get("studies", "."))
    return Campaign(path=path, studies=studies, workers=workers, grids=grids, order=_order(raw, names, path))


def _order(raw: Mapping[str, Any], names: Sequence[str], path: Path) -> dict[str, tuple[str, ...]]:
    """The file's ``order: {cpu: [grid, ...]}``, checked: known kinds, known grids, each once."""
    given = raw.get("order") or {}
    if not isinstance(given, Mapping) or set(given) - set(DEVICE_KINDS):
        raise ConfigError(f"campaign file {path}: order must map cuda / cpu to lists of grids, got {given!r}")
    order = {}
    for kind, listed in given.items():
        grids = _strings(listed, f"order.{kind} of {path}")
        unknown = [name for name in grids if name not in names]
        if unknown or len(set(grids)) != len(grids):
            bad = f"unknown grid(s) {', '.join(unknown)}" if unknown else "a grid listed twice"
            raise ConfigError(f"campaign file {path}: order.{kind}: {bad}; grids: {', '.join(names)}")
        order[kind] = grids
    return order


def grid_points(grid: Grid, runs_dir: Path, extra: Sequence[str] = ()) -> list[SweepPoint]:
    """The grid's points, run dirs under ``runs_dir/<grid name>`` or ``runs_dir/<runs_with>``
    (:attr:`Grid.folder`; ``extra``: more ``--set`` overrides, e.g. the device and the data folder, which do
    not change a run's identity).

    Raises:
        ConfigError: a bad preset, override or axis, an ``axes_from`` file that is not a mapping of lists.
    """
    axes = grid.chosen_axes()
    if axes is None:  # axes_from: nothing chosen yet
        return []
    overrides = [*grid.overrides, *extra, f"out_dir={runs_dir / grid.folder}"]
    return expand_sweep(grid.preset, overrides, grid.grid_overrides(axes), where=f"grid {grid.name}")


def base_name(point: SweepPoint) -> str:
    """The sweep's own name (the part before a grid suffix ``key=value,...``)."""
    return point.config.name.split("/")[0]


def archive_path(point: SweepPoint) -> Path:
    """Where ``point``'s run lives inside its study's ``runs/``: its run dir below ``out_dir/<sweep>``."""
    return point.run_dir.relative_to(Path(point.config.out_dir) / base_name(point))
