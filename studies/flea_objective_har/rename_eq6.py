"""Names the archived Eq. 6 runs ``flea_eq6``, as the preset names them since ``flea``'s default changed.

The study's runs were made while ``flea``'s defaults were the KDD paper's Eq. 6. That method is now the preset
``flea_eq6`` (byte-identical results, ``tests/golden``), and ``configs/experiments/flea_objective_har.yaml``
builds the three Eq. 6 variants on it. This moves every archived run whose ``config.yaml`` says
``method: {name: flea, ...}`` from ``.../flea/seedK`` to ``.../flea_eq6/seedK`` and writes ``flea_eq6`` as its
method name; nothing else changes (``env.json`` keeps every option value the run used, which are
``flea_eq6``'s with the variant's options). It refuses a run whose recorded options are not Eq. 6's plus the
variant's, and a target that holds another run; a run that is already there under its new name (archived
again from the sweep's run dirs) is removed from its old place. Re-running it does nothing.

    python studies/flea_objective_har/rename_eq6.py studies/flea_objective_har/runs
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path

import yaml

from fedaug.engine.checkpoint import read_jsonl
from fedaug.methods.flea.method import FLeaEq6Config


def rename(root: Path) -> list[Path]:
    """Renames the Eq. 6 runs below ``root``; returns their new run dirs."""
    eq6 = dataclasses.asdict(FLeaEq6Config())
    moved = []
    for config_path in sorted(root.glob("**/flea/seed*/config.yaml")):
        run_dir = config_path.parent
        config = yaml.safe_load(config_path.read_text())
        options = {k: v for k, v in config["method"].items() if k != "name"}
        used = json.loads((run_dir / "env.json").read_text())["method_config"]
        if config["method"]["name"] != "flea" or used != {**eq6, **options}:
            raise SystemExit(f"{run_dir}: not an Eq. 6 run (options used: {used})")
        target = run_dir.parent.parent / "flea_eq6" / run_dir.name
        if not target.exists():
            config["method"]["name"] = "flea_eq6"
            config_path.write_text(yaml.safe_dump(config, sort_keys=False))
            target.parent.mkdir(parents=True, exist_ok=True)
            run_dir.rename(target)
            moved.append(target)
        elif _same_run(run_dir, target):
            shutil.rmtree(run_dir)  # archived again from the sweep's run dirs: already here, renamed
        else:
            raise SystemExit(f"{target} exists and holds another run; not moving {run_dir} onto it")
        if not any(run_dir.parent.iterdir()):
            run_dir.parent.rmdir()
    return moved


def _same_run(a: Path, b: Path) -> bool:
    """Whether two run dirs hold the same results (the same metrics lines, the summary byte for byte)."""
    same_metrics = read_jsonl(a / "metrics.jsonl") == read_jsonl(b / "metrics.jsonl")
    return same_metrics and (a / "summary.json").read_bytes() == (b / "summary.json").read_bytes()


if __name__ == "__main__":
    for path in rename(Path(sys.argv[1])):
        print(path)
