"""Where the DP frontier study's time goes: the seconds of every finished step, by kind, and what is left.

Reads the runner's log (``runs/privacy_dp_bg.log``: ``=== <time> start: CMD`` and ``=== <time> done in N s:
CMD`` lines around each step's own log) and prints, in Markdown:

* one row per finished step: its kind (``run``, ``reconstruct``, ``context``), dataset and setting, its wall
  seconds, and its parts from the step's own log lines: a run's start-up to its first round; an attack's
  start-up (to ``attacking ...``), each decoder's training and scoring, each context size;
* for a run whose run dir is at hand (``--runs``), the CPU seconds its rounds logged (``timings.jsonl``:
  ``cpu_time``), the honest cost on a machine the study shares with other jobs (wall seconds there are CPU
  seconds times the contention);
* the median seconds of each (dataset, method, step kind), and the remaining steps of ``steps.txt`` (those
  not in the ledger) costed at those medians, or at ``--assume KIND=SECONDS`` where nothing was measured.

With ``--json PATH`` it also writes that accounting as JSON (:func:`accounting`): per (dataset, method,
kind) the finished steps' seconds (min, median, max; CPU or wall) and start-up, the assumed seconds, and
what is left in core-hours, in all, per dataset and per kind. ``tools/results/privacy_dp.py`` renders the
README's "How long" blocks from the committed ``studies/privacy_dp/step_costs.json``.

A step interrupted and resumed counts its last part only (the runner times each start); its run's rounds are
still all in ``timings.jsonl``. From the repository root:

    python studies/privacy_dp/step_costs.py --log ../privdp/runs/privacy_dp_bg.log \
        --done ../privdp/runs/privacy_dp_steps.done --runs ../privdp/runs \
        --json studies/privacy_dp/step_costs.json --machine "the project's 2-core machine, shared"
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
RUNNER = re.compile(r"^=== (\S+) (start|done in (\d+) s|FAILED after (\d+) s): (.*)$")
LOGGED = re.compile(r"^(\d\d):(\d\d):(\d\d) (?:INFO|WARNING) (.*)$")
SETTING = re.compile(r'"((?:flea l\d|fedmix) eps [^=]+)=')
RUN_NAME = re.compile(r"name=(privacy_dp\w*?_(fmnist|har)\w*)")
ATTACK_DATA = re.compile(r"attacks/(fmnist|har)/")
PART = re.compile(r"/ (\w+): eval MSE|: (\d+) samples -> accuracy|^(round 1)/")


@dataclass
class Step:
    """One finished step of the log.

    Attributes:
        finished: when the runner logged it done (None for a step not run yet).
    Attributes:
        command: the step's line of the steps file.
        wall_s: the runner's seconds for it (its last start when it was resumed; a run's are replaced by
            its logged rounds' by :func:`add_run_timings`).
        parts: seconds of its parts, in order (``start-up``, a decoder's name, ``n=SIZE``).
        cpu_s: a run's CPU seconds over its logged rounds (:func:`add_run_timings`), None if not known.
        finished: when the runner logged it done (None for a step not run yet).
    """

    command: str
    wall_s: float
    parts: dict[str, float] = field(default_factory=dict)
    cpu_s: float | None = None
    finished: datetime | None = None

    @property
    def cost_s(self) -> float:
        """What the step costs one core: its CPU seconds where logged (runs), else its wall seconds."""
        return self.wall_s if self.cpu_s is None else self.cpu_s

    @property
    def kind(self) -> str:
        words = self.command.split()
        return words[2] if words[1] == "attack" else "run"

    @property
    def dataset(self) -> str:
        found = RUN_NAME.search(self.command) or ATTACK_DATA.search(self.command)
        return found.group(2 if found.re is RUN_NAME else 1) if found else "?"

    @property
    def setting(self) -> str:
        """``flea l1 eps 8``, ``fedmix eps inf``, ...: the label the attacks use, rebuilt for a run line."""
        found = SETTING.search(self.command)
        if found:
            return found.group(1)
        layer = re.search(r"split_layer=(\d+)", self.command)
        eps = re.search(r"share_dp\.epsilon=(\S+)", self.command)
        method = "flea" if "--method flea" in self.command else "fedmix"
        where = f" l{layer.group(1)}" if layer else ""
        return f"{method}{where} eps {eps.group(1) if eps else 'inf'}"

    @property
    def method(self) -> str:
        """The setting without its epsilon (``flea l1``, ``fedmix``): what a step's cost depends on."""
        return self.setting.split(" eps ")[0]

    @property
    def run_name(self) -> str | None:
        found = RUN_NAME.search(self.command)
        return found.group(1) if found else None


def _clock(start: datetime, logged: re.Match[str]) -> datetime:
    """A step's ``HH:MM:SS`` log time as a datetime on or after its start (the log lines carry no date)."""
    hour, minute, second = (int(logged.group(i)) for i in (1, 2, 3))
    at = start.replace(hour=hour, minute=minute, second=second, microsecond=0)
    return at + timedelta(days=1) if at < start - timedelta(seconds=1) else at


def parse_log(lines: Iterable[str]) -> list[Step]:
    """The finished steps of a runner log, each with its parts timed from its own log lines."""
    steps: list[Step] = []
    start: datetime | None = None
    marks: list[tuple[str, datetime]] = []
    for line in lines:
        line = line.rstrip("\n")
        runner = RUNNER.match(line)
        if runner:
            at = datetime.fromisoformat(runner.group(1).replace("Z", "+00:00"))
            if runner.group(2) == "start":
                start, marks = at, [("", at)]
            elif runner.group(3) is not None and start is not None:
                steps.append(Step(runner.group(5), float(runner.group(3)), _parts(marks, at), finished=at))
                start = None
            else:
                start = None
            continue
        logged = LOGGED.match(line)
        if logged is None or start is None:
            continue
        text = logged.group(4)
        if text.startswith("attacking ") or text.startswith("run runs/"):
            marks.append(("start-up", _clock(start, logged)))
        part = PART.search(text)
        if part:
            name = part.group(1) or (f"n={part.group(2)}" if part.group(2) else "")
            if name:
                marks.append((name, _clock(start, logged)))
    return steps


def _parts(marks: list[tuple[str, datetime]], end: datetime) -> dict[str, float]:
    """Seconds between consecutive marks, each named by the mark that ends it; the rest of the step (a
    run's rounds, an attack's report) as ``rest``."""
    parts: dict[str, float] = {}
    for (_, before), (name, at) in itertools.pairwise(marks):
        parts[name] = parts.get(name, 0.0) + (at - before).total_seconds()
    if len(marks) > 1:
        parts["rest"] = (end - marks[-1][1]).total_seconds()
    return parts


def run_cpu_seconds(runs: Path, name: str) -> tuple[float, float, int] | None:
    """(wall, CPU) seconds of a run's logged rounds and their count, from its ``timings.jsonl`` under
    ``runs/NAME`` (None when it is not there or logs no ``cpu_time``)."""
    found = sorted((runs / name).glob("*/*/seed*/timings.jsonl*"))
    if not found:
        return None
    opener = gzip.open if found[0].suffix == ".gz" else open
    with opener(found[0], "rt") as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    if not rows or "cpu_time" not in rows[-1]:
        return None
    startup = float(rows[0].get("startup", {}).get("total_s", 0.0))
    wall = startup + sum(float(r.get("round_time", 0.0)) for r in rows)
    return wall, sum(float(r.get("cpu_time", 0.0)) for r in rows), len(rows)


def group_key(step: Step) -> tuple[str, str, str]:
    return step.dataset, step.method, step.kind


def medians(steps: list[Step]) -> dict[tuple[str, str, str], float]:
    """The median cost (:attr:`Step.cost_s`) of each (dataset, method, kind)."""
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for step in steps:
        groups[group_key(step)].append(step.cost_s)
    return {key: statistics.median(values) for key, values in groups.items()}


def add_run_timings(steps: list[Step], runs: Path) -> None:
    """Each run step's wall and CPU seconds from its run dir's ``timings.jsonl`` (all its rounds, also those
    of a start the runner did not see finish), where the run dir is under ``runs``."""
    for step in steps:
        if step.kind == "run" and step.run_name:
            found = run_cpu_seconds(runs, step.run_name)
            if found:
                step.wall_s, step.cpu_s = found[0], found[1]


def remaining(steps_file: Path, done: set[str]) -> list[Step]:
    """The steps of ``steps_file`` not in the ledger ``done`` (costless placeholders, for their keys)."""
    lines = [x.strip() for x in steps_file.read_text().splitlines()]
    return [Step(x, 0.0) for x in lines if x and not x.startswith("#") and x not in done]


def projection(
    left: list[Step], measured: dict[tuple[str, str, str], float], assume: dict[str, float]
) -> list[tuple[tuple[str, str, str], int, float, str]]:
    """Per (dataset, method, kind) of the remaining steps: their count, seconds each and where that came
    from (``measured``: the finished steps' median; ``assumed``: ``--assume DATASET:KIND`` or ``KIND``)."""
    counts: dict[tuple[str, str, str], int] = defaultdict(int)
    for step in left:
        counts[group_key(step)] += 1
    rows = []
    for key, count in sorted(counts.items()):
        dataset, method, kind = key
        guesses = (f"{dataset}:{method}:{kind}", f"{dataset}:{kind}", kind)
        if key in measured:
            rows.append((key, count, measured[key], "measured"))
        else:
            guess = next((assume[g] for g in guesses if g in assume), None)
            rows.append((key, count, guess if guess is not None else float("nan"), "assumed"))
    return rows


def markdown(steps: list[Step], rows: list[tuple[tuple[str, str, str], int, float, str]]) -> str:
    """The three tables: finished steps, medians by kind, what is left."""
    out = ["## Finished steps", "", "| dataset | setting | kind | wall s | CPU s | parts (wall s) |"]
    out.append("|---|---|---|---|---|---|")
    for step in steps:
        cpu = "" if step.cpu_s is None else f"{step.cpu_s:.0f}"
        parts = ", ".join(f"{k} {v:.0f}" for k, v in step.parts.items())
        out.append(f"| {step.dataset} | {step.setting} | {step.kind} | {step.wall_s:.0f} | {cpu} | {parts} |")
    out += ["", "## Median seconds by step kind (CPU where logged, else wall)", ""]
    out += ["| dataset | method | kind | steps | median s |", "|---|---|---|---|---|"]
    groups: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for step in steps:
        groups[group_key(step)].append(step.cost_s)
    for key, values in sorted(groups.items()):
        out.append(f"| {' | '.join(key)} | {len(values)} | {statistics.median(values):.0f} |")
    out += ["", "## What is left", "", "| dataset | method | kind | steps | s each | from | hours |"]
    out.append("|---|---|---|---|---|---|---|")
    total = 0.0
    for key, count, each, source in rows:
        total += count * each
        out.append(f"| {' | '.join(key)} | {count} | {each:.0f} | {source} | {count * each / 3600:.2f} |")
    out += ["", f"Total left: {sum(r[1] for r in rows)} steps, {total / 3600:.1f} hours."]
    return "\n".join(out) + "\n"


KINDS = ("run", "reconstruct", "context")
"""The step kinds, in the order a setting's steps run."""


def _spread(values: list[float]) -> dict[str, float]:
    return {
        "min_s": round(min(values), 1),
        "median_s": round(statistics.median(values), 1),
        "max_s": round(max(values), 1),
    }


def accounting(
    steps: list[Step],
    rows: list[tuple[tuple[str, str, str], int, float, str]],
    assume: dict[str, float],
    *,
    steps_done: int,
    machine: str = "",
) -> dict[str, Any]:
    """The accounting as a JSON-ready dict (what ``--json`` writes).

    ``measured``: per (dataset, method, kind) of the finished ``steps``, their count, seconds (min, median,
    max of :attr:`Step.cost_s`), ``seconds``: ``CPU`` when every one logged its CPU seconds (runs), else
    ``wall``, and the median of their start-ups. ``left``: :func:`projection`'s ``rows``. ``core_hours``:
    the finished steps' and the left ones' in all, per dataset and per kind; NaN (an unmeasured kind with no
    ``--assume``) is written as null and makes its totals null.
    """
    groups: dict[tuple[str, str, str], list[Step]] = defaultdict(list)
    for step in steps:
        groups[group_key(step)].append(step)
    measured = []
    for (dataset, method, kind), members in sorted(groups.items()):
        startups = [s.parts["start-up"] for s in members if "start-up" in s.parts]
        measured.append(
            {
                "dataset": dataset,
                "method": method,
                "kind": kind,
                "steps": len(members),
                "seconds": "CPU" if all(s.cpu_s is not None for s in members) else "wall",
                **_spread([s.cost_s for s in members]),
                "startup_median_s": statistics.median(startups) if startups else None,
            }
        )

    def hours(seconds: float) -> float | None:
        return None if math.isnan(seconds) else round(seconds / 3600, 3)

    left = []
    by_dataset: dict[str, float] = defaultdict(float)
    by_kind: dict[str, float] = defaultdict(float)
    for (dataset, method, kind), count, each, source in rows:
        left.append(
            {
                "dataset": dataset,
                "method": method,
                "kind": kind,
                "steps": count,
                "each_s": None if math.isnan(each) else round(each, 1),
                "source": source,
            }
        )
        by_dataset[dataset] += count * each
        by_kind[kind] += count * each
    finished = [s.finished for s in steps if s.finished is not None]
    return {
        "measured_from": min(finished).date().isoformat() if finished else None,
        "measured_to": max(finished).date().isoformat() if finished else None,
        "machine": machine,
        "assumed_s": dict(sorted(assume.items())),
        "steps_done": steps_done,
        "steps_left": sum(r[1] for r in rows),
        "measured": measured,
        "left": left,
        "core_hours": {
            "done": hours(sum(s.cost_s for s in steps)),
            "left": hours(sum(by_dataset.values())),
            "left_by_dataset": {k: hours(v) for k, v in sorted(by_dataset.items())},
            "left_by_kind": {k: hours(by_kind[k]) for k in KINDS if k in by_kind},
        },
    }


def parse_assume(values: list[str]) -> dict[str, float]:
    assume = {}
    for value in values:
        key, sep, seconds = value.rpartition("=")
        if not sep or not key:
            raise SystemExit(f"--assume {value!r}: expected [DATASET:[METHOD:]]KIND=SECONDS")
        assume[key] = float(seconds)
    return assume


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=Path("runs/privacy_dp_bg.log"))
    parser.add_argument("--steps", type=Path, default=HERE / "steps.txt")
    parser.add_argument("--done", type=Path, default=Path("runs/privacy_dp_steps.done"))
    parser.add_argument("--runs", type=Path, help="the runs/ folder of the run dirs (CPU seconds)")
    parser.add_argument(
        "--assume",
        action="append",
        default=[],
        help="seconds of an unmeasured kind, e.g. har:run=2700 or har:flea l1:context=400 (repeatable)",
    )
    parser.add_argument("--json", type=Path, help="also write the accounting as JSON to this file")
    parser.add_argument("--machine", default="", help="where it was measured, for the JSON (free text)")
    args = parser.parse_args(argv)
    steps = parse_log(args.log.read_text().splitlines())
    if args.runs is not None:
        add_run_timings(steps, args.runs)
    done = set(args.done.read_text().splitlines()) if args.done.exists() else set()
    assume = parse_assume(args.assume)
    steps_file = {x.strip() for x in args.steps.read_text().splitlines()}
    rows = projection(remaining(args.steps, done), medians(steps), assume)
    text = markdown(steps, rows)
    if args.json is not None:
        found = accounting(steps, rows, assume, steps_done=len(done & steps_file), machine=args.machine)
        args.json.write_text(json.dumps(found, indent=1, allow_nan=False) + "\n")
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
