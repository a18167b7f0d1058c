"""Image augmentations on tensors (AugMix and its AutoAugment operations)."""

from fedaug.augment.augmix import AugMix, AugMixDraw
from fedaug.augment.ops import OPS

__all__ = ["OPS", "AugMix", "AugMixDraw"]
