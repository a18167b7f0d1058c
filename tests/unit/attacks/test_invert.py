"""Inverting Gradients: metrics on hand-made images, the simulated client, a 1-image linear model, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from fedaug.api import ClientContext, ClientData, Payload, RunContext, TrainSettings
from fedaug.attacks.gradient_inversion import (
    ClientSimulation,
    InversionConfig,
    client_objective,
    cosine_distance,
    reconstruct,
    simulated_update,
    total_variation,
)
from fedaug.attacks.image_metrics import mse, psnr, ssim
from fedaug.attacks.invert import matched_metrics
from fedaug.augment import AugMix
from fedaug.cli.main import main
from fedaug.methods.fedaugmix import FedAugMixConfig, js_consistency_loss
from fedaug.methods.fedavg import FedAvg
from fedaug.models import build_model
from fedaug.training.loop import cross_entropy_loss


def test_mse_and_psnr_by_hand() -> None:
    black = torch.zeros(2, 1, 16, 16)
    grey = torch.full((2, 1, 16, 16), 0.1)
    torch.testing.assert_close(mse(black, grey), torch.full((2,), 0.01))
    torch.testing.assert_close(psnr(black, grey), torch.full((2,), 20.0))  # 10 log10(1 / 0.01)
    assert math.isinf(float(psnr(grey, grey)[0]))


def test_ssim_by_hand() -> None:
    # Identical images: 1. Two flat images a, b: the variances vanish, SSIM = (2ab + C1) / (a^2 + b^2 + C1).
    x = torch.rand(3, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(ssim(x, x), torch.ones(3))
    a, b, c1 = 0.2, 0.6, 0.01**2
    flat = ssim(torch.full((1, 1, 12, 12), a), torch.full((1, 1, 12, 12), b))
    assert flat.item() == pytest.approx((2 * a * b + c1) / (a**2 + b**2 + c1), rel=1e-4)
    assert ssim(x, 1 - x).mean() < 0  # an inverted image is anti-correlated
    with pytest.raises(ValueError, match="at least 11x11"):
        ssim(torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 8))


def test_cosine_distance_and_total_variation() -> None:
    u = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([[3.0]])}
    assert cosine_distance(u, u).item() == pytest.approx(0.0, abs=1e-7)
    assert cosine_distance({k: -v for k, v in u.items()}, u).item() == pytest.approx(2.0)
    stripes = torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]])  # |dx| = 1 everywhere, dy = 0
    assert total_variation(stripes).item() == pytest.approx(1.0)


def test_matching_swaps_only_same_label_images() -> None:
    original = torch.stack([torch.zeros(1, 12, 12), torch.ones(1, 12, 12), torch.full((1, 12, 12), 0.5)])
    recovered = original[[1, 0, 2]]
    values, _ = matched_metrics(original, recovered, torch.tensor([4, 4, 7]))
    assert values["mse"] == 0.0
    values, _ = matched_metrics(original, recovered, torch.tensor([4, 5, 7]))
    assert values["mse"] == pytest.approx(2 / 3)


def _image_model(seed: int = 0) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model("mlp", num_classes=3, input_shape=(1, 4, 4), hidden_sizes=(8,))


def test_simulation_reproduces_the_clients_real_update() -> None:
    # Prepare: the real FedAvg client (3 SGD steps on 2 images) and the attacker's unrolled simulation.
    x = torch.randn(2, 1, 4, 4, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 2])
    model = _image_model()
    start = {k: v.detach().clone() for k, v in model.state_dict().items()}
    run = RunContext(num_clients=1, num_classes=3, input_shape=(1, 4, 4), seed=0, num_rounds=1)
    ctx = ClientContext(0, 1, ClientData(0, x, y, 3), _image_model(), torch.Generator(), run)
    settings = TrainSettings(local_epochs=3, batch_size=2, lr=0.05, optimizer="sgd")
    after = FedAvg().client_update(Payload(1, start, settings), ctx).model_state
    real = {k: after[k] - start[k] for k, _ in model.named_parameters()}
    # Execute
    params = {k: v.detach() for k, v in model.named_parameters()}
    simulated = simulated_update(model, params, {}, y, ClientSimulation(steps=3, lr=0.05), None)(x)
    # Assert
    for key in real:
        torch.testing.assert_close(simulated[key], real[key], atol=1e-6, rtol=1e-5)


def test_attacker_objective_equals_the_fedaugmix_loss_for_the_same_draws() -> None:
    x = torch.randn(3, 1, 4, 4, generator=torch.Generator().manual_seed(2))
    y = torch.tensor([0, 1, 2])
    model = _image_model()
    config = FedAugMixConfig(severity=4)
    augmix = AugMix(severity=4, mean=(0.5,), std=(0.25,))
    draw = augmix.sample(2, 3, 4, 4, torch.Generator().manual_seed(0))
    batch = torch.cat([x, augmix.apply(x, draw).flatten(0, 1)])
    method_loss = js_consistency_loss(cross_entropy_loss, config)(model, batch, y.repeat(3)).loss
    params = dict(model.named_parameters())
    attacker_loss = client_objective(model, params, {}, x, y, (augmix, config, draw))
    assert attacker_loss.item() == pytest.approx(method_loss.item(), rel=1e-6)


def test_recovers_a_single_image_from_a_one_step_update_of_a_linear_model() -> None:
    # Prepare: a linear classifier on 4x4 images in [0, 1] and the update of one SGD step on one image.
    image = torch.rand(1, 1, 4, 4, generator=torch.Generator().manual_seed(3))
    label = torch.tensor([1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = build_model("mlp", num_classes=3, input_shape=(1, 4, 4), hidden_sizes=())
    params = {k: v.detach() for k, v in model.named_parameters()}
    update_fn = simulated_update(model, params, {}, label, ClientSimulation(steps=1, lr=0.1), None)
    target = {k: v.detach() for k, v in update_fn(image).items()}
    bounds = (torch.zeros(1, 1, 1, 1), torch.ones(1, 1, 1, 1))
    # Execute
    recovered, cost = reconstruct(
        update_fn, target, (1, 1, 4, 4), bounds, InversionConfig(iterations=200, tv_weight=0.0),
        torch.Generator().manual_seed(0),
    )  # fmt: skip
    # Assert: almost exactly the image.
    assert cost < 1e-4
    assert mse(recovered, image).item() < 1e-4
    assert psnr(recovered, image).item() > 40


def test_cli_writes_table_results_and_grid(shared_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "invert"
    argv = [
        "attack",
        "invert",
        "--data-dir",
        str(shared_data),
        "--stages",
        "untrained",
        "--severities",
        "0,2",
    ]
    argv += ["--threat-models", "aware", "--iterations", "2", "--batch-size", "2", "--local-epochs", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["label"], r["threat"]) for r in rows] == [("none", "none"), ("s=2 aware LS", "aware")]
    assert all(0 <= r["ssim"] <= 1 and r["mse"] > 0 for r in rows)
    table = (out / "table.md").read_text()
    assert "Fed-AugMix s=2 | AugMix + JS | on" in table and "flat grey 0.5" in table
    assert (out / "grid_untrained_0-2.png").stat().st_size > 0


def test_cli_rejects_bad_choices(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["attack", "invert", "--stages", "trained"]) == 2
    assert "--stages got 'trained'; valid choices: untrained, converged" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("checkpoint", "message"),
    [
        (None, "stage 'converged' needs --checkpoint (a run's ckpt/latest.pt or a state-dict file)"),
        ("missing.pt", "--checkpoint {tmp}/missing.pt does not exist"),
    ],
)
def test_a_missing_checkpoint_is_refused_before_the_dataset_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpoint: str | None, message: str
) -> None:
    # the data dir holds nothing: the checkpoint's error comes first, not the dataset's
    argv = ["attack", "invert", "--stages", "converged", "--data-dir", str(tmp_path / "no-data")]
    argv += ["--out", str(tmp_path / "out")] + (
        ["--checkpoint", str(tmp_path / checkpoint)] if checkpoint else []
    )
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"fedaug: error: {message.format(tmp=tmp_path)}"
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not a checkpoint", "is corrupt or not a checkpoint"),
        ({"state": {"round": 3}}, "holds no model weights"),
        ({"fc.weight": torch.zeros(2, 2)}, "does not fit the attacked model (tensors differing: "),
    ],
)
def test_a_checkpoint_without_the_models_weights_is_refused(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: object, message: str
) -> None:
    path = tmp_path / "ckpt.pt"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        torch.save(content, path)
    argv = ["attack", "invert", "--stages", "converged", "--checkpoint", str(path)]
    assert main([*argv, "--data-dir", str(shared_data), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"--checkpoint {path} {message}" in err
    assert not (tmp_path / "out").exists()
