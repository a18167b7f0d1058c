"""AugMix on tensors: every op keeps shape and range and matches PIL; the draws; severity 0; normalisation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image, ImageOps

from fedaug.augment import OPS, AugMix
from fedaug.augment.ops import apply_op
from fedaug.errors import ConfigError

MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


def quantised_images(num: int, channels: int, height: int, width: int, seed: int = 0) -> torch.Tensor:
    """Random 8-bit images as floats in [0, 1]."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (num, channels, height, width), generator=gen).float() / 255


def pil_reference(image: torch.Tensor, fn) -> torch.Tensor:  # type: ignore[no-untyped-def]
    """``fn`` applied by PIL to a one-channel image ``[1, H, W]`` in [0, 1]; result in [0, 1]."""
    array = (image[0].numpy() * 255).round().astype(np.uint8)
    return torch.tensor(np.asarray(fn(Image.fromarray(array))), dtype=torch.float32)[None] / 255


def pil_affine(image: Image.Image, data: tuple[float, ...]) -> Image.Image:
    return image.transform(image.size, Image.AFFINE, data, resample=Image.BILINEAR)


def op_code(name: str, num: int) -> torch.Tensor:
    return torch.full((num,), OPS.index(name))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("shape", [(6, 1, 28, 28), (4, 3, 16, 20)])
def test_every_op_keeps_shape_and_range(name: str, shape: tuple[int, ...]) -> None:
    # Prepare: images in [0.2, 0.7] (so autocontrast has work to do), strong parameters of both signs.
    x = quantised_images(*shape) * 0.5 + 0.2
    strong = {"posterize": 1.0, "solarize": 0.0, "rotate": 30.0, "shear_x": 0.3, "shear_y": -0.3}
    param = torch.full((shape[0],), strong.get(name, 3.0))
    param[::2] *= -1 if name not in ("posterize", "solarize") else 1
    # Execute
    out = apply_op(x, op_code(name, shape[0]), param)
    # Assert
    assert out.shape == x.shape
    assert out.min() >= 0 and out.max() <= 1
    assert not torch.equal(out, x)


@pytest.mark.parametrize(
    ("name", "param", "pil_fn"),
    [
        ("equalize", 0, ImageOps.equalize),
        ("posterize", 3, lambda im: ImageOps.posterize(im, 3)),
        ("posterize", 1, lambda im: ImageOps.posterize(im, 1)),
        ("solarize", 100, lambda im: ImageOps.solarize(im, 100)),
        ("translate_x", 3, lambda im: im.transform(im.size, Image.AFFINE, (1, 0, 3, 0, 1, 0))),
        ("translate_y", -4, lambda im: im.transform(im.size, Image.AFFINE, (1, 0, 0, 0, 1, -4))),
    ],
)
def test_exact_ops_match_pil(name: str, param: float, pil_fn) -> None:  # type: ignore[no-untyped-def]
    x = quantised_images(3, 1, 28, 28)
    x[0, :, :10] = 0  # a skewed histogram for equalize
    out = apply_op(x, op_code(name, 3), torch.full((3,), float(param)))
    for i in range(3):
        torch.testing.assert_close(out[i], pil_reference(x[i], pil_fn), atol=1e-5, rtol=0)


def test_autocontrast_matches_pil_within_one_level() -> None:
    x = quantised_images(3, 1, 28, 28) * 0.5 + 0.2  # a narrow range to stretch
    x = (x * 255).round() / 255
    out = apply_op(x, op_code("autocontrast", 3), torch.zeros(3))
    for i in range(3):
        assert (out[i] - pil_reference(x[i], ImageOps.autocontrast)).abs().max() <= 1 / 255 + 1e-6
    assert out.amin(dim=(1, 2, 3)).eq(0).all() and out.amax(dim=(1, 2, 3)).eq(1).all()


@pytest.mark.parametrize(
    ("name", "param", "pil_fn"),
    [
        ("rotate", 17.0, lambda im: im.rotate(17.0, resample=Image.BILINEAR)),
        ("rotate", -25.0, lambda im: im.rotate(-25.0, resample=Image.BILINEAR)),
        (
            "shear_x",
            0.2,
            lambda im: im.transform(im.size, Image.AFFINE, (1, 0.2, 0, 0, 1, 0), Image.BILINEAR),
        ),
        (
            "shear_y",
            -0.2,
            lambda im: im.transform(im.size, Image.AFFINE, (1, 0, 0, -0.2, 1, 0), Image.BILINEAR),
        ),
    ],
)
def test_bilinear_ops_match_pil_inside_the_image(name: str, param: float, pil_fn) -> None:  # type: ignore[no-untyped-def]
    # Prepare: content in the centre and a black frame, so PIL's border handling (it differs) plays no role.
    x = torch.zeros(2, 1, 28, 28)
    x[:, :, 9:19, 9:19] = quantised_images(2, 1, 10, 10)
    out = apply_op(x, op_code(name, 2), torch.full((2,), param))
    for i in range(2):
        diff = (out[i] - pil_reference(x[i], pil_fn)).abs()
        assert diff.max() <= 3 / 255, diff.max()  # PIL interpolates on 8-bit values


