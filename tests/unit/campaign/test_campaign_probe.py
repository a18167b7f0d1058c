"""The host probe and the per-kind order of a campaign (issue #65): estimates scale by the hosts' probes, the
CPU works through its own grids."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fedaug.errors import ConfigError
from fedaug.runtime.machine import host_probe_fact
from fedaug.sweeps.probe import PROBE_ENV, given_or_measured, host_probe, speed_ratio
from tests.conftest import REPO_ROOT
from tools.campaign.ledger import Ledger
from tools.campaign.spec import grid_points, read_campaign

STUDIES = REPO_ROOT / "studies"
FEDAVG = Path("fsdd-quantity3-K27") / "fedavg" / "seed0"


def test_speed_ratio_is_here_over_there_and_one_where_a_host_was_not_probed() -> None:
    assert speed_ratio(0.2, 0.1) == pytest.approx(2.0)
    assert speed_ratio(0.1, 0.2) == pytest.approx(0.5)
    assert speed_ratio(None, 0.1) == speed_ratio(0.1, None) == speed_ratio(0.0, 0.1) == 1.0


def test_the_probe_measures_a_positive_step_and_a_given_one_is_taken_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert 0 < host_probe(seconds=0.05, warmup=1) < 60
    monkeypatch.setenv(PROBE_ENV, "0.25")
    assert given_or_measured() == 0.25
    monkeypatch.setenv(PROBE_ENV, "not a number")
    assert given_or_measured() > 0  # measured instead


def test_the_probe_times_its_steps_by_the_threads_cpu_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe taken while other work shares the core must not read that load as a slower host: each step
    is timed by the thread's CPU clock (here a fake one, 0.125 s a reading apart), not the wall clock."""
    from fedaug.sweeps import probe as probe_module

    readings = iter(range(10**6))
    monkeypatch.setattr(probe_module.time, "thread_time", lambda: 0.125 * next(readings))
    assert probe_module.host_probe(seconds=0.01, warmup=1, min_steps=3) == 0.125


@pytest.mark.parametrize(
    ("value", "fact"), [("0.5", {"host_probe_s": 0.5}), ("-1", {}), ("nan", {}), ("", {})]
)
def test_env_json_records_the_campaigns_probe_only_when_it_is_a_positive_number(
    monkeypatch: pytest.MonkeyPatch, value: str, fact: dict[str, float]
) -> None:
    monkeypatch.setenv(PROBE_ENV, value)
    assert host_probe_fact() == fact


def test_archived_round_times_scale_by_the_hosts_probes(tmp_path: Path) -> None:
    # Prepare: one archived FSDD FedAvg run, probed at 0.5 s a step on the host that made it
    run = tmp_path / "studies" / "flea_fsdd" / "runs" / FEDAVG
    shutil.copytree(STUDIES / "flea_fsdd" / "runs" / FEDAVG, run)
    env = json.loads((run / "env.json").read_text())
    (run / "env.json").write_text(json.dumps({**env, "host_probe_s": 0.5}))
    grid = read_campaign(STUDIES / "campaign.yaml").grid("flea_fsdd_baselines")
    point = next(
        p
        for p in grid_points(grid, tmp_path / "runs")
        if p.config.method.name == "fedavg" and p.config.seed == 0 and p.config.partition.name == "quantity"
    )
    # Execute: this host unprobed, as fast, twice as slow
    unscaled = Ledger(tmp_path / "studies").round_seconds(point, "cpu")
    same = Ledger(tmp_path / "studies", probe_s=0.5).round_seconds(point, "cpu")
    slower = Ledger(tmp_path / "studies", probe_s=1.0).round_seconds(point, "cpu")
    # Assert
    assert unscaled is not None and unscaled > 0
    assert same == pytest.approx(unscaled) and slower == pytest.approx(2 * unscaled)


def test_a_kind_without_an_order_takes_every_grid_and_a_bad_order_is_refused(tmp_path: Path) -> None:
    smoke = REPO_ROOT / "configs" / "smoke.yaml"
    grids = "".join(f"  - {{name: {n}, preset: {smoke}, study: {n}, cost_s: {{cpu: 1}}}}\n" for n in "abc")
    path = tmp_path / "campaign.yaml"
    path.write_text(f"order: {{cpu: [c, a]}}\ngrids:\n{grids}")
    campaign = read_campaign(path)
    assert [g.name for g in campaign.in_order("cpu")] == ["c", "a"]
    assert [g.name for g in campaign.in_order("cuda")] == ["a", "b", "c"]
    assert [g.name for g in campaign.only(["a", "b"]).in_order("cpu")] == ["a"]
    for order, reason in [("{cpu: [d]}", "unknown grid(s) d"), ("{cpu: [a, a]}", "a grid listed twice"),
                          ("{tpu: [a]}", "order must map cuda / cpu")]:  # fmt: skip
        path.write_text(f"order: {order}\ngrids:\n{grids}")
        with pytest.raises(ConfigError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            read_campaign(path)


def test_a_report_is_rebuilt_before_its_highlighted_method_has_runs(tmp_path: Path) -> None:
    from tools.campaign.importer import rebuild_report

    run = tmp_path / "flea_fsdd" / "runs" / FEDAVG  # FedAvg alone, as a grid's first archive holds
    shutil.copytree(STUDIES / "flea_fsdd" / "runs" / FEDAVG, run)
    smoke = REPO_ROOT / "configs" / "smoke.yaml"
    path = tmp_path / "campaign.yaml"
    path.write_text(
        f"grids:\n  - {{name: g, preset: {smoke}, study: flea_fsdd, cost_s: {{cpu: 1}},\n"
        "     report: {runs: [runs], baseline: fedavg, highlight: flea, plots: false}}\n"
    )
    campaign = read_campaign(path)
    written = rebuild_report(campaign, campaign.grid("g"))
    assert tmp_path / "flea_fsdd" / "report.md" in written
    assert "fedavg" in (tmp_path / "flea_fsdd" / "report.md").read_text()
