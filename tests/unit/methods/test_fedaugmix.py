"""Fed-AugMix: JS by hand, the loss-scaling switch, lambda = 0 without augmentation equals the base method."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from fedaug import registry
from fedaug.api import Method
from fedaug.engine.simulation import Simulation
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.methods.fedaugmix import (
    LOSS_BASED_AUGMIX,
    AugMixJSMethod,
    FedAugMix,
    FedAugMixConfig,
    FedProxAugMix,
    FedProxAugMixConfig,
    scheduled_lambda,
)
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedprox import FedProx, FedProxConfig
from fedaug.methods.parts.losses import jensen_shannon
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.types import StateDict
from tests.conftest import make_spec
from tests.helpers import IMAGE
from tests.unit.methods.helpers import client_context, initial_state, method_from_yaml, mlp_fn, payload


def image_sim(run_dir: Path, method: Method) -> StateDict:
    """The conftest blob simulation with inputs shaped as images; returns the final global weights."""
    spec = make_spec(run_dir, method=method, rounds=2, per_round=2)
    spec = dataclasses.replace(
        spec,
        train_x=spec.train_x.view(-1, *IMAGE),
        test_x=spec.test_x.view(-1, *IMAGE),
        run=dataclasses.replace(spec.run, input_shape=IMAGE, input_mean=(0.5,), input_std=(2.0,)),
        model_fn=image_mlp,
    )
    Simulation(spec).run()
    state: StateDict = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)["state"]["model_state"]
    return state


def image_mlp() -> SplitModel:
    return build_model("mlp", num_classes=3, input_shape=IMAGE)


def test_js_of_identical_views_is_zero_and_matches_hand_value() -> None:
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.5, 0.5, 0.5]])
    assert jensen_shannon(logits, logits, logits).item() == pytest.approx(0.0, abs=1e-7)
    # Two one-sample distributions p = (1/2, 1/2), q = (1, 0) up to softmax saturation: M = (3/4, 1/4);
    # JS = (KL(p||M) + KL(q||M)) / 2 = (0.5 ln(2/3) + 0.5 ln 2 + ln(4/3)) / 2.
    p, q = torch.tensor([[0.0, 0.0]]), torch.tensor([[50.0, 0.0]])
    expected = (0.5 * math.log(2 / 3) + 0.5 * math.log(2) + math.log(4 / 3)) / 2
    assert jensen_shannon(p, q).item() == pytest.approx(expected, rel=1e-5)


def test_js_mixture_is_clamped() -> None:
    # Both distributions put ~0 mass on class 1: the unclamped log(M) there would be -inf-like.
    a, b = torch.tensor([[0.0, -200.0]]), torch.tensor([[0.0, -300.0]])
    assert torch.isfinite(jensen_shannon(a, b))


def test_js_gradient_is_finite_when_softmax_underflows() -> None:
    # A confident model's softmax is exactly 0 for logit gaps above ~104 in float32; the gradient of
    # p log p there was NaN and killed a 100-round Fed-AugMix run (round 68). Second row: saturated
    # original, undecided views, so the gradient must also be non-zero.
    z = torch.tensor([[0.0, 120.0, 3.0], [0.0, 200.0, -50.0]], requires_grad=True)
    views = torch.tensor([[0.0, 110.0, 2.0], [1.0, 1.0, 1.0]], requires_grad=True)
    jensen_shannon(z, views[:1].repeat(2, 1), views).backward()
    assert z.grad is not None and views.grad is not None
    assert torch.isfinite(z.grad).all() and torch.isfinite(views.grad).all()
    assert views.grad[1].abs().sum() > 1e-3


def test_js_gradient_matches_the_textbook_formula_in_float64() -> None:
    # KL(p || M) = sum p (log p - log M), differentiated by autograd in float64 from the probabilities.
    torch.manual_seed(0)
    logits = [torch.randn(4, 5, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    jensen_shannon(*logits).backward()
    ours = [z.grad.clone() for z in logits if z.grad is not None]
    reference = [z.detach().clone().requires_grad_(True) for z in logits]
    probs = [F.softmax(z, dim=1) for z in reference]
    mixture = torch.stack(probs).mean(0)
    value = torch.stack([(p * (p.log() - mixture.log())).sum(1).mean() for p in probs]).mean()
    value.backward()
    for mine, ref in zip(ours, reference, strict=True):
        assert ref.grad is not None
        torch.testing.assert_close(mine, ref.grad, rtol=1e-10, atol=1e-12)


def test_loss_scaling_switches_at_kappa_js() -> None:
    config = FedAugMixConfig(js_lambda=12.0, scaled_lambda=100.0, scaling_kappa=50.0)
    ce = torch.tensor(2.3)
    # 50 * 0.01 = 0.5 < 2.3: scaled; 50 * 0.1 = 5 > 2.3: the base lambda; equality is not "greater".
    assert scheduled_lambda(ce, torch.tensor(0.01), config).item() == 100.0
    assert scheduled_lambda(ce, torch.tensor(0.1), config).item() == 12.0
    assert scheduled_lambda(ce, torch.tensor(2.3 / 50), config).item() in (12.0, 100.0)
    assert scheduled_lambda(torch.tensor(5.0), torch.tensor(0.1), config).item() == 12.0
    off = dataclasses.replace(config, loss_scaling=False)
    assert scheduled_lambda(ce, torch.tensor(0.01), off).item() == 12.0


def test_loss_is_base_plus_lambda_js_by_hand() -> None:
    # Prepare: a linear model on 2x4 images, a batch of 2 originals and their 4 views.
    x = torch.randn(6, *IMAGE, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 2, 0, 2, 0, 2])
    ctx = client_context(x[:2].flatten(1), y[:2], model_fn=image_mlp)
    method = FedProxAugMix(FedProxAugMixConfig(proximal_mu=0.5, js_lambda=3.0, loss_scaling=False))
    anchors = {k: v + 0.1 for k, v in initial_state(image_mlp).items()}
    ctx.model.load_state_dict(initial_state(image_mlp))
    # Execute
    out = method.loss_fn(payload(anchors), ctx)(ctx.model, x, y)
    # Assert: CE(originals) + mu/2 * ||w - a||^2 + 3 * JS(originals, view 1, view 2).
    logits = ctx.model(x)
    js = jensen_shannon(logits[:2], logits[2:4], logits[4:])
    num_params = sum(p.numel() for p in ctx.model.parameters())
    expected = F.cross_entropy(logits[:2], y[:2]) + 0.25 * 0.01 * num_params + 3.0 * js
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.logs["js"].item() == pytest.approx(js.item(), rel=1e-5)
    assert out.logs["js_lambda"].item() == 3.0
    assert set(out.logs) == {"ce", "prox", "js", "js_lambda", "ce_orig"}


@pytest.mark.parametrize(
    ("augmix", "base"),
    [
        (FedAugMix(FedAugMixConfig(severity=0, js_lambda=0, loss_scaling=False)), FedAvg()),
        (
            FedProxAugMix(FedProxAugMixConfig(proximal_mu=0.1, severity=0, js_lambda=0, loss_scaling=False)),
            FedProx(FedProxConfig(proximal_mu=0.1)),
        ),
    ],
)
def test_lambda_zero_without_augmentation_equals_the_base_method(
    tmp_path: Path, augmix: Method, base: Method
) -> None:
    base_state = image_sim(tmp_path / "base", base)
    state = image_sim(tmp_path / "augmix", augmix)
    assert all(torch.equal(state[key], base_state[key]) for key in base_state)


def test_augmentation_changes_training_deterministically(tmp_path: Path) -> None:
    method = FedAugMix(FedAugMixConfig(severity=3))
    first = image_sim(tmp_path / "a", method)
    again = image_sim(tmp_path / "b", method)
    plain = image_sim(tmp_path / "c", FedAvg())
    assert all(torch.equal(first[key], again[key]) for key in first)
    assert any(not torch.equal(first[key], plain[key]) for key in first)


def test_rejects_non_image_inputs() -> None:
    ctx = client_context(torch.randn(4, 8), torch.tensor([0, 1, 2, 0]))
    with pytest.raises(IncompatibleModelError, match=r"image inputs \[C, H, W\].*\(8,\)"):
        FedAugMix().batch_transform(payload(initial_state(mlp_fn())), ctx)
    # a UCI-HAR window has three dimensions but is a signal: refused by the dataset's modality
    har = client_context(torch.randn(4, 1, 128, 3), torch.tensor([0, 1, 2, 0]))
    har = dataclasses.replace(har, run=dataclasses.replace(har.run, input_modality="signal"))
    with pytest.raises(IncompatibleModelError, match=r"are signal of shape \(1, 128, 3\)"):
        FedAugMix().batch_transform(payload(initial_state(mlp_fn())), har)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"js_lambda": -1.0}, "js_lambda must be"),
        ({"scaling_kappa": float("nan")}, "scaling_kappa must be"),
        ({"severity": 12}, r"augmix severity must be a finite number in \[0, 10\], got 12"),
    ],
)
def test_config_rejects_bad_values(options: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        FedAugMixConfig(**options)
    with pytest.raises(ConfigError, match=message):
        FedProxAugMixConfig(**options)


@pytest.mark.parametrize(("name", "cls"), [("fedaugmix", FedAugMix), ("fedprox_augmix", FedProxAugMix)])
def test_yaml_holds_the_defaults(name: str, cls: type) -> None:
    method = method_from_yaml(name)
    assert isinstance(method, cls)
    assert method.config == cls.config_cls()


# Every <base>_augmix variant beside fedprox_augmix, with a non-default option of its base method (so the test
# sees that the base's option reaches the base's loss) and the log keys of the base's loss.
VARIANTS = {
    "feddecorr_augmix": ({"decorr_beta": 0.5}, {"ce", "decorr"}),
    "fedlc_augmix": ({"calibration_tau": 0.5}, {"ce"}),
    "fedntd_augmix": ({"ntd_beta": 0.5}, {"ce", "ntd"}),
    "fedrs_augmix": ({"restricted_alpha": 0.3}, {"ce"}),
    "moon_augmix": ({"contrastive_mu": 0.5}, {"ce", "contrastive"}),
}


def test_every_loss_based_method_has_an_augmix_variant() -> None:
    assert sorted(cls.name for cls in LOSS_BASED_AUGMIX) == sorted(VARIANTS)
    for cls in (*LOSS_BASED_AUGMIX, FedProxAugMix):
        assert registry.get("method", cls.name) is cls
        assert issubclass(cls, AugMixJSMethod)
        base = registry.get("method", cls.name.removesuffix("_augmix"))
        assert cls.__mro__[1:3] == (AugMixJSMethod, base)
        assert set(dataclasses.asdict(base.config_cls())) < set(dataclasses.asdict(cls.config_cls()))


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_without_augmentation_equals_its_base_method(tmp_path: Path, name: str) -> None:
    options, _ = VARIANTS[name]
    cls = registry.get("method", name)
    base = registry.get("method", name.removesuffix("_augmix"))
    augmix = cls(cls.config_cls(**options, severity=0, js_lambda=0, loss_scaling=False))
    base_state = image_sim(tmp_path / "base", base(base.config_cls(**options)))
    state = image_sim(tmp_path / "augmix", augmix)
    default_state = image_sim(tmp_path / "default", base())
    assert all(torch.equal(state[key], base_state[key]) for key in base_state)
    assert any(not torch.equal(base_state[key], default_state[key]) for key in base_state)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_loss_is_the_base_loss_plus_lambda_js(name: str) -> None:
    options, base_logs = VARIANTS[name]
    x = torch.randn(6, *IMAGE, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 2, 0, 2, 0, 2])
    ctx = client_context(x[:2].flatten(1), y[:2], model_fn=image_mlp)
    ctx.model.load_state_dict(initial_state(image_mlp))
    cls = registry.get("method", name)
    base = registry.get("method", name.removesuffix("_augmix"))
    state = {k: v + 0.1 for k, v in initial_state(image_mlp).items()}
    out = cls(cls.config_cls(**options, js_lambda=3.0, loss_scaling=False)).loss_fn(payload(state), ctx)(
        ctx.model, x, y
    )
    base_out = base(base.config_cls(**options)).loss_fn(payload(state), ctx)(ctx.model, x[:2], y[:2])
    logits = ctx.model(x)
    js = jensen_shannon(logits[:2], logits[2:4], logits[4:])
    assert out.loss.item() == pytest.approx(base_out.loss.item() + 3.0 * js.item(), rel=1e-5)
    assert set(out.logs) == base_logs | {"js", "js_lambda", "ce_orig"}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_config_validates_both_parts(name: str) -> None:
    cls = registry.get("method", name)
    base_option = next(iter(VARIANTS[name][0]))
    with pytest.raises(ConfigError, match=base_option):
        cls.config_cls(**{base_option: -1.0})
    with pytest.raises(ConfigError, match="js_lambda must be"):
        cls.config_cls(js_lambda=-1.0)


def test_every_variant_is_a_module_level_class_with_its_explicit_config() -> None:
    # Greppable definitions: `class FedNTDAugMix` and `class FedNTDAugMixConfig` in fedaugmix.py, each
    # registered under its name, and the config's fields are the base's first, then the AugMix options.
    from fedaug.methods import fedaugmix

    for cls in (*LOSS_BASED_AUGMIX, FedProxAugMix):
        assert getattr(fedaugmix, cls.__name__) is cls and cls.__module__ == fedaugmix.__name__
        config = cls.config_cls
        assert getattr(fedaugmix, config.__name__) is config and config.__name__ == cls.__name__ + "Config"
        base = registry.get("method", cls.name.removesuffix("_augmix")).config_cls
        assert config.__mro__[1:3] == (fedaugmix.AugMixJSConfig, base)
        names = [f.name for f in dataclasses.fields(config)]
        base_names = [f.name for f in dataclasses.fields(base)]
        assert names == base_names + [f.name for f in dataclasses.fields(fedaugmix.AugMixJSConfig)]
