"""A packed sweep's runs on a timeline, from its log: which run ran when, and how many ran at once.

``fedaug sweep`` logs each run as it ends, with its duration (``[7/36] <run dir> finished: ... (104 s)``); a
run's start is its end minus that. Each run is drawn as a bar in the first free lane (a lane is a worker
slot, not a particular worker process), coloured by method, and a second panel counts the runs in progress,
so a tail of few runs at the end shows as a drop. Runs that failed or were put back are not drawn.

Usage::

    python studies/speed/grid_timeline.py studies/flea_table1_har/h100_one_call/sweep.log \\
        --out studies/speed/plots/h100_grid_timeline.png
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

FINISHED = re.compile(r"^(\d\d:\d\d:\d\d) INFO \[\d+/\d+\] (\S+) finished: .*\((\d+) s\)$")


@dataclass(frozen=True)
class Span:
    """One finished run: its setting and method (from the run dir), start and end in seconds."""

    setting: str
    method: str
    start: float
    end: float


def read_spans(log: Path) -> list[Span]:
    """The finished runs of a sweep log, in seconds from the first one's start (a log that crosses
    midnight is read as one day later)."""
    rows = []
    for line in log.read_text().splitlines():
        if match := FINISHED.match(line):
            clock, run_dir, seconds = match.groups()
            end = datetime.strptime(clock, "%H:%M:%S")
            if rows and end < rows[-1][0] - timedelta(hours=12):
                end += timedelta(days=1)
            parts = Path(run_dir).parts
            rows.append((end, parts[-3], parts[-2], int(seconds)))
    if not rows:
        raise SystemExit(f"{log}: no 'finished:' lines (is it a fedaug sweep log?)")
    origin = min(end - timedelta(seconds=s) for end, _, _, s in rows)
    return [
        Span(setting, method, (end - origin).total_seconds() - s, (end - origin).total_seconds())
        for end, setting, method, s in rows
    ]


def lanes(spans: list[Span]) -> list[int]:
    """A lane per span: the lowest one free at its start (the log's second resolution may overlap a run
    by a second with the one before it in its lane, which is allowed)."""
    free_at: list[float] = []
    out = [0] * len(spans)
    for i in sorted(range(len(spans)), key=lambda i: spans[i].start):
        lane = next((k for k, t in enumerate(free_at) if t <= spans[i].start + 1), len(free_at))
        if lane == len(free_at):
            free_at.append(0.0)
        free_at[lane] = spans[i].end
        out[i] = lane
    return out


def in_progress(spans: list[Span], most: int, step: float = 1.0) -> tuple[list[float], list[int]]:
    """Runs in progress every ``step`` seconds, at most ``most`` (the number of lanes: whole seconds in the
    log make a run that starts as another ends overlap it by up to a second)."""
    end = max(s.end for s in spans)
    times = [k * step for k in range(int(end / step) + 1)]
    return times, [min(most, sum(s.start <= t < s.end for s in spans)) for t in times]


def plot(
    spans: list[Span], lane_of: list[int], busy: tuple[list[float], list[int]], out: Path, title: str
) -> None:
    """The bars in their lanes (``lane_of``, from :func:`lanes`) above the runs in progress (``busy``, from
    :func:`in_progress`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    methods = sorted({s.method for s in spans})
    colours = dict(zip(methods, plt.get_cmap("tab10").colors, strict=False))
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(9, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]}, constrained_layout=True
    )
    for span, lane in zip(spans, lane_of, strict=True):
        top.barh(
            lane,
            span.end - span.start,
            left=span.start,
            height=0.8,
            color=colours[span.method],
            edgecolor="white",
            linewidth=1,
        )
        k = span.setting.rsplit("-", 1)[-1]
        top.text(span.start + 1, lane, k, va="center", fontsize=6, color="white")
    handles = [Patch(color=colours[m], label=m) for m in methods]
    top.set_ylabel("worker slot")
    top.set_ylim(max(lane_of) + 0.6, -0.6)
    top.legend(handles=handles, loc="lower right", fontsize=8)
    top.set_title(title, fontsize=10)
    times, counts = busy
    bottom.step(times, counts, where="post", color="black")
    bottom.set_ylabel("runs at once")
    bottom.set_xlabel("seconds since the first run started")
    bottom.set_ylim(0, max(counts) + 1)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--title", default=None)
    args = parser.parse_args()
    spans = read_spans(args.log)
    makespan = max(s.end for s in spans)
    busy = sum(s.end - s.start for s in spans)
    lane_of = lanes(spans)
    times, counts = in_progress(spans, len(set(lane_of)))
    peak = max(counts)
    below = sum(c < peak for c in counts[: int(makespan)])
    title = args.title or (
        f"{len(spans)} runs in {makespan:.0f} s, at most {peak} at once; "
        f"{busy / makespan:.1f} runs in progress on average, fewer than {peak} for {below} s"
    )
    plot(spans, lane_of, (times, counts), args.out, title)
    print(title)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
