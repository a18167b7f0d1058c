"""Estimates from the first minute (issue #69): archived runs' round times of the same setting, scaled by the
hosts' probes, where the run's own seeds have none; and a dry run's wall time on ``--workers`` processes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.config.load import config_from_dict
from fedaug.config.yamlio import read_yaml_file
from fedaug.sweeps import probe
from fedaug.sweeps.archived import (
    INDEX_FILE,
    Archive,
    ArchivedRun,
    ArchiveTimes,
    archive_times,
    find_studies,
    read_all,
)
from fedaug.sweeps.estimate import dry_run_lines, job_plan, sweep_job
from fedaug.sweeps.order import SweepPoint, makespan, wall_seconds
from tests.conftest import REPO_ROOT
from tests.unit.experiments.helpers import sweep_points

FSDD_FEDAVG = REPO_ROOT / "studies" / "flea_fsdd" / "runs" / "fsdd-quantity3-K27" / "fedavg" / "seed0"
KEY = ("fsdd", "audionet", "fedavg", 27, None)


def _run(name: str, seconds: float, *, probe_s: float | None = None, cpu: str | None = "A") -> ArchivedRun:
    return ArchivedRun(Path(name), name, True, KEY, "cpu", seconds, probe_s, cpu)


FLAT = {"data.name": "fsdd", "model.name": "audionet", "method.name": "fedavg", "partition.num_clients": 27}


def test_runs_with_a_host_probe_are_scaled_to_this_host_and_stand_for_the_setting() -> None:
    # Prepare: on CPU model A one run probed at 0.05 s (2 s rounds), one unprobed (4 s rounds: A's probe
    # stands for its host); a run of unknown CPU (100 s rounds) that nothing can scale
    archive = Archive(
        Path("studies"),
        [_run("a1", 2.0, probe_s=0.05), _run("a2", 4.0), _run("b", 100.0, cpu=None)],
    )
    assert archive.cpu_probes == {"A": 0.05}
    assert archive.inferred_probes == {}
    # Act / Assert: here 0.1 s a step (twice as slow): the two runs of A, doubled
    found = archive.round_time(FLAT, "cpu", 0.1)
    assert found is not None
    assert (found.seconds, found.runs, found.scaled, found.matched) == (pytest.approx(6.0), 2, 2, 3)
    assert found.describe() == (
        "from 2 of the 3 archived runs of this setting (those with a host probe), "
        "scaled by host probe 0.1 s vs 0.05 s"
    )
    # without a probe here, all three as they ran; another method or device kind matches nothing
    unscaled = archive.round_time(FLAT, "cpu", None)
    assert unscaled is not None and unscaled.seconds == pytest.approx(106.0 / 3)
    assert (
        unscaled.describe()
        == "from 3 archived runs of this setting, unscaled: no host probe known for their CPU"
    )
    assert archive.round_time({**FLAT, "method.name": "flea"}, "cpu", 0.1) is None
    assert archive.round_time(FLAT, "cuda", 0.1) is None


def test_a_cpu_model_without_probes_gets_one_inferred_from_the_settings_it_shares_with_probed_hosts() -> None:
    # Prepare: model A probed at 0.05 s: 2 s rounds on the FSDD setting, 10 s on a second setting;
    # model B never probed: 1 s and 5 s rounds on the same settings (twice as fast), and a setting of its own
    other = ("uci_har", "harnet", "fedavg", 75, None)
    runs = [
        _run("a1", 2.0, probe_s=0.05),
        ArchivedRun(Path("a2"), "a2", True, other, "cpu", 10.0, 0.05, "A"),
        _run("b1", 1.0, cpu="B"),
        ArchivedRun(Path("b2"), "b2", True, other, "cpu", 5.0, None, "B"),
        ArchivedRun(Path("b3"), "b3", True, ("mnist", "lenet5", "fedavg", 10, None), "cpu", 7.0, None, "B"),
    ]
    archive = Archive(Path("studies"), runs)
    # Assert: B's probe is half A's (both shared settings agree); its own setting is scaled by it
    assert archive.inferred_probes == {"B": pytest.approx(0.025)}
    assert archive.cpu_probes == {"A": 0.05, "B": pytest.approx(0.025)}
    mnist = {**FLAT, "data.name": "mnist", "model.name": "lenet5", "partition.num_clients": 10}
    found = archive.round_time(mnist, "cpu", 0.1)
    assert found is not None and (found.seconds, found.scaled) == (pytest.approx(28.0), 1)
    assert found.describe().endswith("scaled by host probe 0.1 s vs 0.025 s (probe inferred for their CPU)")
    # a setting timed on both: A's run and B's, each scaled by its own host's probe, agree (4 s here)
    both = archive.round_time(FLAT, "cpu", 0.1)
    assert both is not None and both.seconds == pytest.approx(4.0) and both.scaled == 2


def test_where_a_setting_has_thread_clock_probes_they_alone_scale_it() -> None:
    # Prepare: on CPU model A, two runs probed by the thread clock at 0.05 s (2 s rounds), one probed by
    # the wall clock at 0.2 s while other work shared the core (3 s rounds: the load slowed its rounds
    # less than its probe), one unprobed
    runs = [
        ArchivedRun(Path("a1"), "a1", True, KEY, "cpu", 2.0, 0.05, "A", "thread"),
        ArchivedRun(Path("a2"), "a2", True, KEY, "cpu", 2.0, 0.05, "A", "thread"),
        _run("a3", 3.0, probe_s=0.2),
        _run("a4", 2.0),
    ]
    # Act
    found = Archive(Path("studies"), runs).round_time(FLAT, "cpu", 0.1)
    # Assert: the two thread-clock runs, doubled (the wall-clock one would have read 1.5 s here)
    assert found is not None
    assert (found.seconds, found.runs, found.scaled, found.matched) == (pytest.approx(4.0), 2, 2, 4)
    assert found.describe() == (
        "from 2 of the 4 archived runs of this setting (those with a thread-clock host probe), "
        "scaled by host probe 0.1 s vs 0.05 s"
    )
    # without a thread-clock run, every probed run scales as before
    old = Archive(Path("studies"), runs[2:]).round_time(FLAT, "cpu", 0.1)
    assert old is not None and old.seconds == pytest.approx((3.0 * 0.1 / 0.2 + 2.0 * 0.1 / 0.2) / 2)


def test_env_json_records_the_probe_with_the_clock_it_was_timed_by(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fedaug.runtime.machine import write_env
    from fedaug.sweeps.archived import read_archived

    monkeypatch.setenv(probe.PROBE_ENV, "0.09")
    run = tmp_path / "studies" / "flea_fsdd" / "runs" / "seed0"
    shutil.copytree(FSDD_FEDAVG, run)
    write_env(run, {"device": "cpu"})
    env = json.loads((run / "env.json").read_text())
    assert (env["host_probe_s"], env["host_probe_clock"]) == (0.09, "thread")
    archived = read_archived(run)
    assert archived is not None and (archived.probe_s, archived.probe_clock) == (0.09, "thread")
    monkeypatch.delenv(probe.PROBE_ENV)
    write_env(run, {"device": "cpu"})
    assert not {"host_probe_s", "host_probe_clock"} & set(json.loads((run / "env.json").read_text()))


def test_the_probe_is_asked_only_when_an_archived_run_can_be_scaled() -> None:
    asked: list[int] = []

    def probe_here() -> float:
        asked.append(1)
        return 0.1

    assert Archive(Path("s"), [_run("x", 3.0, cpu=None)]).round_time(FLAT, "cpu", probe_here) is not None
    assert not asked  # nothing to scale: no probe taken
    Archive(Path("s"), [_run("y", 3.0, probe_s=0.2)]).round_time(FLAT, "cpu", probe_here)
    assert asked == [1]


def _archived_fsdd(tmp_path: Path, probe_s: float) -> Path:
    """A studies folder holding the FSDD FedAvg seed-0 run, probed at ``probe_s`` on the host that made it."""
    run = tmp_path / "studies" / "flea_fsdd" / "runs" / "fsdd-quantity3-K27" / "fedavg" / "seed0"
    shutil.copytree(FSDD_FEDAVG, run)
    env = json.loads((run / "env.json").read_text())
    (run / "env.json").write_text(json.dumps({**env, "host_probe_s": probe_s, "device": "cpu"}))
    return tmp_path / "studies"


def test_a_fresh_run_of_an_archived_setting_is_estimated_and_says_from_where(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: the archived FSDD FedAvg run (probe 0.05 s); this host probed at 0.1 s; a new run of its config
    studies = _archived_fsdd(tmp_path, 0.05)
    monkeypatch.setenv("FEDAUG_STUDIES", str(studies))
    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(probe.PROBE_ENV, "0.1")
    run = next(studies.rglob("config.yaml")).parent
    config = config_from_dict(read_yaml_file(run / "config.yaml"))
    (archived,) = read_all(studies)
    assert archived.round_seconds is not None
    point = SweepPoint(config, tmp_path / "runs" / "fsdd" / "fedavg" / "seed0", {})
    # Act
    archive = archive_times()
    assert archive is not None
    lines = dry_run_lines([point], archive=archive)
    # Assert: every round at twice the archived mean; the source on the line; the probe's own line
    seconds = 2 * archived.round_seconds * config.train.rounds
    note = "from 1 archived run of this setting, scaled by host probe 0.1 s vs 0.05 s"
    assert lines[0].split("  (")[1] == f"{note})"
    assert lines[1] == (
        f"host probe: 0.1 s a reference step (given in $FEDAUG_HOST_PROBE_S); archived runs of {studies} "
        "scaled by it where their host's probe is known"
    )
    assert lines[2].startswith("1 run: 1 new; about ")
    assert lines[2].endswith("of run time left (1 by archived runs of their setting)")
    # the main job's plan says the same, and the index in the cache dir answers the next dry run
    assert job_plan([config], archive=archive).lines[-1].endswith(f"({note})")
    assert (tmp_path / "cache" / INDEX_FILE).is_file()
    again = archive_times()
    assert again is not None and again.round_time(config) == archive.round_time(config)
    assert archive.round_time(config).seconds == pytest.approx(seconds / config.train.rounds)  # type: ignore[union-attr]


def test_where_the_archive_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "checkout" / "studies" / "one" / "runs").mkdir(parents=True)
    (tmp_path / "checkout" / "deeper").mkdir()
    monkeypatch.delenv("FEDAUG_STUDIES")
    assert find_studies(tmp_path / "checkout" / "deeper") == tmp_path / "checkout" / "studies"  # a parent's
    monkeypatch.setenv("FEDAUG_STUDIES", str(tmp_path / "elsewhere"))
    assert find_studies(tmp_path / "checkout") == tmp_path / "elsewhere"
    monkeypatch.setenv("FEDAUG_STUDIES", "")
    assert find_studies(tmp_path / "checkout") is None and archive_times() is None


def test_a_cached_probe_is_kept_for_this_host_until_it_is_too_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measured: list[float] = []

    def fake_probe(seconds: float, warmup: int, min_steps: int) -> float:
        measured.append(seconds)
        return 0.25

    monkeypatch.setenv("FEDAUG_CACHE", str(tmp_path))
    monkeypatch.delenv(probe.PROBE_ENV, raising=False)
    monkeypatch.setattr(probe, "host_probe", fake_probe)
    assert probe.cached_probe(now=1000.0) == (0.25, "measured")
    assert probe.cached_probe(now=1000.0 + probe.CACHE_MAX_AGE_S - 1) == (0.25, "cached")
    assert probe.cached_probe(now=1000.0 + probe.CACHE_MAX_AGE_S + 1) == (0.25, "measured")
    assert measured == [probe.ESTIMATE_PROBE_S, probe.ESTIMATE_PROBE_S]
    monkeypatch.setenv(probe.PROBE_ENV, "0.5")
    assert probe.cached_probe() == (0.5, "given")


def _costed(tmp_path: Path, costs: list[float]) -> tuple[list[SweepPoint], dict[Path, float]]:
    points = [p for seed in range(len(costs)) for p in sweep_points(tmp_path, "[fedavg]", f"seed={seed}")]
    return points, {p.run_dir: cost for p, cost in zip(points, costs, strict=True)}


def test_wall_time_follows_the_sweeps_order_on_n_workers(tmp_path: Path) -> None:
    points, costs = _costed(tmp_path, [3.0, 5.0, 3.0, 4.0, 3.0])
    # grid order on 2: 3 | 5; at 3 the third (to 6), at 5 the fourth (to 9), at 6 the fifth (to 9)
    assert wall_seconds(points, lambda p: costs[p.run_dir], 2, "grid") == 9.0
    # longest first: 5 | 4, then 3 at 4 (to 7), 3 at 5 (to 8), 3 at 7 (to 10): the campaign's makespan
    assert wall_seconds(points, lambda p: costs[p.run_dir], 2, "longest-first") == 10.0
    assert makespan(list(costs.values()), 2) == 10.0
    assert wall_seconds(points, lambda p: costs[p.run_dir], 1, "grid") == 18.0
    assert wall_seconds(points, lambda p: None, 3, "grid") == 0.0


def test_a_branching_run_starts_after_its_fedavg_run_in_the_wall_time(tmp_path: Path) -> None:
    # Fed-ZDAS waits for FedAvg (branch_from_fedavg): 2 workers do not run them side by side
    zdas, fedavg = sweep_points(tmp_path, "[{name: fedzdas, start_round: 3}, fedavg]")
    costs = {zdas.run_dir: 10.0, fedavg.run_dir: 4.0}
    assert wall_seconds([zdas, fedavg], lambda p: costs[p.run_dir], 2) == 14.0


def test_dry_run_with_workers_prints_the_run_time_and_the_wall_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: seed 0 of FedAvg finished in 1 s rounds (4 rounds), seeds 1-3 new: 4 s each
    from tests.unit.experiments.test_estimate import _log

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"extends: {REPO_ROOT / 'configs' / 'smoke.yaml'}\nname: sw\nout_dir: {tmp_path / 'runs'}\n"
        "train: {rounds: 4}\ngrid:\n  seed: [0, 1, 2, 3]\n"
    )
    assert main(["sweep", str(sweep), "--dry-run", "--workers", "2"]) == 0
    first = capsys.readouterr().out.splitlines()[0].split()[-1]
    _log(Path(first), [1.0, 1.0, 1.0, 1.0], finished=True)
    # Act
    assert main(["sweep", str(sweep), "--dry-run", "--workers", "2"]) == 0
    # Assert: 12 s of run time, 8 s on two workers
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("4 runs")]
    assert summary == [
        "4 runs: 1 finished, 3 new; about 12 s of run time left (round times of their seeds so far), "
        "about 8 s of wall time on 2 workers (--order grid)"
    ]


def test_archive_times_probe_line_is_absent_until_a_probe_was_needed() -> None:
    archive = ArchiveTimes(Archive(Path("s"), []), lambda: (0.1, "measured"))
    assert archive.probe_line() is None
    archive.probe_here()
    line = archive.probe_line()
    assert line is not None and line.startswith("host probe: 0.1 s a reference step (measured now in ")


def test_fedaug_run_dry_run_prints_the_plan_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    smoke = str(REPO_ROOT / "configs" / "smoke.yaml")
    assert main(["run", smoke, "--out-dir", str(tmp_path), "--set", "train.rounds=2", "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "plan: 1 run, one after the other: fedavg"
    assert lines[1].split()[:2] == ["new", "?"]  # no archive in tests (FEDAUG_STUDIES is empty)
    assert (
        lines[-1] == "job: no estimate before the first round (no FedAvg round of this setting timed here); "
        "then each round's line ends with the job's time left: fedavg by its own rounds"
    )
    assert not list(tmp_path.rglob("metrics.jsonl")) and not list(tmp_path.rglob("config.yaml"))


def test_a_sweeps_job_eta_costs_a_later_run_of_another_setting_by_the_archive(tmp_path: Path) -> None:
    # Prepare: FedAvg on K = 4 (the running point) and on K = 6 (later, no seed of it timed here); the
    # archive holds one GPU-less run of FedAvg on K = 6 at 3 s a round (no host probe: as it ran)
    (current,) = sweep_points(tmp_path, "[fedavg]")
    (later,) = sweep_points(tmp_path, "[fedavg]", "partition.num_clients=6")
    key = ("synthetic", "bn_cnn_mnist", "fedavg", 6, None)
    archived = ArchivedRun(Path("a"), "a", True, key, "cpu", 3.0, None, None)
    archive = ArchiveTimes(Archive(Path("s"), [archived]), lambda: (0.1, "given"))
    # Act / Assert: without the archive the later run is not yet timed; with it, 4 rounds at 3 s
    assert sweep_job(current, [later]).later[0].seconds is None
    assert sweep_job(current, [later], archive).later[0].seconds == pytest.approx(12.0)


def test_a_method_without_thread_clock_runs_is_costed_by_other_methods_thread_clock_runs() -> None:
    from fedaug.sweeps.round_ratio import DEFAULT_ROUND_RATIO

    # Prepare: FedLC's own runs of the setting carry no probe (their CPU model's median 0.05 s stands for
    # theirs: 1 s rounds, 2 s here); FedProx ran here-like, thread-clock probed at 0.2 s (11.4 s rounds);
    # FedAvg's run probed by the wall clock does not count
    prox, lc = (*KEY[:2], "fedprox", *KEY[3:]), (*KEY[:2], "fedlc", *KEY[3:])
    runs = [
        ArchivedRun(Path("p"), "p", True, prox, "cpu", 11.4, 0.2, "A", "thread"),
        ArchivedRun(Path("l1"), "l1", True, lc, "cpu", 1.0, None, "A"),
        ArchivedRun(Path("l2"), "l2", True, lc, "cpu", 1.0, None, "A"),
        _run("avg", 50.0, probe_s=0.05),
    ]
    archive = Archive(Path("studies"), runs)
    # Act: here 0.1 s a step
    found = archive.round_time({**FLAT, "method.name": "fedlc"}, "cpu", 0.1)
    # Assert: FedProx's round halved (this host is twice as fast), times FedLC's ratio over FedProx's
    expected = 11.4 * 0.1 / 0.2 * DEFAULT_ROUND_RATIO["fedlc"] / DEFAULT_ROUND_RATIO["fedprox"]
    assert found is not None
    assert (found.seconds, found.runs, found.matched) == (pytest.approx(expected), 1, 2)
    assert found.via == ("fedprox",)
    assert found.describe() == (
        "from 1 archived run of fedprox on this setting with a thread-clock host probe (its 2 archived runs "
        "without one), by the methods' round ratios, scaled by host probe 0.1 s vs 0.2 s"
    )
    # a method with no ratio, or one whose runs start with FedAvg rounds, keeps its own path (none: None)
    assert archive.round_time({**FLAT, "method.name": "moon"}, "cpu", 0.1) is None
    assert archive.round_time({**FLAT, "method.name": "fedzdas"}, "cpu", 0.1) is None
    # without a probe here nothing can be scaled: FedLC's own runs as they ran
    unscaled = archive.round_time({**FLAT, "method.name": "fedlc"}, "cpu", None)
    assert unscaled is not None and unscaled.via == () and unscaled.seconds == pytest.approx(1.0)
    # once FedLC has a thread-clock run of its own, it alone costs FedLC
    own = ArchivedRun(Path("l3"), "l3", True, lc, "cpu", 3.0, 0.1, "A", "thread")
    mine = Archive(Path("studies"), [*runs, own]).round_time({**FLAT, "method.name": "fedlc"}, "cpu", 0.1)
    assert mine is not None and (mine.seconds, mine.via) == (pytest.approx(3.0), ())
