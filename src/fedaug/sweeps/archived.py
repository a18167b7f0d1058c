"""Archived runs' round times, matched to a setting and scaled to this host: estimates from the first minute.

A checkout holds hundreds of finished runs under ``studies/*/runs/**`` (what ``fedaug archive`` keeps: the
config, ``env.json``, ``metrics.jsonl``, ``timings.jsonl(.gz)``, no checkpoints). A run to estimate is matched
to the archived runs of the same dataset, model, method, client count and local size (:func:`cost_key`)
that ran on the same device kind (``env.json``'s ``device``: ``cpu`` or ``cuda``); its rounds are costed at
their mean round time (``timings.jsonl``'s ``round_time``). On a CPU each archived run's time is scaled to
this host by ``probe here / probe there`` (:mod:`fedaug.sweeps.probe`): ``there`` is the run's own
``host_probe_s`` where ``env.json`` records one, else the median probe recorded by archived CPU runs of its
CPU model; a run with neither is taken as it is (and the estimate says so). GPU times are not scaled (the
probe times a CPU step). The campaign (``tools/campaign``) costs its grid points by the same index.

Where none of the method's own CPU runs of the setting has a thread-clock probe but runs of other methods on
the same setting do, those stand in for them (:meth:`Archive.sibling_time`): their scaled round time times
the two methods' round ratios (:data:`~fedaug.sweeps.round_ratio.DEFAULT_ROUND_RATIO`). A CPU model's median
probe lumps together hosts of one model name that run 2x apart: FedLC's UCI-HAR runs, scaled by it, put a
round at 8.5 s on a host where it took 22 s, and FedProx's thread-clock run on that host with the ratios
at 18 s.

Where the archive is (:func:`find_studies`): ``$FEDAUG_STUDIES`` (empty: none, archive estimates off),
else the first ``studies/`` with a ``*/runs`` folder in the current folder or one above it, else the
``studies/`` of the checkout fedaug is imported from (an editable install); an installed fedaug outside a
checkout has none, and its estimates come from the runs it has made itself.
"""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaug.config.identity import flatten
from fedaug.config.load import config_to_dict
from fedaug.engine.checkpoint import logged_round_times
from fedaug.errors import FedaugError
from fedaug.runs.resume import finished_summary, saved_env, saved_result_config
from fedaug.runtime.files import atomic_write_text
from fedaug.runtime.machine import HOST_PROBE_CLOCK, HOST_PROBE_ENV
from fedaug.sweeps.probe import CACHE_FILE, CACHE_MAX_AGE_S

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig

logger = logging.getLogger(__name__)

STUDIES_ENV = "FEDAUG_STUDIES"
"""The studies folder whose archived runs estimates come from (empty: none)."""

INDEX_FILE = "archived_runs.json"
"""The fedaug cache dir's index of the archived runs' facts, each kept while its run dir's files are
unchanged."""

_COST_KEYS = ("data.name", "model.name", "method.name", "partition.num_clients", "partition.mean_local_size")


def identity(flat: Mapping[str, Any]) -> str:
    """A result config (flat) as one comparable string."""
    return json.dumps(dict(flat), sort_keys=True, default=str)


def cost_key(flat: Mapping[str, Any]) -> tuple[Any, ...]:
    """Which runs' round times cost a run: dataset, model, method, client count and local size."""
    return tuple(flat.get(key) for key in _COST_KEYS)


def device_kind(run_dir: Path) -> str | None:
    """``cuda`` or ``cpu`` from the run's ``env.json`` (None: not recorded)."""
    device = saved_env(run_dir).get("device")
    return str(device).split(":")[0] if device else None


@dataclass(frozen=True)
class ArchivedRun:
    """A run dir under the studies folder: where, its identity, whether finished, its mean round time."""

    path: Path
    identity: str
    finished: bool
    cost_key: tuple[Any, ...]
    kind: str | None
    round_seconds: float | None
    probe_s: float | None = None
    """The host's probe when it ran (``env.json``'s ``host_probe_s``; None: not probed)."""
    cpu: str | None = None
    """The CPU model it ran on (``env.json``'s ``cpu_model``; None: not recorded)."""
    probe_clock: str | None = None
    """The clock its probe was timed by (``env.json``'s ``host_probe_clock``: ``thread``; None: recorded
    before the probe said, by the wall clock, which counts the time other work took the core)."""


