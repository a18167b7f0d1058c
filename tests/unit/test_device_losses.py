"""Loss terms and distance correlation compute on their inputs' device (checked on the meta device).

A tensor created on the CPU and combined with the inputs raises on the meta device exactly as it would on a
GPU ("Tensor on device cpu is not on the expected device meta"), so a CPU-only machine catches it.
"""

from __future__ import annotations

import pytest
import torch

from fedaug.methods.parts import losses
from fedaug.models import build_model
from fedaug.privacy import dcor

META = torch.device("meta")


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(*shape, device=META, requires_grad=True)


def test_loss_terms_are_on_the_inputs_device() -> None:
    logits, other = _meta(5, 4), _meta(5, 4)
    targets = torch.empty(5, 4, device=META)
    counts = torch.empty(4, dtype=torch.long, device=META)
    z, z_glob, z_prev = _meta(5, 6), _meta(5, 6), _meta(5, 6)
    values = {
        "soft_cross_entropy": losses.soft_cross_entropy(logits, targets),
        "kl_divergence": losses.kl_divergence(logits, other),
        "jensen_shannon": losses.jensen_shannon(logits, other, other),
        "model_contrastive": losses.model_contrastive_loss(z, z_glob, z_prev, 0.5),
        "decorrelation": losses.decorrelation_loss(_meta(5, 6)),
        "decorrelation_n_gt_d": losses.decorrelation_loss(_meta(7, 3)),
        "decorrelation_one_sample": losses.decorrelation_loss(_meta(1, 3)),
        "calibration_shift": losses.calibration_shift(counts, 1.0, 0.5),
        "restriction_scale": losses.restriction_scale(counts, 0.5),
    }
    for name, value in values.items():
        assert value.device == META, name


def test_proximal_term_with_a_model_and_anchors_on_the_device() -> None:
    model = build_model("mlp", num_classes=3, input_shape=(8,)).to(META)
    anchors = {name: torch.empty_like(p) for name, p in model.named_parameters()}
    term = losses.proximal_term(model, anchors)
    assert term.device == META
    term.backward()  # type: ignore[no-untyped-call]
    assert all(p.grad is not None and p.grad.device == META for p in model.parameters())


@pytest.mark.parametrize("form", dcor.DECOR_FORMS)
def test_decorrelation_loss_forms_are_on_the_inputs_device(form: str) -> None:
    x, f = torch.empty(6, 1, 2, 4, device=META), _meta(6, 16)
    value = dcor.decorrelation_loss(x, f, form=form)
    assert value.device == META and value.shape == ()
    value.backward()  # type: ignore[no-untyped-call]
    assert f.grad is not None and f.grad.device == META


def test_unclamped_distance_correlation_is_on_the_inputs_device() -> None:
    value = dcor.distance_correlation_sqr(torch.empty(4, 3, device=META), torch.empty(4, 2, device=META))
    assert value.device == META
