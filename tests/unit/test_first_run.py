"""A newcomer's first commands: the main job and ``--smoke`` never share a run dir; a refused run dir offers
the remedies that lose nothing first; the main job says at start what it will run and what follows each run.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from fedaug.cli.common import load_config
from fedaug.cli.main import build_parser, main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_run_config
from fedaug.engine.progress import JobEta, LaterRun
from fedaug.errors import ConfigError
from fedaug.runs.runner import comparison_configs, run_experiment
from fedaug.sweeps.estimate import job_plan
from fedaug.sweeps.round_ratio import DEFAULT_ROUND_RATIO
from fedaug.sweeps.sweep import expand_sweep
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
SETTING = "synthetic-dirichlet0.5_2-K6"
BOTH = ("--set", "compare=[fedavg, flea]", "--set", "engine.num_threads=1")
"""The smoke preset as a main job: FedAvg then FLea, as the default preset (3 rounds of 1 local epoch)."""


def _run_dirs(argv: list[str]) -> list[Path]:
    return [
        run_dir_for(c) for c in comparison_configs(load_config(build_parser().parse_args(["run", *argv])))
    ]


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root`` with its size and mtime (ns)."""
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _inside(path: Path, other: Path) -> bool:
    return path == other or other in path.parents or path in other.parents


@pytest.mark.parametrize(
    "argv",
    [
        ["--smoke"],
        ["--set", "train.rounds=3"],
        ["--set", "train.local_epochs=1"],
        ["--smoke", "--set", "train.rounds=100"],  # the main job's length, but one local epoch
        ["--seed", "0", "--smoke", "--method", "flea"],
    ],
)
def test_a_shorter_run_of_the_default_preset_has_run_dirs_apart_from_the_main_jobs(argv: list[str]) -> None:
    main_job = _run_dirs([])
    for run_dir in _run_dirs(argv):
        assert not any(_inside(run_dir, job_dir) for job_dir in main_job), run_dir
        if "--smoke" in argv:  # a sibling tree of the main job's, not a folder in it
            assert run_dir.parts[1] == "default-smoke", run_dir


def test_run_dir_names_are_predictable() -> None:
    assert [str(d) for d in _run_dirs([])] == [
        "runs/default/uci_har-quantity2-K75/fedavg/seed0",
        "runs/default/uci_har-quantity2-K75/flea/seed0",
    ]
    (smoke,) = _run_dirs(["--smoke", "--method", "flea"])
    assert str(smoke) == "runs/default-smoke/uci_har-quantity2-K75/flea/seed0"
    (shorter,) = _run_dirs(["--set", "train.rounds=3", "--method", "fedavg"])
    assert str(shorter) == "runs/default/train.rounds=3/uci_har-quantity2-K75/fedavg/seed0"  # a sweep's form
    # the presets' own length: no suffix (as `fedaug run RUN_DIR/config.yaml` resumes a run in its run dir)
    assert _run_dirs(["--set", "train.rounds=100"]) == _run_dirs([])
    config = load_run_config([SMOKE], ["train.rounds=2", "train.local_epochs=4"])
    assert config.name == "smoke/train.rounds=2,train.local_epochs=4"
    assert load_run_config([SMOKE], ["train.rounds=3"]).name == "smoke"  # smoke.yaml's own 3 rounds
    assert load_run_config([SMOKE], smoke=True, tag="-flower").name == "smoke-smoke-flower"


def test_the_smoke_run_after_the_main_job_leaves_the_main_jobs_run_dirs_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: the main job has run (FedAvg, then FLea)
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    job = ["run", SMOKE, "--out-dir", str(out), *BOTH]
    assert main(job) == 0
    before = _snapshot(out / "smoke")
    # Execute: the smoke run, which used to be refused ("holds a run with a different config")
    assert main(["run", SMOKE, "--smoke", "--out-dir", str(out), *BOTH]) == 0
    # Assert: it ran in runs/smoke-smoke/..., and not one file of the main job's tree changed
    assert _snapshot(out / "smoke") == before
    for method in ("fedavg", "flea"):
        summary = json.loads((out / "smoke-smoke" / SETTING / method / "seed0" / "summary.json").read_text())
        assert summary["rounds"] == 2
    assert "smoke-smoke" in capsys.readouterr().out
    # and the main job, run again, finds its runs finished, without a refusal
    assert main(job) == 0
    assert _snapshot(out / "smoke") == before


def test_a_sweep_smoke_run_has_its_own_run_dirs(tmp_path: Path) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"extends: {SMOKE}\nname: sw\ngrid:\n  method: [fedavg, flea]\n  seed: [0, 1]\n")
    full = {p.run_dir for p in expand_sweep(path)}
    smoke = expand_sweep(path, smoke=True)
    assert {(p.config.train.rounds, p.config.train.local_epochs) for p in smoke} == {(2, 1)}
    assert {p.run_dir.parts[1] for p in smoke} == {"sw-smoke"}
    assert not full & {p.run_dir for p in smoke}
    # a sweep's own run dirs do not change: no length segment for a --set of the base
    assert {p.run_dir.parts[1] for p in expand_sweep(path, ["train.rounds=2"])} == {"sw"}


