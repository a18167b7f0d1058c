"""AugMix draws on the CPU and transforms images where they are (checked on the meta device).

The draws come from a CPU generator, so a batch gets the same operations on every device; the pixel work
must then run on the images' device, which the meta device checks without a GPU.
"""

from __future__ import annotations

import torch

from fedaug.augment import OPS, AugMix
from fedaug.augment.ops import apply_op
from fedaug.runtime.seeding import torch_generator

META = torch.device("meta")


def test_sample_draws_the_same_numbers_as_before() -> None:
    # Pinned values: the draws must not change when the views run on another device.
    draw = AugMix(severity=3).sample(1, 2, 8, 8, torch_generator(0, "augmix"))
    assert draw.ops.device.type == "cpu"
    assert draw.ops.tolist() == [
        [[[4, -1, -1], [8, -1, -1], [5, 3, 6]], [[7, 8, -1], [0, 3, 8], [0, -1, -1]]]
    ]
    assert draw.params[0, 0, 0, 0].item() == 209.0
    assert draw.params[0, 1, 1, 1].item() == -8.0
    expected_weights = [0.04571593180298805, 0.6661496758460999, 0.2881344258785248]
    assert torch.equal(draw.chain_weights[0, 0], torch.tensor(expected_weights))
    assert torch.equal(draw.blend, torch.tensor([[0.9718030691146851, 0.5050801634788513]]))


def test_views_of_device_images_are_on_that_device_and_draw_as_on_the_cpu() -> None:
    augmix = AugMix(severity=10, mean=(0.5, 0.4, 0.3), std=(0.2, 0.3, 0.25))
    on_meta, on_cpu = torch_generator(0, "views"), torch_generator(0, "views")
    views = augmix.views(torch.empty(4, 3, 8, 8, device=META), on_meta, num_views=2)
    assert views.device == META and views.shape == (2, 4, 3, 8, 8)
    augmix.views(torch.rand(4, 3, 8, 8), on_cpu, num_views=2)
    assert torch.equal(on_meta.get_state(), on_cpu.get_state())  # the same draws were consumed


def test_apply_op_groups_on_the_cpu_and_transforms_on_the_images_device() -> None:
    ops = torch.arange(len(OPS))  # every operation once, codes and parameters on the CPU
    params = torch.tensor([0.0, 0.0, 4.0, 30.0, 128.0, 0.3, -0.3, 2.0, -2.0])
    x = torch.empty(len(OPS), 3, 8, 8, device=META, requires_grad=True)
    out = apply_op(x, ops, params)
    assert out.device == META and out.shape == x.shape
    out.sum().backward()  # type: ignore[no-untyped-call]
    assert x.grad is not None and x.grad.device == META