def read_archived(run_dir: Path) -> ArchivedRun | None:
    """The run in ``run_dir`` (None: its ``config.yaml`` is not a readable run config)."""
    try:
        flat = saved_result_config(run_dir / "config.yaml")
        env = saved_env(run_dir)
    except FedaugError as exc:  # not a run config, or one of keys removed since
        logger.debug("not a run: %s (%s)", run_dir, exc)
        return None
    rounds = flat.get("train.rounds")
    times = [seconds for _, seconds in logged_round_times(run_dir)]
    probe, cpu, device = env.get("host_probe_s"), env.get("cpu_model"), env.get("device")
    clock = env.get("host_probe_clock")
    return ArchivedRun(
        path=run_dir,
        identity=identity(flat),
        finished=isinstance(rounds, int) and finished_summary(run_dir, rounds) is not None,
        cost_key=cost_key(flat),
        kind=str(device).split(":")[0] if device else None,
        round_seconds=statistics.fmean(times) if times else None,
        probe_s=float(probe) if isinstance(probe, int | float) and not isinstance(probe, bool) else None,
        cpu=cpu if isinstance(cpu, str) else None,
        probe_clock=clock if isinstance(clock, str) else None,
    )


def find_studies(start: Path | None = None) -> Path | None:
    """The studies folder of the archived runs (module docstring), or None."""
    given = os.environ.get(STUDIES_ENV)
    if given is not None:
        return Path(given) if given.strip() else None
    here = (start or Path.cwd()).resolve()
    checkout = Path(__file__).resolve().parents[3]  # src/fedaug/sweeps/archived.py -> the checkout
    for folder in (here, *here.parents, checkout):
        studies = folder / "studies"
        if studies.is_dir() and any(studies.glob("*/runs")):
            return studies
    return None


@dataclass(frozen=True)
class ArchivedTime:
    """The archived runs' mean round time for one setting on one device kind, scaled to this host.

    ``runs``: how many archived runs it averages (where some of the ``matched`` ones can be scaled by the
    probes, those alone); ``scaled``: how many of them were scaled; ``probe_here``/``probe_there``: this
    host's probe and the median probe of the scaled runs' hosts.
    """

    seconds: float
    runs: int
    scaled: int
    probe_here: float | None
    probe_there: float | None
    matched: int
    kind: str = "cpu"
    inferred: bool = False
    """Whether some scaled run's host probe was inferred (:meth:`Archive._inferred_probes`)."""
    clocked: bool = False
    """Whether only the runs whose probe was timed by the thread's CPU clock were taken."""
    via: tuple[str, ...] = ()
    """The other methods whose runs of the setting stood in, by the round ratios
    (:meth:`Archive.sibling_time`); empty: the method's own runs."""

    def describe(self, what: str = "this setting") -> str:
        """``from 3 archived runs of this setting, scaled by host probe 0.097 s vs 0.050 s``."""
        runs = _count(self.matched, "archived run")
        probe = "thread-clock host probe" if self.clocked else "host probe"
        if self.via:
            own = f" (its {runs} without one)" if self.matched else ""
            return (
                f"from {_count(self.runs, 'archived run')} of {', '.join(self.via)} on {what} with a {probe}"
                f"{own}, by the methods' round ratios, scaled by host probe {self.probe_here:.3g} s vs "
                f"{self.probe_there:.3g} s"
            )
        text = (
            f"from {runs} of {what}"
            if self.runs == self.matched
            else f"from {self.runs} of the {runs} of {what} (those with a {probe})"
        )
        if self.scaled and self.probe_here is not None and self.probe_there is not None:
            how = " (probe inferred for their CPU)" if self.inferred else ""
            return f"{text}, scaled by host probe {self.probe_here:.3g} s vs {self.probe_there:.3g} s{how}"
        if self.kind == "cpu":
            return f"{text}, unscaled: no host probe known for their CPU"
        return f"{text}, GPU times unscaled"


