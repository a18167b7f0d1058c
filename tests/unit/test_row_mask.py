"""fedaug.training.row_mask: outside a mask the helpers are Tensor.mean and F.cross_entropy bit for bit;
inside, the
losses built on them (FLea's distance correlations and KL, soft-label CE) computed on a padded batch equal
their values on the real rows alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from fedaug.methods.parts.losses import decorrelation_loss as feddecorr_loss
from fedaug.methods.parts.losses import kl_divergence, model_contrastive_loss, soft_cross_entropy
from fedaug.privacy.dcor import decorrelation_loss
from fedaug.training.row_mask import batch_mean, masked_rows, mean_cross_entropy, real_rows, row_mask


def _padded(real: Tensor, pad: int) -> tuple[Tensor, Tensor]:
    """``real`` followed by ``pad`` rows of noise (what padded rows hold after a forward), and the mask."""
    noise = torch.randn(pad, *real.shape[1:], dtype=real.dtype, generator=torch.Generator().manual_seed(pad))
    mask = torch.cat([torch.ones(real.shape[0]), torch.zeros(pad)]).to(real.dtype)
    return torch.cat([real, 100 * noise]), mask


@settings(max_examples=25, deadline=None)
@given(real=st.integers(2, 7), pad=st.integers(0, 5), form=st.sampled_from(["dcor_squared", "dcor", "trace"]))
def test_losses_on_a_padded_batch_equal_the_real_rows(real: int, pad: int, form: str) -> None:
    gen = torch.Generator().manual_seed(real * 10 + pad)
    x, f = (torch.randn(real, 5, dtype=torch.float64, generator=gen) for _ in range(2))
    logits, other = (torch.randn(real, 4, dtype=torch.float64, generator=gen) for _ in range(2))
    y = torch.randint(0, 4, (real,), generator=gen)
    probs = torch.softmax(other, dim=1)

    def losses(x: Tensor, f: Tensor, logits: Tensor, other: Tensor, y: Tensor, probs: Tensor) -> list[Tensor]:
        return [
            decorrelation_loss(x, f, form=form),
            kl_divergence(logits, other),
            soft_cross_entropy(logits, probs),
            mean_cross_entropy(logits, y),
            model_contrastive_loss(f, x, f.flip(1), 0.5),
            feddecorr_loss(f),  # N < d and N >= d take different branches
            feddecorr_loss(f[:, :2]),
        ]

    expected = losses(x, f, logits, other, y, probs)
    padded = [_padded(t, pad)[0] for t in (x, f, logits, other)]
    _, mask = _padded(x, pad)
    y_pad = torch.cat([y, torch.zeros(pad, dtype=torch.long)])
    probs_pad = torch.cat([probs, torch.full((pad, 4), 0.25, dtype=torch.float64)])
    with masked_rows(mask):
        values = losses(*padded, y_pad, probs_pad)
    for value, want in zip(values, expected, strict=True):
        torch.testing.assert_close(value, want, rtol=1e-12, atol=1e-12)


def test_outside_a_mask_the_helpers_are_the_plain_reductions_bit_for_bit() -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(6, 6, generator=gen)
    logits, y = torch.randn(6, 3, generator=gen), torch.randint(0, 3, (6,), generator=gen)
    assert row_mask() is None
    assert torch.equal(batch_mean(a), a.mean())
    assert torch.equal(batch_mean(a, 0, keepdim=True), a.mean(dim=0, keepdim=True))
    assert torch.equal(mean_cross_entropy(logits, y), F.cross_entropy(logits, y))
    assert real_rows(a) is a


def test_a_mean_over_rows_of_another_count_and_nested_masks_are_refused() -> None:
    with masked_rows(torch.ones(4)):
        with pytest.raises(ValueError, match="a batch mean over 5 rows with a row mask of 4"):
            batch_mean(torch.ones(5))
        with pytest.raises(RuntimeError, match="do not nest"), masked_rows(torch.ones(4)):
            pass
    with masked_rows(torch.zeros(3)):  # a client without a batch: every mean is 0, not NaN
        assert batch_mean(torch.arange(3.0)).item() == 0.0
    assert row_mask() is None
