"""``studies/privacy_dp/step_costs.py``: the DP study's time accounting reads the runner's log (steps, their
parts, a resumed step) and the runs' logged CPU seconds, and costs what is left of the steps file."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO_ROOT


def script(name: str) -> ModuleType:
    """``studies/privacy_dp/<name>.py`` (a script) loaded as a module."""
    spec = importlib.util.spec_from_file_location(
        f"privacy_dp_{name}", REPO_ROOT / "studies" / "privacy_dp" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def step_costs() -> ModuleType:
    return script("step_costs")


RUN = (
    "fedaug run configs/privacy_fmnist.yaml --method flea --data-dir ../shared/data --seed 0 "
    "--set method.split_layer=1 --set method.share_dp.epsilon=8 --set name=privacy_dp_fmnist_l1_eps8"
)
TARGET = '"flea l1 eps 8=runs/privacy_dp_fmnist_l1_eps8/fashion_mnist-quantity3-K100/flea/seed0@30"'
OUT = "--out studies/privacy_dp/attacks/fmnist/privacy_dp_fmnist_l1_eps8/seed0"
RECONSTRUCT = f"fedaug attack reconstruct {TARGET} {OUT}/reconstruct --decoders conv4,deep --seed 0"
CONTEXT = f"fedaug attack context {TARGET} {OUT}/context --sizes 100,300 --seed 0"
FEDMIX_HAR = "fedaug run configs/privacy_har.yaml --method fedmix --seed 0 --set name=privacy_dp_har_eps2"
LOG = f"""=== 2026-12-02T23:59:50Z start: {RUN}
23:59:55 INFO run runs/privacy_dp_fmnist_l1_eps8/fashion_mnist-quantity3-K100/flea/seed0: flea on ...
00:00:05 INFO round 1/30  acc 0.1  best 0.1  loss 3.2  7.06s/round  eta 3m24s
fedaug: interrupted; run the same command again to resume
=== 2026-12-03T00:10:00Z start: {RUN}
00:10:04 INFO run runs/privacy_dp_fmnist_l1_eps8/fashion_mnist-quantity3-K100/flea/seed0: flea on ...
=== 2026-12-03T00:12:00Z done in 120 s: {RUN}
=== 2026-12-03T00:12:00Z start: {RECONSTRUCT}
00:12:04 INFO attacking flea l1 eps 8: flea round 30, activations at layer 1
00:12:34 INFO flea l1 eps 8 / conv4: eval MSE 0.10704 (mean input 0.08722)
00:12:54 INFO flea l1 eps 8 / deep: eval MSE 0.09594 (mean input 0.08722)
=== 2026-12-03T00:12:57Z done in 57 s: {RECONSTRUCT}
=== 2026-12-03T00:12:57Z start: {CONTEXT}
00:13:00 INFO attacking flea l1 eps 8: flea round 30, activations at layer 1
00:13:06 INFO flea l1 eps 8: 100 samples -> accuracy 0.513
00:13:16 INFO flea l1 eps 8: 300 samples -> accuracy 0.502
=== 2026-12-03T00:13:18Z done in 21 s: {CONTEXT}
=== 2026-12-03T00:13:18Z start: {FEDMIX_HAR}
=== 2026-12-03T00:13:20Z FAILED after 2 s: {FEDMIX_HAR}
"""


def test_the_log_gives_each_finished_step_its_kind_setting_and_parts() -> None:
    steps = step_costs().parse_log(LOG.splitlines())
    assert [(s.kind, s.dataset, s.setting, s.wall_s) for s in steps] == [
        ("run", "fmnist", "flea l1 eps 8", 120.0),  # the resumed start's seconds only
        ("reconstruct", "fmnist", "flea l1 eps 8", 57.0),
        ("context", "fmnist", "flea l1 eps 8", 21.0),
    ]  # the failed step is not a finished one
    assert steps[0].parts == {"start-up": 4.0, "rest": 116.0}
    assert steps[1].parts == {"start-up": 4.0, "conv4": 30.0, "deep": 20.0, "rest": 3.0}
    assert steps[2].parts == {"start-up": 3.0, "n=100": 6.0, "n=300": 10.0, "rest": 2.0}
    assert steps[0].method == "flea l1" and steps[0].run_name == "privacy_dp_fmnist_l1_eps8"


def test_a_runs_logged_rounds_replace_its_wall_seconds_and_give_its_cpu_seconds(tmp_path: Path) -> None:
    module = step_costs()
    seed = tmp_path / "privacy_dp_fmnist_l1_eps8" / "fashion_mnist-quantity3-K100" / "flea" / "seed0"
    seed.mkdir(parents=True)
    rows = [
        {"round": 1, "startup": {"total_s": 5.0}, "round_time": 10.0, "cpu_time": 8.0},
        {"round": 2, "round_time": 12.0, "cpu_time": 9.5},
    ]
    (seed / "timings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    steps = module.parse_log(LOG.splitlines())
    module.add_run_timings(steps, tmp_path)
    assert (steps[0].wall_s, steps[0].cpu_s, steps[0].cost_s) == (27.0, 17.5, 17.5)
    assert steps[1].cpu_s is None and steps[1].cost_s == 57.0  # attacks log no CPU seconds


def test_what_is_left_is_costed_at_the_measured_medians_or_the_assumed_seconds(tmp_path: Path) -> None:
    module = step_costs()
    steps_file = tmp_path / "steps.txt"
    other = RUN.replace("eps8", "eps4").replace("epsilon=8", "epsilon=4")
    steps_file.write_text("\n".join(["# header", RUN, other, FEDMIX_HAR, RECONSTRUCT]) + "\n")
    left = module.remaining(steps_file, {RUN, RECONSTRUCT})
    assert [s.command for s in left] == [other, FEDMIX_HAR]
    measured = module.medians(module.parse_log(LOG.splitlines()))
    rows = module.projection(left, measured, {"har:run": 1300.0})
    assert rows == [
        (("fmnist", "flea l1", "run"), 1, 120.0, "measured"),
        (("har", "fedmix", "run"), 1, 1300.0, "assumed"),
    ]
    unknown = module.projection(left, measured, {})
    assert math.isnan(unknown[1][2]) and unknown[1][3] == "assumed"
    assert "Total left: 2 steps, 0.4 hours." in module.markdown([], rows)


def test_the_json_accounting_has_each_kinds_spread_and_the_hours_left(tmp_path: Path) -> None:
    module = step_costs()
    (tmp_path / "bg.log").write_text(LOG)
    steps_file = tmp_path / "steps.txt"
    other = RUN.replace("eps8", "eps4").replace("epsilon=8", "epsilon=4")
    steps_file.write_text("\n".join([RUN, other, FEDMIX_HAR, RECONSTRUCT, CONTEXT]) + "\n")
    (tmp_path / "done").write_text(f"{RUN}\n{RECONSTRUCT}\n{CONTEXT}\nnot a step of the file\n")
    out = tmp_path / "costs.json"
    args = ["--log", str(tmp_path / "bg.log"), "--steps", str(steps_file), "--done", str(tmp_path / "done")]
    module.main([*args, "--assume", "har:run=1300", "--json", str(out), "--machine", "a laptop"])
    found = json.loads(out.read_text())
    assert found["measured"][1] == {
        "dataset": "fmnist",
        "method": "flea l1",
        "kind": "reconstruct",
        "steps": 1,
        "seconds": "wall",
        "min_s": 57.0,
        "median_s": 57.0,
        "max_s": 57.0,
        "startup_median_s": 4.0,
    }
    assert [(r["kind"], r["seconds"]) for r in found["measured"]] == [
        ("context", "wall"),
        ("reconstruct", "wall"),
        ("run", "wall"),  # no run dir given: its wall seconds
    ]
    assert found["left"] == [
        {
            "dataset": "fmnist",
            "method": "flea l1",
            "kind": "run",
            "steps": 1,
            "each_s": 120.0,
            "source": "measured",
        },
        {
            "dataset": "har",
            "method": "fedmix",
            "kind": "run",
            "steps": 1,
            "each_s": 1300.0,
            "source": "assumed",
        },
    ]
    assert (found["steps_done"], found["steps_left"]) == (3, 2)  # the ledger's stray line is no step
    assert found["core_hours"] == {
        "done": round(198 / 3600, 3),
        "left": round(1420 / 3600, 3),
        "left_by_dataset": {"fmnist": round(120 / 3600, 3), "har": round(1300 / 3600, 3)},
        "left_by_kind": {"run": round(1420 / 3600, 3)},
    }
    assert (found["measured_from"], found["measured_to"], found["machine"]) == (
        "2026-12-03",
        "2026-12-03",
        "a laptop",
    )
    assert found["assumed_s"] == {"har:run": 1300.0}
    module.main([*args, "--json", str(out)])  # nothing assumed: the unmeasured run has no seconds
    unknown = json.loads(out.read_text())
    assert unknown["left"][1]["each_s"] is None and unknown["core_hours"]["left"] is None
    assert unknown["core_hours"]["left_by_dataset"] == {"fmnist": round(120 / 3600, 3), "har": None}


def test_archived_steps_are_the_triples_whose_run_and_both_attacks_finish_sh_archived(tmp_path: Path) -> None:
    make_steps = script("make_steps")
    lines = make_steps.steps()
    first = lines[:3]  # fmnist flea l1 eps inf seed 0; then flea l2 eps inf seed 0
    for name in ("privacy_dp_fmnist_l1_epsinf", "privacy_dp_fmnist_l2_epsinf"):
        seed = tmp_path / "runs" / name / "fashion_mnist-quantity3-K100" / "flea" / "seed0"
        seed.mkdir(parents=True)
        (seed / "summary.json").write_text("{}")
        for kind in ("reconstruct", "context"):
            out = tmp_path / "attacks" / "fmnist" / name / "seed0" / kind
            out.mkdir(parents=True)
            if (name, kind) != ("privacy_dp_fmnist_l2_epsinf", "context"):  # l2's context report is missing
                (out / f"{kind}.json").write_text("{}")
    # the first triple is archived whole; the second lacks an attack, so its run runs again with it
    assert make_steps.archived(["# a comment", *lines], tmp_path) == first
    assert make_steps.archived(lines, tmp_path / "elsewhere") == []
