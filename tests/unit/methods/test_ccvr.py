"""CCVR: exact pooling of class statistics, virtual sampling, calibrating a biased classifier, the engine."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug.api import RunContext
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.evaluation import evaluate
from fedaug.errors import ConfigError
from fedaug.methods.ccvr.method import CCVR, CCVRConfig
from fedaug.methods.ccvr.stats import ClassStatistics, class_statistics, pool_statistics, sample_virtual
from fedaug.methods.fedavg import FedAvg
from fedaug.types import StateDict
from tests.conftest import make_blobs
from tests.unit.methods.helpers import client_context, method_from_yaml, mlp_fn, run_sim


def _stats(features: torch.Tensor, labels: torch.Tensor) -> ClassStatistics:
    return ClassStatistics(*class_statistics(features, labels))


def test_pooling_by_hand() -> None:
    # Prepare: class 0 is (0, 0), (2, 0) at client A and (4, 2) at client B (one sample: zero covariance).
    a = _stats(torch.tensor([[0.0, 0.0], [2.0, 0.0]]), torch.tensor([0, 0]))
    b = _stats(torch.tensor([[4.0, 2.0]]), torch.tensor([0]))
    assert b.covs.abs().sum() == 0
    # Execute
    counts, means, covs = pool_statistics([a, b], num_classes=2)
    # Assert: the three samples' mean (2, 2/3) and unbiased covariance [[4, 2], [2, 4/3]]; class 1 is empty.
    assert counts.tolist() == [3.0, 0.0]
    torch.testing.assert_close(means[0], torch.tensor([2.0, 2 / 3], dtype=torch.float64))
    torch.testing.assert_close(covs[0], torch.tensor([[4.0, 2.0], [2.0, 4 / 3]], dtype=torch.float64))
    assert covs[1].abs().sum() == 0


def test_pooled_statistics_equal_the_pooled_samples() -> None:
    # Prepare: two clients with overlapping classes, shifted features, and a class seen once.
    gen = torch.Generator().manual_seed(0)
    f1, y1 = torch.randn(9, 4, generator=gen), torch.tensor([0, 0, 0, 1, 1, 2, 0, 1, 0])
    f2, y2 = torch.randn(6, 4, generator=gen) + 3, torch.tensor([0, 1, 1, 1, 0, 3])
    # Execute
    counts, means, covs = pool_statistics([_stats(f1, y1), _stats(f2, y2)], num_classes=5)
    # Assert
    feats, labels = torch.cat([f1, f2]).double(), torch.cat([y1, y2])
    assert counts.tolist() == [7.0, 6.0, 1.0, 1.0, 0.0]
    for c in (0, 1):
        torch.testing.assert_close(means[c], feats[labels == c].mean(dim=0))
        torch.testing.assert_close(covs[c], torch.cov(feats[labels == c].T))
    torch.testing.assert_close(means[2], feats[labels == 2][0])
    assert covs[2:].abs().sum() == 0


def test_virtual_features_follow_a_singular_gaussian() -> None:
    # A rank-1 covariance (all mass on the diagonal direction) is sampled exactly, without jitter.
    counts = torch.tensor([0.0, 5.0])
    means = torch.tensor([[0.0, 0.0], [1.0, -1.0]], dtype=torch.float64)
    covs = torch.stack([torch.zeros(2, 2), torch.ones(2, 2)]).double()
    features, labels = sample_virtual(counts, means, covs, 20000, torch.Generator().manual_seed(0))
    assert features.shape == (20000, 2) and labels.unique().tolist() == [1]
    torch.testing.assert_close(features.mean(dim=0), torch.tensor([1.0, -1.0]), atol=0.03, rtol=0)
    torch.testing.assert_close(torch.cov(features.T), torch.ones(2, 2), atol=0.05, rtol=0)
    torch.testing.assert_close(features[:, 0] - features[:, 1], torch.full((20000,), 2.0))


def _biased_case() -> tuple[StateDict, list[tuple[torch.Tensor, torch.Tensor]], torch.Tensor, torch.Tensor]:
    """A linear model whose classifier prefers class 0 by a large bias, clients holding one class each."""
    x, y = make_blobs(330, dim=8, seed=3)
    train_x, train_y, test_x, test_y = x[:-150], y[:-150], x[-150:], y[-150:]
    centers = torch.stack([train_x[train_y == c].mean(dim=0) for c in range(3)])
    state = {
        "classifier.weight": centers / 10,
        "classifier.bias": -(centers**2).sum(dim=1) / 20 + torch.tensor([5.0, 0.0, 0.0]),
    }
    clients = [(train_x[k::3], train_y[k::3]) for k in range(3)]
    return state, clients, test_x, test_y


@pytest.mark.parametrize("variant", ["gaussian", "shared_features"])
def test_calibration_fixes_a_biased_classifier(variant: str) -> None:
    # Prepare
    state, clients, test_x, test_y = _biased_case()
    model_fn = mlp_fn(hidden_sizes=())  # a linear model: the penultimate features are the inputs
    run = RunContext(num_clients=3, num_classes=3, input_shape=(8,), seed=0, num_rounds=1)
    method = CCVR(CCVRConfig(variant=variant, virtual_per_class=200, share_fraction=0.2))
    # Execute: the share phase after the final round, as the engine drives it.
    server = method.init_server(state, run)
    request = method.share_request(server, round_num=1, participants=[0], run=run)
    assert request is not None and request.client_ids == [0, 1, 2]
    shares = [method.client_share(request, client_context(x, y, model_fn=model_fn)) for x, y in clients]
    server = method.receive_shares(server, shares, run)
    # Assert: nearly everything is class 0 before; the calibrated classifier separates the blobs.
    model = model_fn()
    model.load_state_dict(state)
    before = evaluate(model, test_x, test_y, num_classes=3)["acc"]
    model.load_state_dict(method.eval_state(server))
    after = evaluate(model, test_x, test_y, num_classes=3)["acc"]
    assert before < 0.4 and after > 0.95
    assert server.model_state is state  # calibration never touches the weights that keep training


def test_engine_calibrates_after_the_final_round_only(tmp_path: Path) -> None:
    # Prepare / Execute
    _, fedavg_state = run_sim(tmp_path / "fedavg", FedAvg(), rounds=2, per_round=2)
    _, state = run_sim(tmp_path / "ccvr", CCVR(CCVRConfig(virtual_per_class=50)), rounds=2, per_round=2)
    # Assert: FedAvg's weights bit for bit; round 1 evaluates them, round 2 the calibrated classifier.
    assert all(torch.equal(state[key], fedavg_state[key]) for key in fedavg_state)
    fedavg, ccvr = (read_jsonl(tmp_path / name / "metrics.jsonl") for name in ("fedavg", "ccvr"))
    assert ccvr[0]["test/acc"] == fedavg[0]["test/acc"] and ccvr[0]["test/loss"] == fedavg[0]["test/loss"]
    assert ccvr[0] == fedavg[0] and ccvr[1]["ccvr/calibrated"] == 1.0
    assert ccvr[1]["ccvr/num_features"] == 3 * 50.0  # three classes seen, 50 virtual features each
    assert ccvr[1]["test/loss"] != fedavg[1]["test/loss"]


def test_every_round_calibration_and_shared_features(tmp_path: Path) -> None:
    method = CCVR(CCVRConfig(variant="shared_features", calibrate_every_round=True))
    run_sim(tmp_path, method, rounds=2, per_round=1)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    assert [r["ccvr/calibrated"] for r in records] == [1.0, 1.0]
    # floor(0.1 * 20) = 2 features of the MLP's 256-d penultimate layer from each of the 3 clients.
    assert records[0]["ccvr/num_features"] == 6.0
    assert records[0]["ccvr/bytes_up_per_client"] == 2 * 256 * 4 + 2 * 8


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"method\.variant must be one of gaussian, shared_features"):
        CCVRConfig(variant="features")
    with pytest.raises(ConfigError, match=r"method\.virtual_per_class must be >= 1, got 0"):
        CCVRConfig(virtual_per_class=0)
    message = r"method\.share_fraction must be a finite number in \(0, 1\], got 0.0"
    with pytest.raises(ConfigError, match=message):
        CCVRConfig(share_fraction=0.0)
    with pytest.raises(ConfigError, match=r"method\.calibration_lr must be a finite number > 0, got -1"):
        CCVRConfig(calibration_lr=-1)
    message = r"method\.calibration_momentum must be a finite number in \[0, 1\), got 1.0"
    with pytest.raises(ConfigError, match=message):
        CCVRConfig(calibration_momentum=1.0)
    CCVRConfig(share_fraction=1.0, calibration_momentum=0.0)  # the closed ends are valid


def test_yaml_preset_has_the_defaults() -> None:
    method = method_from_yaml("ccvr")
    assert isinstance(method, CCVR) and method.config == CCVRConfig()
