"""FLea: reductions to FedAvg, buffer content, exposure, the official preset, every model and split layer."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fedaug import registry
from fedaug.api import ClientContext, ClientData, Payload, RunContext, TrainSettings
from fedaug.config.load import build_dataclass
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.buffer import BufferStream, exposure_update, share_indices
from fedaug.methods.flea.method import FLea, FLeaConfig, FLeaOfficial
from fedaug.models import build_model
from tests.conftest import make_spec
from tests.helpers import killed_in_round


def _final_state(
    run_dir: Path, method: FedAvg, rounds: int = 3
) -> tuple[list[float], dict[str, torch.Tensor]]:
    sim = Simulation(make_spec(run_dir, method=method, rounds=rounds, per_round=2))
    sim.run()
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    accs = [r["test/acc"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    return accs, ckpt["state"]["model_state"]


def test_empty_buffer_without_distillation_and_decorrelation_equals_fedavg(tmp_path: Path) -> None:
    # Eq. 6's objective (no extra local CE): the soft-label CE of unmixed features is plain CE
    flea = FLea(FLeaConfig(share_fraction=0.0, distill_weight=0.0, decor_weight=0.0, local_ce_weight=0.0))
    accs, state = _final_state(tmp_path / "flea", flea)
    ref_accs, ref_state = _final_state(tmp_path / "fedavg", FedAvg())
    assert accs == ref_accs
    for key, value in ref_state.items():
        assert torch.equal(state[key], value), key


def test_mix_weight_one_reduces_to_local_training(tmp_path: Path) -> None:
    # A full buffer is shared and mixed in, but with weight 1 on the local activation it has no effect.
    config = FLeaConfig(
        mix_weight=1.0, share_fraction=0.5, distill_weight=0.0, decor_weight=0.0, local_ce_weight=0.0
    )
    flea = FLea(config)
    accs, state = _final_state(tmp_path / "flea", flea)
    ref_accs, ref_state = _final_state(tmp_path / "fedavg", FedAvg())
    assert accs == pytest.approx(ref_accs, abs=1e-9)
    for key, value in ref_state.items():
        torch.testing.assert_close(state[key], value, rtol=1e-5, atol=1e-6)


def test_buffer_holds_last_rounds_features_of_its_participants(tmp_path: Path) -> None:
    flea = FLea(FLeaConfig(share_fraction=0.25))
    sim = Simulation(make_spec(tmp_path, method=flea, rounds=3, per_round=2, samples_per_client=20))
    sim.run()
    records = read_jsonl(tmp_path / "metrics.jsonl")
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    extra = ckpt["state"]["extra"]
    last_clients = records[-1]["clients"]
    # floor(0.25 * 20) = 5 features from each of round 3's two clients, labelled with their own labels
    assert extra["buffer_x"].shape == (10, 256)  # mlp's default split: the 256-d hidden activation
    assert sorted(set(extra["buffer_client"].tolist())) == last_clients
    assert extra["buffer_round"].tolist() == [3] * 10
    spec = sim.spec
    for client in last_clients:
        own = set(spec.train_y[spec.client_indices[client]].tolist())
        labels = extra["buffer_y"][extra["buffer_client"] == client].tolist()
        assert set(labels) <= own
    assert all(r["flea/buffer_size"] == 10.0 for r in records)
    assert records[0]["flea/decor_weight"] == 3.0
    assert 0.0 < records[-1]["flea/dcor"] <= 1.0


def test_buffer_rounds_keeps_previous_rounds(tmp_path: Path) -> None:
    flea = FLea(FLeaConfig(share_fraction=0.25, buffer_rounds=2))
    sim = Simulation(make_spec(tmp_path, method=flea, rounds=3, per_round=2))
    sim.run()
    ckpt = sim.store.load_checkpoint()
    assert ckpt is not None
    assert sorted(set(ckpt["state"]["extra"]["buffer_round"].tolist())) == [2, 3]
    assert ckpt["state"]["extra"]["buffer_y"].numel() == 20


def test_exposure_pairs_on_a_hand_sized_example() -> None:
    pairs = exposure_update(torch.empty(0, dtype=torch.long), torch.tensor([0, 0, 1]), [2], num_clients=4)
    assert pairs.tolist() == [2, 6, 8, 9]  # (0,2), (1,2), (2,0), (2,1) as i*4 + j
    pairs = exposure_update(pairs, torch.tensor([2]), [2, 3], num_clients=4)
    assert pairs.tolist() == [2, 6, 8, 9, 10, 11, 14]  # + (2,2), (2,3), (3,2)
    assert exposure_update(pairs, torch.empty(0, dtype=torch.long), [1], 4) is pairs


def test_exposure_grows_over_rounds_and_is_one_when_everyone_shares(tmp_path: Path) -> None:
    flea = FLea(FLeaConfig(share_fraction=0.25))
    Simulation(make_spec(tmp_path, method=flea, rounds=3, per_round=3, num_clients=3)).run()
    exposure = [r["flea/exposure"] for r in read_jsonl(tmp_path / "metrics.jsonl")]
    assert exposure == [0.0, 1.0, 1.0]  # round 1 has no buffer; from round 2 all 3 clients exchange


def test_buffer_stream_cycles_through_shuffled_passes() -> None:
    stream = BufferStream(3, torch.Generator().manual_seed(0))
    taken = stream.take(7)
    assert sorted(taken[:3].tolist()) == [0, 1, 2] and sorted(taken[3:6].tolist()) == [0, 1, 2]
    assert taken.shape == (7,)


def test_share_indices_fresh_and_fixed() -> None:
    gen = torch.Generator().manual_seed(0)
    assert len(share_indices(99, 0.1, gen, None, 0)) == 9
    assert len(share_indices(9, 0.1, gen, None, 0)) == 0  # floor, as the official code
    fresh = [share_indices(50, 0.2, gen, None, 1).tolist() for _ in range(2)]
    assert fresh[0] != fresh[1]
    fixed = [share_indices(50, 0.2, gen, 7, 1).tolist() for _ in range(2)]
    assert fixed[0] == fixed[1] and len(set(fixed[0])) == 10


def test_flea_resumes_identically(tmp_path: Path) -> None:
    Simulation(make_spec(tmp_path / "full", method=FLea(FLeaConfig(share_fraction=0.25)), rounds=4)).run()
    killed = killed_in_round(FLea, FLeaConfig(share_fraction=0.25), kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        Simulation(make_spec(tmp_path / "cut", method=killed, rounds=4)).run()
    Simulation(make_spec(tmp_path / "cut", method=FLea(FLeaConfig(share_fraction=0.25)), rounds=4)).run()
    for name in ("metrics.jsonl", "summary.json"):
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "full" / name).read_text()


def test_official_preset_departures(tmp_path: Path) -> None:
    method = FLeaOfficial()
    assert method.config.decor_form == "dcor" and method.config.local_ce_weight == 1.0
    assert [method.decor_weight_at(t) for t in (1, 2, 20, 21, 50)] == pytest.approx([3.0, 2.9, 1.1, 1.0, 1.0])
    # below 1 the weight stays where it was set: 0 switches decorrelation off under this schedule too
    for weight, expected in ((0.0, 0.0), (0.5, 0.5), (1.5, 1.0)):
        low = FLea(FLeaConfig(decor_weight=weight, decor_schedule="official"))
        assert low.decor_weight_at(1) == weight and low.decor_weight_at(30) == expected
    payload = method.payload(method.init_server({}, _run()), 1, TrainSettings(local_epochs=5))
    assert payload.train.local_epochs == 15  # 3x epochs in the warm-up round
    Simulation(make_spec(tmp_path, method=method, rounds=3, per_round=2)).run()
    assert len(read_jsonl(tmp_path / "metrics.jsonl")) == 3


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"method\.decor_form must be one of dcor_squared, dcor, trace"):
        FLeaConfig(decor_form="l2")
    with pytest.raises(ConfigError, match=r"method\.mix_beta must be a finite number > 0, got -1"):
        build_dataclass(FLeaConfig, {"mix_beta": -1}, path="method")
    with pytest.raises(ConfigError, match=r"method\.mix_beta must be a finite number > 0, got nan"):
        FLeaConfig(mix_beta=float("nan"))  # NaN passed the old "<= 0" check
    message = r"method\.share_fraction must be a finite number in \[0, 1\], got nan"
    with pytest.raises(ConfigError, match=message):
        FLeaConfig(share_fraction=float("nan"))
    with pytest.raises(ConfigError, match=r"unknown config key .method\.lambda1."):
        build_dataclass(FLeaConfig, {"lambda1": 1}, path="method")


def _run(num_classes: int = 3, shape: tuple[int, ...] = (8,)) -> RunContext:
    return RunContext(num_clients=2, num_classes=num_classes, input_shape=shape, seed=0, num_rounds=2)


# (model, input shape, classes): every model with split points, at small input sizes to stay fast.
MODELS = [
    ("harnet", (1, 128, 3), 6),
    ("audionet", (2, 32, 48), 10),
    ("mobilenet_v2_cifar", (3, 16, 16), 10),
    ("lenet5", (1, 28, 28), 10),
    ("bn_cnn_mnist", (1, 28, 28), 10),
    ("bn_cnn_cifar", (3, 32, 32), 10),
    ("resnet18_cifar", (3, 16, 16), 10),
    ("convnet", (3, 32, 32), 10),
    ("mlp", (1, 8, 8), 10),
]


def _flea_round_two(name: str, shape: tuple[int, ...], classes: int, layer: int | None) -> None:
    """One client round with a non-empty buffer (mix, distil, decorrelate) on ``name`` at ``layer``."""
    torch.manual_seed(0)
    workspaces = {}

    def workspace(key: str):
        if key not in workspaces:
            workspaces[key] = build_model(name, num_classes=classes, input_shape=shape)
        return workspaces[key]

    flea = FLea(FLeaConfig(split_layer=layer, share_fraction=0.5))
    model = workspace("client")
    x, y = torch.randn(6, *shape), torch.arange(6) % classes
    ctx = ClientContext(
        0,
        2,
        ClientData(0, x, y, classes),
        model,
        torch.Generator().manual_seed(0),
        _run(classes, shape),
        workspace=workspace,
    )
    state = {k: v.clone() for k, v in model.state_dict().items()}
    from fedaug.api import ShareRequest

    share = flea.client_share(ShareRequest(1, [0], state), ctx)
    extra = {"buffer_x": share.extra["x"], "buffer_y": share.extra["y"]}
    update = flea.client_update(Payload(2, state, TrainSettings(local_epochs=1, batch_size=3), extra), ctx)
    assert update.metrics["train/steps"] == 2.0
    assert all(torch.isfinite(v).all() for v in update.model_state.values() if v.is_floating_point())


@pytest.mark.parametrize(("name", "shape", "classes"), MODELS)
def test_flea_runs_on_every_model_at_its_default_split(
    name: str, shape: tuple[int, ...], classes: int
) -> None:
    _flea_round_two(name, shape, classes, None)


@pytest.mark.parametrize("layer", [-1, 0, 1, 2, 3])
def test_flea_runs_at_every_harnet_split_layer(layer: int) -> None:
    _flea_round_two("harnet", (1, 128, 3), 6, layer)


def test_missing_split_layer_is_a_clear_error() -> None:
    with pytest.raises(
        IncompatibleModelError, match=r"split layer 4 does not exist in HARNet; valid layers: -1\.\.3"
    ):
        _flea_round_two("harnet", (1, 128, 3), 6, 4)


def test_every_flea_variant_is_registered() -> None:
    assert {"flea", "flea_official"} <= set(registry.available("method"))
