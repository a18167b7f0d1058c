"""Seconds per round with a thread count, alone and with one busy process beside (``python -c "while 1:
pass"``): the old default (torch's, all cores) against fedaug's (:func:`fedaug.runtime.machine.default_threads`).

    python studies/speed/busy_core.py --preset smoke --repeats 3 --out studies/speed/busy_core_smoke.json

Each measurement is one fresh run (``--fresh``) of the preset, its mean ``round_time`` from ``timings.jsonl``;
settings alternate within a repeat, so that a machine shared with other work loads them alike. Prints one
line per measurement and writes all of them, with the machine's cores and load average, as JSON;
``--table FILE`` prints a result file as the speed guide's table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from fedaug.runtime.machine import default_threads


def measure(preset: str, threads: int, busy: bool, extra: list[str], timeout: float) -> float | None:
    """Mean seconds per round of one fresh run (None: it ran past ``timeout``)."""
    spinner = subprocess.Popen([sys.executable, "-c", "while 1: pass"]) if busy else None
    try:
        with tempfile.TemporaryDirectory() as out:
            argv = [sys.executable, "-m", "fedaug", "run", preset, "--out-dir", out, "--fresh"]
            argv += ["--set", f"engine.num_threads={threads}", "--set", "engine.progress=false", *extra]
            try:
                subprocess.run(argv, check=True, capture_output=True, timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
            rows = [json.loads(line) for p in Path(out).rglob("timings.jsonl") for line in p.open()]
            return sum(r["round_time"] for r in rows) / len(rows)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def table(result: dict[str, object]) -> str:
    """The markdown table of a result file: seconds per round of each setting per repeat, and the old
    default's time over the new one's in the same repeat and setting (a ratio: the machine is shared)."""
    rows = result["rows"]
    assert isinstance(rows, list)
    old, new = result["old_default"], result["new_default"]
    lines = [
        f"| {result['preset']} {' '.join(map(str, result['sets']))} | repeat | {old} threads (old) s/round "
        f"| {new} thread(s) (new) s/round | old / new |",
        "|---|---|---|---|---|",
    ]
    for busy in (False, True):
        for repeat in sorted({r["repeat"] for r in rows}):
            pick = {
                r["threads"]: r["s_per_round"] for r in rows if r["repeat"] == repeat and r["busy"] == busy
            }
            a, b = pick.get(old), pick.get(new)
            ratio = f"{a / b:.1f}x" if a and b else "n/a (timed out)"
            shown = [f"{v:.3f}" if v else "timed out" for v in (a, b)]
            label = "one busy process beside" if busy else "no extra process"
            lines.append(f"| {label} | {repeat} | {shown[0]} | {shown[1]} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--table", type=Path, help="print the markdown table of this result file and exit")
    parser.add_argument("--preset", default="smoke")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--set", dest="sets", action="append", default=[])
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    old, new = torch.get_num_threads(), default_threads()
    extra = [item for value in args.sets for item in ("--set", value)]
    rows = []
    for repeat in range(args.repeats):
        for threads in dict.fromkeys((old, new)):
            for busy in (False, True):
                start = time.time()
                seconds = measure(args.preset, threads, busy, extra, args.timeout)
                row = {"repeat": repeat, "threads": threads, "busy": busy, "s_per_round": seconds}
                row["wall_s"] = round(time.time() - start, 1)
                print(json.dumps(row), flush=True)
                rows.append(row)
    facts = {
        "cores": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "old_default": old,
        "new_default": new,
    }
    result = {"preset": args.preset, "sets": args.sets, **facts, "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