def _plain_ratio(method: Any) -> float | None:
    """A method's round ratio to FedAvg's (1 for FedAvg) where its archived mean round time is its own
    rounds' (it starts with no FedAvg rounds); None otherwise or where none is known."""
    from fedaug import registry
    from fedaug.sweeps.round_ratio import DEFAULT_ROUND_RATIO

    if method == "fedavg":
        return 1.0
    if not isinstance(method, str) or method not in DEFAULT_ROUND_RATIO:
        return None
    try:
        built = registry.get("method", method)
    except FedaugError:
        return None
    return None if hasattr(getattr(built, "method", built), "fedavg_rounds") else DEFAULT_ROUND_RATIO[method]


def _count(number: int, what: str) -> str:
    return f"{number} {what}{'' if number == 1 else 's'}"


class Archive:
    """The archived runs under ``studies`` (any depth), read once, and their round times by setting."""

    def __init__(self, studies: Path, runs: Iterable[ArchivedRun] | None = None) -> None:
        self.studies = studies
        self.runs = list(runs) if runs is not None else read_all(studies)
        self._timed: dict[tuple[Any, ...], list[ArchivedRun]] = defaultdict(list)
        probes: dict[str, list[float]] = defaultdict(list)
        for run in self.runs:
            if run.round_seconds is not None and run.kind is not None:
                self._timed[(*run.cost_key, run.kind)].append(run)
            if run.probe_s is not None and run.cpu is not None and run.kind == "cpu":
                probes[run.cpu].append(run.probe_s)
        self.cpu_probes = {cpu: statistics.median(values) for cpu, values in probes.items()}
        """The median recorded probe per CPU model: the probe of that model's runs archived without one
        (a model none of whose runs recorded one: inferred, :meth:`_inferred_probes`)."""
        self.inferred_probes = self._inferred_probes()
        """The CPU models whose probe is inferred from settings timed on both them and probed hosts."""
        self.cpu_probes.update(self.inferred_probes)

    def _inferred_probes(self) -> dict[str, float]:
        """A probe for each CPU model none of whose runs recorded one, from the settings it shares with
        runs whose host probe is known: on each shared setting its mean round time over theirs per probe
        second (``round_seconds / probe``), the median over the shared settings. Round time is taken as
        proportional to the probe, the assumption every scaled estimate already makes."""
        ratios: dict[str, list[float]] = defaultdict(list)
        for (*_, kind), runs in self._timed.items():
            if kind != "cpu":
                continue
            per_probe = [
                (run.round_seconds or 0.0) / probe
                for run in runs
                if (probe := self.probe_of(run)) is not None and probe > 0
            ]
            if not per_probe:
                continue
            unprobed: dict[str, list[float]] = defaultdict(list)
            for run in runs:
                if run.cpu is not None and run.cpu not in self.cpu_probes and run.round_seconds:
                    unprobed[run.cpu].append(run.round_seconds)
            for cpu, times in unprobed.items():
                ratios[cpu].append(statistics.fmean(times) / statistics.fmean(per_probe))
        return {cpu: statistics.median(values) for cpu, values in ratios.items()}

    def probe_of(self, run: ArchivedRun) -> float | None:
        """The host probe of the host ``run`` ran on: its own, else its CPU model's (None: neither known)."""
        if run.probe_s is not None:
            return run.probe_s
        return None if run.cpu is None else self.cpu_probes.get(run.cpu)

    def round_time(
        self, flat: Mapping[str, Any], kind: str, probe_here: Callable[[], float | None] | float | None = None
    ) -> ArchivedTime | None:
        """Mean round time (s) of the archived runs like the result config ``flat`` on ``kind``, each
        scaled to this host where both probes are known (``probe_here``: a number, or a function asked only
        when some run could be scaled); None: no such run timed."""
        runs = self._timed.get((*cost_key(flat), kind))
        if kind == "cpu" and not any(run.probe_clock == HOST_PROBE_CLOCK for run in runs or ()):
            sibling = self.sibling_time(flat, probe_here, len(runs or ()))
            if sibling is not None:
                return sibling
        if not runs:
            return None
        there = [self.probe_of(run) if kind == "cpu" else None for run in runs]
        here = probe_here() if callable(probe_here) and any(p is not None for p in there) else probe_here
        here = here if isinstance(here, float | int) and not isinstance(here, bool) and here > 0 else None
        probed = [(run, probe) for run, probe in zip(runs, there, strict=True) if probe is not None]
        clocked = any(run.probe_clock == HOST_PROBE_CLOCK for run, _ in probed)
        if clocked:
            # A wall-clock probe taken while other work shared the core reads as a slower host, more or
            # less so than the run's own rounds were slowed: where the setting has thread-clock probes,
            # they alone scale it
            probed = [(run, probe) for run, probe in probed if run.probe_clock == HOST_PROBE_CLOCK]
        if here is not None and probed:  # the runs that can be scaled say more about this host than the rest
            times = [(run.round_seconds or 0.0) * here / probe for run, probe in probed]
            return ArchivedTime(
                math.fsum(times) / len(times),
                len(times),
                len(times),
                here,
                statistics.median(probe for _, probe in probed),
                len(runs),
                kind,
                any(run.probe_s is None and run.cpu in self.inferred_probes for run, _ in probed),
                clocked,
            )
        times = [run.round_seconds or 0.0 for run in runs]
        return ArchivedTime(math.fsum(times) / len(times), len(times), 0, here, None, len(runs), kind)

    def sibling_time(
        self, flat: Mapping[str, Any], probe_here: Callable[[], float | None] | float | None, matched: int = 0
    ) -> ArchivedTime | None:
        """The round time of ``flat``'s method on this host from the thread-clock-probed CPU runs of other
        methods on its setting (module docstring): each run's round time scaled by ``probe here / its probe``
        and by ``ratio(method) / ratio(its method)``, averaged; None where no such run exists, this host's
        probe is unknown, or a method has no round ratio or starts with FedAvg rounds (its archived mean
        round mixes FedAvg's rounds with its own, which the ratio does not describe)."""
        method = flat.get("method.name")
        ratio = _plain_ratio(method)
        if ratio is None:
            return None
        at = _COST_KEYS.index("method.name")
        setting = (*cost_key(flat)[:at], *cost_key(flat)[at + 1 :])
        found: list[tuple[ArchivedRun, float]] = []
        for (*key, kind), runs in self._timed.items():
            if kind != "cpu" or key[at] == method or (*key[:at], *key[at + 1 :]) != setting:
                continue
            other = _plain_ratio(key[at])
            if other is None:
                continue
            found += [
                (run, ratio / other)
                for run in runs
                if run.probe_clock == HOST_PROBE_CLOCK and run.probe_s and run.round_seconds
            ]
        if not found:
            return None
        here = probe_here() if callable(probe_here) else probe_here
        if not (isinstance(here, float | int) and not isinstance(here, bool) and here > 0):
            return None
        times = [(run.round_seconds or 0.0) * here / (run.probe_s or 1.0) * scale for run, scale in found]
        return ArchivedTime(
            math.fsum(times) / len(times),
            len(times),
            len(times),
            here,
            statistics.median(run.probe_s or 0.0 for run, _ in found),
            matched,
            "cpu",
            clocked=True,
            via=tuple(sorted({str(run.cost_key[at]) for run, _ in found})),
        )


