"""The repository's own ``studies/campaign.yaml``: every grid point builds a valid config (no training), names
registered parts, has a GPU cost estimate, and runs CIFAR-10 only on the labelled JPEG copy."""

from __future__ import annotations

import pytest

from fedaug import registry
from fedaug.sweeps.order import SweepPoint
from tests.conftest import REPO_ROOT
from tools.campaign.spec import Campaign, grid_points, read_campaign

CAMPAIGN = REPO_ROOT / "studies" / "campaign.yaml"


@pytest.fixture(scope="module")
def campaign() -> Campaign:
    return read_campaign(CAMPAIGN)


@pytest.fixture(scope="module")
def points(campaign: Campaign, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[SweepPoint]]:
    runs = tmp_path_factory.mktemp("runs")
    return {grid.name: grid_points(grid, runs) for grid in campaign.grids}


def test_every_grid_expands_to_distinct_valid_points(
    campaign: Campaign, points: dict[str, list[SweepPoint]]
) -> None:
    for grid in campaign.grids:
        found = points[grid.name]
        assert found or grid.axes_from is not None, grid.name  # axes_from: no points until values are chosen
        assert len({p.run_dir for p in found}) == len(found), f"{grid.name}: two points share a run dir"
        for point in found:
            config = point.config
            assert config.data.name in registry.available("dataset"), point.run_dir
            assert config.model.name in registry.available("model"), point.run_dir
            assert config.method.name in registry.available("method"), point.run_dir
            assert config.partition.name in registry.available("partitioner"), point.run_dir


def test_every_point_has_an_estimate_where_it_runs_and_cifar10_is_the_labelled_jpeg_copy(
    campaign: Campaign, points: dict[str, list[SweepPoint]]
) -> None:
    for kind in ("cuda", "cpu"):
        for grid in campaign.in_order(kind):
            for point in points[grid.name]:
                assert grid.table_cost(kind, point.config.method.name) is not None, (kind, point.run_dir)
    for grid in campaign.grids:
        for point in points[grid.name]:
            if point.config.data.name == "cifar10":  # only the JPEG copy exists offline (stand_ins.py)
                assert point.config.data.options.get("variant") == "jpeg_lossy", point.run_dir


def test_the_cpu_works_through_cpu_sized_grids_in_the_issues_order(campaign: Campaign) -> None:
    """Issue #65: (a) FLea on CIFAR-10 with a stand-in model, its pilot first; (b) Fed-ZDA's CIFAR-10 rows,
    its own methods on seed 0 first; (c) the tuned baselines' seed-0 search: what its done-when names, before
    the stand-in's baselines and Fed-ZDA's seeds 1-2; (d) the rest of UCI-HAR. MobileNetV2 and ResNet-50 stay
    for a GPU. Issue #66's FSDD evidence (minutes a run) goes second, after the pilot; its UCI-HAR rows after
    the image grids."""
    cpu = [grid.name for grid in campaign.in_order("cpu")]
    assert cpu[:12] == [
        "flea_cifar10_standin_pilot",
        "fsdd_drift_baselines",
        "fsdd_reference_runs",
        "flea_cifar10_standin",
        "fedzda_tables_cifar10",
        "fedzda_tables_cifar10_zda",
        "flea_har_tuning",
        "flea_har_tuned_seeds12",
        "flea_cifar10_standin_baselines",
        "fedzda_tables_cifar10_zda_seeds12",
        "har_drift_baselines_qua2",
        "har_drift_baselines_subject",
    ]
    cuda = [grid.name for grid in campaign.in_order("cuda")]
    assert not {name for name in cpu if "standin" in name or "tuning" in name} & set(cuda)
    assert not [n for n in cpu if "k500" in n or "k1000" in n or "fedaugmix" in n or "scarcity" in n]


def test_fsdd_drift_baselines_are_issue_66s_grid(points: dict[str, list[SweepPoint]]) -> None:
    """Issue #66: every new baseline beside FedAvg and FLea on FSDD, K = 27, three splits, three seeds."""
    rows = points["fsdd_drift_baselines"]
    assert len(rows) == 7 * 3 * 3
    assert {p.config.method.name for p in rows} == {
        "scaffold",
        "feddyn",
        "fednova",
        "fedavgm",
        "fedadam",
        "fedyogi",
        "fedadagrad",
    }
    assert {(p.config.data.name, p.config.partition.num_clients, p.config.seed) for p in rows} == {
        ("fsdd", 27, seed) for seed in (0, 1, 2)
    }
    assert [p.config.seed for p in rows[:21]] == [0] * 21


