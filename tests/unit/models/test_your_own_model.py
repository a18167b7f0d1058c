"""Your own model (fedaug.models.base): a SplitModel built from an encoder and a head or from blocks with a
split index runs exactly the given modules; any other nn.Module runs wrapped in PlainModel, and the methods
that need a split, features or a classifier refuse it with one line saying how to build one."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedaug import registry
from fedaug.api import RunContext
from fedaug.errors import IncompatibleModelError
from fedaug.models import as_split_model
from fedaug.models.base import PlainModel, SplitModel
from fedaug.plugins import PluginError

RUN = RunContext(num_clients=2, num_classes=3, input_shape=(4,), seed=0, num_rounds=1)


def _parts() -> tuple[nn.Module, nn.Sequential]:
    torch.manual_seed(0)
    encoder = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    return encoder, nn.Sequential(nn.Linear(8, 5), nn.Tanh(), nn.Linear(5, 3))


def test_from_encoder_head_runs_the_head_after_the_encoder() -> None:
    encoder, head = _parts()
    model = SplitModel.from_encoder_head(encoder, head)
    x = torch.randn(6, 4)
    assert torch.equal(model(x), head(encoder(x)))
    assert (model.default_split, list(model.split_layers), model.num_classes) == (0, [-1, 0, 1], 3)
    assert torch.equal(model.encode(x, 0), encoder(x))
    assert torch.equal(model.decode(model.encode(x, 0), 0), model(x))
    assert torch.equal(model.penultimate(x), head[:2](encoder(x)))
    assert model.classifier is head[2]


def test_a_linear_head_is_the_classifier_alone() -> None:
    encoder, _ = _parts()
    model = SplitModel.from_encoder_head(encoder, nn.Linear(8, 3))
    assert list(model.split_layers) == [-1, 0]
    assert torch.equal(model.penultimate(torch.ones(1, 4)), encoder(torch.ones(1, 4)))


def test_from_blocks_splits_at_the_given_index_and_checks_it() -> None:
    blocks = [nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)]
    model = SplitModel.from_blocks(blocks, split=1)
    assert (model.default_split, SplitModel.default_split, model.num_blocks) == (1, 0, 2)
    with pytest.raises(IncompatibleModelError, match=r"split layer 2 does not exist.*valid layers: -1\.\.1"):
        SplitModel.from_blocks(blocks, split=2)
    with pytest.raises(IncompatibleModelError, match=r"last of the blocks must be the nn\.Linear classifier"):
        SplitModel.from_blocks(blocks[:2], split=0)
    with pytest.raises(
        IncompatibleModelError, match=r"the head must be an nn\.Linear or an nn\.Sequential ending"
    ):
        SplitModel.from_encoder_head(nn.Identity(), nn.Sequential(nn.Linear(8, 3), nn.ReLU()))


def test_any_module_runs_as_a_plain_model_and_keeps_its_weights() -> None:
    net = nn.Sequential(nn.Linear(4, 3))
    model = as_split_model(net, name="mine", num_classes=3)
    assert isinstance(model, PlainModel) and model.num_classes == 3
    x = torch.randn(2, 4)
    assert torch.equal(model(x), net(x)) and torch.equal(model.decode(model.encode(x, -1), -1), net(x))
    twin = as_split_model(nn.Sequential(nn.Linear(4, 3)), name="mine", num_classes=3)
    twin.load_state_dict(model.state_dict())
    assert torch.equal(twin(x), net(x))


@pytest.mark.parametrize(
    ("use", "what"),
    [
        (lambda m: m.penultimate(torch.ones(1, 4)), "no penultimate features"),
        (lambda m: m.classifier, "no linear classifier"),
        (lambda m: m.check_split(0), r"no split layer 0 \(only -1, the raw input\)"),
    ],
)
def test_a_plain_model_says_how_to_give_it_a_split(use: object, what: str) -> None:
    model = as_split_model(nn.Linear(4, 3), name="mine", num_classes=3)
    with pytest.raises(
        IncompatibleModelError, match=f"model 'mine' is a plain nn.Module .*{what}.*from_encoder_head"
    ):
        use(model)  # type: ignore[operator]


def test_flea_refuses_a_plain_model_before_the_run_starts() -> None:
    flea = registry.get("method", "flea")()
    with pytest.raises(
        IncompatibleModelError, match=r"^method\.split_layer: model 'mine' is a plain nn\.Module"
    ):
        flea.check(as_split_model(nn.Linear(4, 3), name="mine", num_classes=3), RUN)
    flea.check(SplitModel.from_encoder_head(*_parts()), RUN)  # a split model passes


def test_a_builder_that_returns_no_module_is_refused() -> None:
    with pytest.raises(
        PluginError, match=r"model 'x' \(module '.*'\) returned str, expected a torch\.nn\.Module"
    ):
        as_split_model(
            "net", name="x", num_classes=3, builder=test_a_builder_that_returns_no_module_is_refused
        )