def read_all(studies: Path, index: Path | None = None) -> list[ArchivedRun]:
    """Every run under ``studies`` (:func:`read_archived`); with ``index`` (a JSON file), a run dir whose
    files are unchanged since the index recorded it is taken from there, and the index is rewritten."""
    old: dict[str, Any] = {}
    if index is not None:
        try:
            loaded = json.loads(index.read_text())
            old = loaded if isinstance(loaded, dict) else {}
        except (OSError, ValueError):
            old = {}
    new: dict[str, Any] = {}
    runs = []
    for config in sorted(studies.rglob("config.yaml")):
        run_dir = config.parent
        stamp = _stamp(run_dir)
        entry = old.get(str(run_dir))
        if isinstance(entry, dict) and entry.get("stamp") == stamp:
            run = _from_json(run_dir, entry["run"]) if entry["run"] is not None else None
        else:
            run = read_archived(run_dir)
        new[str(run_dir)] = {"stamp": stamp, "run": None if run is None else _to_json(run)}
        if run is not None:
            runs.append(run)
    if index is not None and new != old:
        try:
            index.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(index, json.dumps(new))  # shards of one sweep may rewrite it at once
        except (OSError, FedaugError) as exc:  # PathError: read-only, full, or another writer's rename
            logger.debug("archive index not written to %s: %s", index, exc)
    return runs