def test_issue_66s_reference_runs_and_uci_har_rows(
    campaign: Campaign, points: dict[str, list[SweepPoint]]
) -> None:
    """Issue #66: local and centralized on FSDD beside the rest; on UCI-HAR, seed 0, Qua(2) K = 75 and by
    subject, queued on the CPU after the image grids."""
    fsdd = points["fsdd_reference_runs"]
    assert sorted({p.config.method.name for p in fsdd}) == ["centralized", "local"] and len(fsdd) == 18
    qua2, subject = points["har_drift_baselines_qua2"], points["har_drift_baselines_subject"]
    assert {(p.config.partition.name, p.config.partition.num_clients) for p in qua2} == {("quantity", 75)}
    assert {(p.config.partition.name, p.config.partition.num_clients) for p in subject} == {("natural", 21)}
    assert {p.config.seed for p in qua2 + subject} == {0}
    methods = {p.config.method.name for p in qua2}
    assert {p.config.method.name for p in subject} == methods | {"fedavg", "flea"}
    cpu = [grid.name for grid in campaign.in_order("cpu")]
    assert cpu.index("har_drift_baselines_qua2") > cpu.index("fedzda_tables_cifar10_zda_seeds12")


def test_fed_zda_cifar10_rows_are_the_papers_grid(points: dict[str, list[SweepPoint]]) -> None:
    """Item 6 of issue #51: BN-CNN, five methods, unimodal and multimodal, 3 seeds, 100 clients."""
    zda_seed0, zda_seeds12 = points["fedzda_tables_cifar10_zda"], points["fedzda_tables_cifar10_zda_seeds12"]
    assert {p.config.seed for p in zda_seed0} == {0} and {p.config.seed for p in zda_seeds12} == {1, 2}
    rows = points["fedzda_tables_cifar10"] + zda_seed0 + zda_seeds12
    assert len({p.run_dir for p in rows}) == len(rows)  # no point in two grids
    assert len(rows) == 2 * 5 * 3
    assert {p.config.method.name for p in rows} == {"fedavg", "fedprox", "qffl", "fedzdac", "fedzdas"}
    assert {p.config.partition.name for p in rows} == {"shards", "multimodal"}
    assert {p.config.seed for p in rows} == {0, 1, 2}
    assert {(p.config.model.name, p.config.partition.num_clients, p.config.train.rounds) for p in rows} == {
        ("bn_cnn_cifar", 100, 100)
    }
    zda = [p for p in rows if p.config.method.name.startswith("fedzda")]
    assert all(p.config.engine.branch_from_fedavg and 79 in p.config.engine.keep_checkpoints for p in zda)
    # ... and they find FedAvg's runs, with those checkpoints, as their siblings: branched, not retrained
    from fedaug.config.identity import fedavg_run_dir

    fedavg = {p.run_dir for p in rows if p.config.method.name == "fedavg"}
    assert all(79 in p.config.engine.keep_checkpoints for p in rows if p.run_dir in fedavg)
    assert {fedavg_run_dir(p.config) for p in zda} == fedavg


def test_the_stand_in_grid_runs_the_pilots_choice_and_counts_its_runs(
    points: dict[str, list[SweepPoint]],
) -> None:
    """Issue #65 (a): the pilot chose LeNet-5 (studies/flea_cifar10_standin/README.md), so the stand-in grid
    and its baselines run it, labelled a stand-in for MobileNetV2, and the pilot's LeNet-5 runs have the
    identities of the grid's Qua(3) seed-0 points (the ledger finds them archived: they are not run twice)."""
    from tools.campaign.ledger import point_identity

    grid = points["flea_cifar10_standin"] + points["flea_cifar10_standin_baselines"]
    assert {(p.config.model.name, p.config.model.stand_in_for) for p in grid} == {("lenet5", "MobileNetV2")}
    assert len(points["flea_cifar10_standin"]) == 3 * 3 * 2
    pilot: dict[str, list[str]] = {}
    for p in points["flea_cifar10_standin_pilot"]:
        pilot.setdefault(p.config.model.name, []).append(point_identity(p))
    assert set(pilot) == {"bn_cnn_cifar", "lenet5"}
    grid_ids = {point_identity(p) for p in points["flea_cifar10_standin"]}
    assert set(pilot["lenet5"]) <= grid_ids and not set(pilot["bn_cnn_cifar"]) & grid_ids