def test_a_refused_run_dir_offers_a_new_run_dir_first_and_fresh_last(tmp_path: Path) -> None:
    # Prepare: a run that stopped after 2 of its 3 rounds
    config = load_run_config([SMOKE], [f"out_dir={tmp_path}", "engine.progress=false"])
    run_experiment(config)
    run_dir = run_dir_for(config)
    (run_dir / "summary.json").unlink()
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    other = load_run_config([SMOKE], [f"out_dir={tmp_path}", "train.lr=0.01", "train.optimizer=sgd"])
    # Execute
    with pytest.raises(ConfigError) as refused:
        run_experiment(other)
    # Assert: what differs, how far the run is, then the remedies in the order that loses nothing
    message = str(refused.value)
    differs = "(differs in: train.lr, train.optimizer), 2 of 3 rounds done."
    assert message.startswith(f"{run_dir} holds a run with a different config {differs}")
    new_dir, used, fresh = (message.index(s) for s in ("--set name=", "--set train.lr=0.001", "--fresh"))
    assert new_dir < used < fresh
    assert "--out-dir" in message[:used] and "--set train.optimizer=adam" in message[used:fresh]
    assert message.endswith("--fresh deletes its 2 finished rounds and starts over")


def test_the_main_job_prints_its_plan_and_each_round_ends_with_the_jobs_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "runs"
    fedavg_dir, flea_dir = _run_dirs([SMOKE, "--out-dir", str(out), *BOTH])
    # Execute: the main job on a fresh checkout
    with caplog.at_level(logging.INFO, logger="fedaug"):
        assert main(["run", SMOKE, "--out-dir", str(out), *BOTH]) == 0
    messages = [r.getMessage() for r in caplog.records]
    # Assert: the plan comes first: order, status and run dir of each, and no "0 s" for a job never timed
    start = messages.index("plan: 2 runs, one after the other: fedavg, then flea")
    assert messages[start + 1].split() == ["new", "?", str(fedavg_dir)]
    assert messages[start + 2].split() == ["new", "?", str(flea_dir)]
    assert messages[start + 3].startswith("2 runs: 2 new; no estimate yet")
    assert messages[start + 4] == (
        "job: no estimate before the first round (no FedAvg round of this setting timed here); then each "
        "round's line ends with the job's time left: fedavg by its own rounds; flea at "
        f"{DEFAULT_ROUND_RATIO['flea']:.2f}x FedAvg's round (fedaug's default)"
    )
    assert start < min(i for i, m in enumerate(messages) if m.startswith("round "))
    rounds = [m for m in messages if m.startswith("round ")]
    assert len(rounds) == 6
    assert all(re.search(r"  eta \S+  job eta \S+$", m) for m in rounds), rounds  # from round 1 on
    assert rounds[-1].endswith("eta 0s  job eta 0s")
    # Execute: seed 1, whose seed-0 siblings have timed every round
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="fedaug"):
        assert main(["run", SMOKE, "--out-dir", str(out), *BOTH, "--seed", "1"]) == 0
    messages = [r.getMessage() for r in caplog.records]
    # Assert: the total and FLea's share of it come from seed 0's round times
    summary = next(m for m in messages if m.startswith("2 runs: 2 new"))
    assert "of run time left (round times of their seeds so far)" in summary
    job = next(m for m in messages if m.startswith("job: "))
    assert re.fullmatch(
        r"job: about \S+ s of run time: fedavg ~\S+ s \(its seeds' round times\); "
        r"flea ~\S+ s \(its seeds' round times\)",
        job,
    ), job


def test_the_plan_of_a_finished_or_partial_job(tmp_path: Path) -> None:
    configs = comparison_configs(load_run_config([SMOKE], [f"out_dir={tmp_path}", "compare=[fedavg, flea]"]))
    fedavg_dir, flea_dir = (run_dir_for(c) for c in configs)
    # Prepare: FedAvg finished in 2 s rounds, FLea stopped after round 1 (4 s)
    for run_dir, times in ((fedavg_dir, [2.0, 2.0, 2.0]), (flea_dir, [4.0])):
        run_dir.mkdir(parents=True)
        metrics = "".join(f'{{"round": {r}}}\n' for r in range(1, 1 + len(times)))
        (run_dir / "metrics.jsonl").write_text(metrics)
        timings = "".join(f'{{"round": {r}, "round_time": {t}}}\n' for r, t in enumerate(times, 1))
        (run_dir / "timings.jsonl").write_text(timings)
    (fedavg_dir / "summary.json").write_text('{"rounds": 3}')
    plan = job_plan(configs)
    assert plan.lines[1].split() == ["finished", str(fedavg_dir)]
    assert plan.lines[2].split()[:4] == ["partial", "(1/3", "rounds)", "~8"]
    left = "about 8 s of run time left (round times of their seeds so far)"
    assert plan.lines[3] == f"2 runs: 1 finished, 1 partial; {left}"
    assert plan.lines[4] == "job: about 8 s of run time: flea ~8 s (its seeds' round times)"
    # FLea's ratio to FedAvg's rounds is recorded on this setting: 4 s / 2 s
    assert plan.jobs == [JobEta((LaterRun("flea", 2, 8.0, 2.0),), ratio=1.0), JobEta((), ratio=2.0)]
    # with --fresh both run again, whole, costed by the round times logged so far
    fresh = job_plan(configs, fresh=True)
    assert fresh.jobs[0] == JobEta((LaterRun("flea", 3, 12.0, 2.0),), ratio=1.0)
    assert fresh.lines[-1] == (
        "job: about 18 s of run time: fedavg ~6 s (its seeds' round times); "
        "flea ~12 s (its seeds' round times)"
    )