def _stamp(run_dir: Path) -> list[list[Any]]:
    """The names, sizes and modification times of a run dir's files: what its facts are read from."""
    with os.scandir(run_dir) as entries:
        found = [[e.name, e.stat().st_size, e.stat().st_mtime_ns] for e in entries if e.is_file()]
    return sorted(found)


def _to_json(run: ArchivedRun) -> dict[str, Any]:
    fields = asdict(run)
    fields.pop("path")
    return fields


def _from_json(run_dir: Path, fields: Mapping[str, Any]) -> ArchivedRun:
    return ArchivedRun(path=run_dir, **{**fields, "cost_key": tuple(fields["cost_key"])})


def config_kind(config: ExperimentConfig) -> str:
    """The device kind ``config`` runs on here: ``cuda`` or ``cpu`` (``auto``: ``cuda`` if there is one)."""
    device = config.engine.device.strip().lower()
    if device == "auto":
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    return device.split(":")[0]


class ArchiveTimes:
    """An archive's round times for runs of this host: its probe (:func:`fedaug.sweeps.probe.cached_probe`)
    is taken once, when an archived run is first to be scaled."""

    def __init__(self, archive: Archive, probe: Callable[[], tuple[float, str]]) -> None:
        self.archive = archive
        self._probe = probe
        self.probe: tuple[float, str, float] | None = None
        """This host's probe (s), where it came from and the seconds it took (None: not needed yet)."""

    def probe_here(self) -> float:
        if self.probe is None:
            start = time.perf_counter()
            seconds, source = self._probe()
            self.probe = (seconds, source, time.perf_counter() - start)
        return self.probe[0]

    def round_time(self, config: ExperimentConfig, method: str | None = None) -> ArchivedTime | None:
        """The archived round time of ``config``'s setting (of ``method`` instead of its own if given)."""
        flat = {key: value for key, value in flatten(config_to_dict(config)).items() if key in _COST_KEYS}
        if method is not None:
            flat["method.name"] = method
        return self.archive.round_time(flat, config_kind(config), self.probe_here)

    def probe_line(self) -> str | None:
        """``host probe: 0.097 s a reference step (measured now in 1.3 s, ...)`` once one was taken."""
        if self.probe is None:
            return None
        seconds, source, took = self.probe
        hours = f"{CACHE_MAX_AGE_S / 3600:.0f} h"
        how = {
            "given": f"given in ${HOST_PROBE_ENV}",
            "cached": f"measured here in the last {hours}: {CACHE_FILE} in the fedaug cache dir",
            "measured": f"measured now in {took:.1f} s, kept {hours}",
        }[source]
        return (
            f"host probe: {seconds:.3g} s a reference step ({how}); archived runs of {self.archive.studies} "
            f"scaled by it where their host's probe is known"
        )


def archive_times() -> ArchiveTimes | None:
    """The archived runs' round times of :func:`find_studies`' folder (None: none found), read through the
    fedaug cache dir's index."""
    studies = find_studies()
    if studies is None:
        return None
    from fedaug.runtime.paths import cache_dir
    from fedaug.sweeps.probe import cached_probe

    return ArchiveTimes(Archive(studies, read_all(studies, cache_dir() / INDEX_FILE)), cached_probe)
