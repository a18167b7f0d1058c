"""How long does the README's test command take on a fresh clone of this tree, and which tests take longest.

Clones the repository's committed HEAD into a temporary folder (so untracked files and caches do not count),
runs the README's test command there (``python -m pytest -q``, with ``PYTHONPATH`` pointing at the clone's
``src``, so the installed fedaug is not the one tested) and records the wall time, the outcome counts of
pytest's last line, the slowest tests (``--durations``), the commit, the extras beyond ``.[test]`` that were
installed (their tests skip without them), the CPU and the load average before and after (a value well
above 0 means other work shared the cores, so the time is an upper bound). The README's "second command"
paragraph is generated from the JSON (``python -m tools.results``).

    python benchmarks/test_suite.py                       # writes benchmarks/results/test_suite.json
    python benchmarks/test_suite.py --pytest-args "tests/unit/test_cli.py" --out /tmp/cli.json  # a subset
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from machine import cpu_facts, write_report

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "test_suite.json"
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed|warnings?)")
SKIPPED_WITHOUT = {"flower": ("flwr", "ray"), "tracking": ("tensorboard", "mlflow")}
"""The extras beyond the README's ``.[test]`` whose tests skip without them, by the modules they import."""
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (call|setup|teardown)\s+(.+?)\s*$")


def outcomes(output: str) -> dict[str, int]:
    """The counts of pytest's summary line (``2052 passed, 80 skipped in 973.4s``), by outcome."""
    last = next((line for line in reversed(output.splitlines()) if OUTCOME.search(line)), "")
    counts: dict[str, int] = {}
    for number, word in OUTCOME.findall(last):
        key = {"error": "errors", "warning": "warnings"}.get(word, word)
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def slowest(output: str, top: int) -> list[dict[str, Any]]:
    """The ``top`` longest test phases of pytest's ``--durations`` table."""
    rows = [
        {"seconds": float(m[1]), "phase": m[2], "test": m[3]}
        for m in (DURATION.match(line) for line in output.splitlines())
        if m
    ]
    return sorted(rows, key=lambda r: -r["seconds"])[:top]


def extras_installed() -> list[str]:
    """The extras of :data:`SKIPPED_WITHOUT` that this interpreter (the one pytest runs in) can import: none
    for the README's ``.[test]`` install, whose figures the README states."""
    return sorted(
        extra
        for extra, modules in SKIPPED_WITHOUT.items()
        if all(importlib.util.find_spec(module) is not None for module in modules)
    )


def run_suite(pytest_args: list[str], top: int) -> dict[str, Any]:
    """Clones HEAD, runs pytest in the clone and returns the report (see the module docstring)."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="fedaug-suite-") as tmp:
        clone = Path(tmp) / "fedaug"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        # ../shared beside the clone, as beside the repository: the offline datasets' tests then run too
        shared = ROOT.parent / "shared"
        if shared.is_dir():
            (Path(tmp) / "shared").symlink_to(shared)
        env = {**os.environ, "PYTHONPATH": str(clone / "src")}
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--durations={top}"]
        load_before = os.getloadavg()
        start = time.perf_counter()
        done = subprocess.run(
            [*command, *pytest_args], cwd=clone, env=env, capture_output=True, text=True, check=False
        )
        seconds = time.perf_counter() - start
    output = done.stdout + done.stderr
    print(output[-3000:])
    return {
        "benchmark": "test_suite",
        "command": "python -m pytest -q" + ("" if not pytest_args else " " + shlex.join(pytest_args)),
        "commit": commit,
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
        "seconds": round(seconds, 1),
        "exit_code": done.returncode,
        "outcomes": outcomes(output),
        "slowest": slowest(output, top),
        "shared_data": shared.is_dir(),
        "extras_installed": extras_installed(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "cpu_count": os.cpu_count(),
        **cpu_facts(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"JSON to write (default {DEFAULT_OUT.name})")
    parser.add_argument("--pytest-args", default="", help="extra pytest arguments (a subset needs --out)")
    parser.add_argument("--top", type=int, default=10, help="slowest tests recorded (default 10)")
    args = parser.parse_args()
    if args.pytest_args and Path(args.out).resolve() == DEFAULT_OUT:
        parser.error(
            f"--pytest-args {args.pytest_args!r} times a subset: give --out (not {DEFAULT_OUT.name})"
        )
    report = run_suite(shlex.split(args.pytest_args), args.top)
    write_report(args.out, report)
    return 0 if report["exit_code"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
