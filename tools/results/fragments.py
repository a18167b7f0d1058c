"""Generated results in hand-written documents: marked fragments, one canonical run per seed, paired gains.

A document holds generated text between marker comments::

    <!-- results:NAME -->
    ...generated, never edited by hand...
    <!-- /results:NAME -->

:func:`fill_fragments` replaces each marked body with its freshly generated text; :func:`fragment_differences`
names, for a table, the row and column of each cell that differs between a document and the archives (the
check a unit test runs). The numbers come from archived runs (:mod:`fedaug.results.store`):

- a run's *device class* is ``CPU`` or the GPU's name (:func:`device_class`); runs of different classes are
  never mixed into one statistic;
- :func:`canonical` keeps one run per seed in a device class: on the CPU the run on :data:`REFERENCE_CPU`
  where one is archived, else the run on another CPU (the tables name that seed's CPU); among runs on the same
  processor, the first given (callers list studies in their order of precedence);
- :func:`paired_gain` subtracts a baseline's number seed by seed, over the seeds both have, preferring the
  baseline's run on the same CPU model as the method's.

Statistics are mean ± sample standard deviation (ddof = 1) over seeds
(:func:`fedaug.results.store.aggregate`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from fedaug.errors import FedaugError
from fedaug.results.store import Run, Stat, aggregate

MARKER = re.compile(
    r"<!-- results:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /results:(?P=name) -->", re.DOTALL
)
"""A generated fragment: its name and body (the body ends with a newline)."""

REFERENCE_CPU = "AMD EPYC"
"""The CPU model whose run is canonical where a seed was archived on several CPUs (most archived runs)."""

GPU_VENDORS = ("NVIDIA", "AMD Instinct")
"""How a processor name recorded by :func:`fedaug.runtime.machine.processor_of` marks a GPU."""


def device_class(run: Run) -> str:
    """``CPU`` for a run on any CPU (recorded or not), else the GPU's name."""
    if run.cpu is not None and run.cpu.startswith(GPU_VENDORS):
        return run.cpu
    return "CPU"


def cpu_name(run: Run) -> str:
    """The run's processor in words: the recorded model, or ``unrecorded CPU`` (runs before ``env.json``)."""
    return run.cpu or "unrecorded CPU"


def canonical(runs: Iterable[Run], device: str = "CPU") -> dict[int, Run]:
    """One run per seed among ``runs`` of device class ``device`` (see the module); seeds in order."""
    chosen: dict[int, Run] = {}
    for run in runs:
        if device_class(run) != device:
            continue
        held = chosen.get(run.seed)
        if held is None or (held.cpu != REFERENCE_CPU and run.cpu == REFERENCE_CPU):
            chosen[run.seed] = run
    return dict(sorted(chosen.items()))


def reruns(runs: Iterable[Run], device: str = "CPU") -> list[tuple[Run, Run]]:
    """``(canonical, other)`` for each run of ``device`` that :func:`canonical` did not choose and that ran
    on another processor than the chosen one: the same config and seed measured twice."""
    runs = [r for r in runs if device_class(r) == device]
    chosen = canonical(runs, device)
    return [(chosen[r.seed], r) for r in runs if r is not chosen[r.seed] and r.cpu != chosen[r.seed].cpu]


Metric = Callable[[Run], float]


def summary_metric(key: str, scale: float = 100.0) -> Metric:
    """A metric reading ``summary.json``'s ``key`` (a fraction), times ``scale`` (percent)."""

    def read(run: Run) -> float:
        return scale * float(run.summary[key])

    return read


@dataclass(frozen=True)
class Gain:
    """A method's number minus its baseline's, per seed (points), and which seeds paired across CPU models."""

    values: dict[int, float]
    cross_cpu: tuple[int, ...]

    @property
    def stat(self) -> Stat:
        """Mean ± sample std over the paired seeds."""
        return aggregate(list(self.values.values()))

    def above_zero(self) -> int:
        """How many seeds gain (above 0)."""
        return sum(v > 0 for v in self.values.values())


