"""The local optimiser's foreach implementation on a CPU trains bit for bit as the per-parameter loop did."""

from __future__ import annotations

import pytest
import torch

from fedaug.api import ClientData, TrainSettings
from fedaug.models import build_model
from fedaug.training import loop
from fedaug.training.loop import cross_entropy_loss, make_optimizer, train_local

SETTINGS = {
    "adam": TrainSettings(local_epochs=2, batch_size=8, lr=1e-2),
    "adam_decay": TrainSettings(local_epochs=2, batch_size=8, lr=1e-2, weight_decay=1e-3),
    "sgd_momentum": TrainSettings(
        local_epochs=2, batch_size=8, lr=0.05, optimizer="sgd", momentum=0.9, weight_decay=1e-3
    ),
}


def test_cpu_optimizers_run_foreach() -> None:
    model = build_model("mlp", num_classes=3, input_shape=(8,))
    params = list(model.parameters())
    for settings in SETTINGS.values():
        assert make_optimizer(params, settings).defaults["foreach"] is True
    assert loop.cpu_foreach([]) is None


def _trained(
    settings: TrainSettings, channels_last: bool, monkeypatch: pytest.MonkeyPatch | None
) -> dict[str, torch.Tensor]:
    if monkeypatch is not None:  # the per-parameter loop, as before: torch's own choice on a CPU
        monkeypatch.setattr(loop, "cpu_foreach", lambda params: None)
    torch.manual_seed(0)
    model = build_model("bn_cnn_cifar", num_classes=10, input_shape=(3, 16, 16))
    if channels_last:  # engine.channels_last: all, the CPU default of this model
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    start = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    data = ClientData(0, torch.randn(40, 3, 16, 16, generator=gen), torch.arange(40) % 10, 10)
    train_local(
        model, data, loss_fn=cross_entropy_loss, settings=settings, generator=torch.Generator().manual_seed(2)
    )
    if monkeypatch is not None:
        monkeypatch.undo()
    trained = {k: v.clone() for k, v in model.state_dict().items()}
    assert not torch.equal(trained["classifier.weight"], start["classifier.weight"])  # it did train
    return trained


@pytest.mark.parametrize("name", list(SETTINGS))
@pytest.mark.parametrize("channels_last", [False, True])
def test_foreach_trains_bit_identically_to_the_per_parameter_loop(
    name: str, channels_last: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _trained(SETTINGS[name], channels_last, monkeypatch)
    after = _trained(SETTINGS[name], channels_last, None)
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key
