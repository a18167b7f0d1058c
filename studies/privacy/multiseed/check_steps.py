"""Checks that a steps file's commands still run against today's CLI, at smoke size, in a temporary folder.

Each ``fedaug run`` gets ``--out-dir TMP/runs``, ``--set train.rounds=R`` (``--smoke`` runs keep their 2
rounds) and keeps the checkpoints of rounds 1..R; each ``fedaug attack`` writes under ``TMP/out`` with one
iteration / epoch / repeat and small sizes; the run dirs the attacks name (``runs/NAME/...``, ``@ROUND``) are
rewritten to where the shortened runs are (``NAME/train.rounds=R``, rounds capped at R). Nothing is written
outside TMP. Run from the repository root (minutes):

    python studies/privacy/multiseed/check_steps.py studies/fedaugmix/severity/steps.txt --first 6
    python studies/privacy/multiseed/check_steps.py studies/privacy_har/steps.txt --first 4
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SMALL = {
    "--iterations": "1",
    "--epochs": "1",
    "--repeats": "1",
    "--sizes": "50,100",
    "--eval-size": "100",
    "--attack-size": "200",
}
"""Attack options set to a smoke size where a command gives them."""


def shorten(line: str, tmp: Path, rounds: int, index: int) -> list[str]:
    """The command of ``line`` at smoke size, writing under ``tmp`` (module docstring)."""
    words = shlex.split(line)
    smoke = "--smoke" in words

    def moved(text: str) -> str:
        def run_dir(match: re.Match[str]) -> str:
            name = match.group(1)
            suffix = "" if name.endswith("-smoke") else f"/train.rounds={rounds}"
            return f"{tmp}/runs/{name}{suffix}/"

        text = re.sub(r"(?<![\w/])runs/([^/\s\"]+)/", run_dir, text)
        return re.sub(r"@(\d+)$", lambda m: f"@{min(int(m.group(1)), rounds)}", text)

    out = [moved(w) for w in words]
    for i, word in enumerate(out[:-1]):
        if word in SMALL:
            out[i + 1] = SMALL[word]
        elif word == "--out":
            out[i + 1] = str(tmp / "out" / str(index))
    if out[:2] == ["fedaug", "run"]:
        kept = f"engine.keep_checkpoints=[{', '.join(map(str, range(1, rounds + 1)))}]"  # the capped @ROUNDs
        out += ["--out-dir", str(tmp / "runs")] + ([] if smoke else ["--set", f"train.rounds={rounds}"])
        out += ["--set", kept]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("steps", help="a steps file (one command a line, '#' lines skipped)")
    parser.add_argument("--first", type=int, help="only the first N commands (default all)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of each run (default 1)")
    parser.add_argument("--keep", help="folder to work in and keep (default: a temporary one, removed)")
    args = parser.parse_args(argv)
    lines = [x for x in Path(args.steps).read_text().splitlines() if x.strip() and not x.startswith("#")]
    lines = lines[: args.first] if args.first else lines
    with tempfile.TemporaryDirectory(prefix="check_steps_") as scratch:
        tmp = Path(args.keep or scratch).resolve()
        failed = 0
        for index, line in enumerate(lines):
            command = shorten(line, tmp, args.rounds, index)
            start = time.monotonic()
            result = subprocess.run(command, capture_output=True, text=True)
            seconds = time.monotonic() - start
            state = "ok" if result.returncode == 0 else f"FAILED (exit {result.returncode})"
            print(f"{state:>17} {seconds:6.1f} s  {line}", flush=True)
            if result.returncode != 0:
                failed += 1
                print("    " + shlex.join(command) + "\n    " + result.stderr.strip()[-2000:], flush=True)
    print(f"{len(lines) - failed}/{len(lines)} commands ran")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