def paired_gain(method: Sequence[Run], baseline: Sequence[Run], metric: Metric, device: str = "CPU") -> Gain:
    """``metric`` of the method's canonical runs minus the baseline's, seed by seed (seeds both have); the
    baseline's run on the method's CPU model is preferred over its canonical one.

    Raises:
        FedaugError: if no seed has both.
    """
    ours = canonical(method, device)
    values, cross = {}, []
    for seed, run in ours.items():
        same = [b for b in baseline if b.seed == seed and device_class(b) == device and b.cpu == run.cpu]
        base = same[0] if same else canonical(baseline, device).get(seed)
        if base is None:
            continue
        values[seed] = metric(run) - metric(base)
        if base.cpu != run.cpu:
            cross.append(seed)
    if not values:
        raise FedaugError("no seed has both the method's and the baseline's run")
    return Gain(values, tuple(cross))


def fmt(stat: Stat, digits: int = 2, *, sign: bool = False) -> str:
    """``mean ± std`` (``mean`` alone for one seed), with a ``+`` for positive gains when ``sign``."""
    mean = f"{stat.mean:+.{digits}f}" if sign else f"{stat.mean:.{digits}f}"
    return mean if stat.n < 2 else f"{mean} ± {stat.std:.{digits}f}"


def seeds_text(seeds: Iterable[int]) -> str:
    """``seeds 0-2``, ``seed 2``, ``seeds 0, 2``."""
    values = sorted(set(seeds))
    if len(values) == 1:
        return f"seed {values[0]}"
    if values == list(range(values[0], values[-1] + 1)):
        return f"seeds {values[0]}-{values[-1]}"
    return "seeds " + ", ".join(map(str, values))


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table (the first column left-aligned, all of them ``---``)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def read_fragments(text: str) -> dict[str, str]:
    """The bodies of the marked fragments of ``text`` by name."""
    return {m["name"]: m["body"] for m in MARKER.finditer(text)}


def fill_fragments(text: str, fragments: Mapping[str, str]) -> str:
    """``text`` with each marked body replaced by ``fragments[name]``.

    Raises:
        FedaugError: naming a marker of ``text`` that has no generated fragment.
    """
    missing = sorted(set(read_fragments(text)) - set(fragments))
    if missing:
        raise FedaugError(f"no generator for the fragments {missing}; known: {sorted(fragments)}")
    return MARKER.sub(
        lambda m: f"<!-- results:{m['name']} -->\n{fragments[m['name']]}<!-- /results:{m['name']} -->", text
    )


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def fragment_differences(name: str, written: str, generated: str) -> list[str]:
    """Each difference between a written fragment and the generated one, naming the table cell (fragment,
    row label, column header) or the line."""
    found: list[str] = []
    old, new = written.splitlines(), generated.splitlines()
    header: list[str] = []
    for number in range(max(len(old), len(new))):
        a = old[number] if number < len(old) else "<missing>"
        b = new[number] if number < len(new) else "<missing>"
        if b.startswith("|") and not header:
            header = _cells(b)
        elif not b.startswith("|"):
            header = []
        if a == b:
            continue
        if a.startswith("|") and b.startswith("|") and header and len(_cells(a)) == len(_cells(b)):
            for column, (x, y) in enumerate(zip(_cells(a), _cells(b), strict=True)):
                if x != y:
                    where = (
                        f"row {_cells(b)[0]!r}, column {header[column] if column < len(header) else column!r}"
                    )
                    found.append(f"{name}: {where}: written {x!r}, the archives give {y!r}")
        else:
            found.append(f"{name}, line {number + 1}: written {a!r}, the archives give {b!r}")
    return found


def reproduces(ours: Stat, paper: float) -> bool | None:
    """The wording rule of "reproduces": the paper's number lies within our mean ± 2 sample std on the paper's
    statistic; None (no claim) for fewer than two seeds."""
    if ours.n < 2:
        return None
    return abs(paper - ours.mean) <= 2 * ours.std


def beats(gain: Gain) -> bool | None:
    """The wording rule of "beats" / "gains over": the paired gain's mean is above zero by more than its
    sample std; None (no claim) for fewer than two paired seeds. "Below" is the mirror: :func:`trails`."""
    stat = gain.stat
    return None if stat.n < 2 else stat.mean > stat.std


def trails(gain: Gain) -> bool | None:
    """The wording rule of "below": the paired gain's mean is below zero by more than its sample std."""
    stat = gain.stat
    return None if stat.n < 2 else -stat.mean > stat.std


def in_every_seed(gain: Gain) -> bool:
    """The wording rule of "in every seed": the paired gain is above zero in each of its (named) seeds."""
    return gain.above_zero() == len(gain.values)