def test_op_minus_one_is_no_op_and_ops_are_per_image() -> None:
    x = quantised_images(3, 1, 12, 12)
    out = apply_op(x, torch.tensor([-1, OPS.index("solarize"), -1]), torch.tensor([0.0, 0.0, 0.0]))
    assert torch.equal(out[0], x[0]) and torch.equal(out[2], x[2])
    torch.testing.assert_close(out[1], 1 - x[1])  # threshold 0 inverts everything


def test_severity_zero_is_the_identity_and_draws_nothing() -> None:
    x = torch.randn(5, 1, 28, 28)
    gen = torch.Generator().manual_seed(3)
    views = AugMix(severity=0, mean=MNIST_MEAN, std=MNIST_STD).views(x, gen)
    assert views.shape == (2, 5, 1, 28, 28)
    assert torch.equal(views[0], x) and torch.equal(views[1], x)
    assert torch.equal(gen.get_state(), torch.Generator().manual_seed(3).get_state())


def test_views_are_normalised_deterministic_and_per_image() -> None:
    # Prepare: the same MNIST-like image twice (normalised).
    image = torch.zeros(1, 1, 28, 28)
    image[..., 6:22, 12:16] = 1.0
    x = ((image.repeat(4, 1, 1, 1)) - MNIST_MEAN[0]) / MNIST_STD[0]
    augmix = AugMix(severity=10, mean=MNIST_MEAN, std=MNIST_STD)
    # Execute
    first = augmix.views(x, torch.Generator().manual_seed(0))
    again = augmix.views(x, torch.Generator().manual_seed(0))
    # Assert: same seed, same views; in [0, 1] after de-normalising; each image and view has its own chains.
    assert torch.equal(first, again)
    unit = first * MNIST_STD[0] + MNIST_MEAN[0]
    assert unit.min() >= -1e-6 and unit.max() <= 1 + 1e-6
    flat = first.flatten(0, 1).flatten(1)
    assert torch.cdist(flat, flat).add(torch.eye(8)).min() > 0  # all 8 views differ


def test_draws_follow_the_reference_distributions() -> None:
    draw = AugMix(severity=3).sample(2, 2000, 32, 32, torch.Generator().manual_seed(0))
    depth = (draw.ops >= 0).sum(-1)
    assert depth.min() == 1 and depth.max() == 3
    assert set(depth.unique().tolist()) == {1, 2, 3}
    assert (draw.ops[..., 0] >= 0).all()  # a chain never skips its first op
    torch.testing.assert_close(draw.chain_weights.sum(-1), torch.ones(2, 2000))
    assert 0.45 < draw.blend.mean() < 0.55 and draw.blend.min() >= 0 and draw.blend.max() <= 1
    rotate = draw.params[draw.ops == OPS.index("rotate")]
    assert rotate.abs().max() <= 9 and (rotate < 0).any() and (rotate > 0).any()  # floor(3 * 30 / 10)
    posterize = draw.params[draw.ops == OPS.index("posterize")]
    assert set(posterize.unique().tolist()) <= {3.0, 4.0}  # 4 - floor(level * 4 / 10), level < 3


def test_apply_is_differentiable() -> None:
    x = torch.randn(3, 1, 16, 16, requires_grad=True)
    augmix = AugMix(severity=5, mean=MNIST_MEAN, std=MNIST_STD)
    draw = augmix.sample(2, 3, 16, 16, torch.Generator().manual_seed(1))
    augmix.apply(x, draw).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"severity": 11}, r"augmix severity must be a finite number in \[0, 10\], got 11"),
        ({"width": 0}, "width must be >= 1"),
        ({"depth": 4}, "depth must be -1"),
        ({"mean": (0.5,)}, "mean and std"),
        ({"mean": (0.5,), "std": (0.0,)}, "std must be > 0"),
    ],
)
def test_rejects_bad_options(options: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=message):
        AugMix(**options)


def test_rejects_non_image_batches() -> None:
    with pytest.raises(ConfigError, match=r"\[B, C, H, W\]"):
        AugMix().views(torch.zeros(4, 9), torch.Generator())
