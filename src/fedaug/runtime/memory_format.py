"""Channels-last memory format for conv models (``engine.channels_last``), used only where measured faster.

``torch.channels_last`` stores 4-D conv weights (and hence activations) as NHWC, which oneDNN's CPU
convolutions, batch norm and max-pooling often handle faster (benchmarks/step_variants.py,
studies/speed/README.md: evaluation 1.5-2.6x faster for HARNet and the BN CNN, a training step faster
for the BN CNN). Only the model is converted; inputs stay NCHW (the convolution follows the weight's format).
Evaluation outputs are as accurate as in the default format (checked against float64). Training is not always:
for HARNet, train-mode batch norm in channels-last puts the logits ~3e-4 off the float64 result (the default
format: ~1e-6) and the gradients of the first block ~0.5% off, so HARNet should not train channels-last; the
BN CNN trains to float rounding.

Modes: ``none``; ``eval`` (the evaluation workspace only: training, and so the run's trajectory, is
untouched); ``all`` (every workspace, training included; only for models checked to train accurately in it,
such as the BN CNNs); ``auto`` (default): ``eval`` for the models in :data:`MEASURED_FASTER_EVAL`,
``none`` for every other model (unmeasured ones are left alone).
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from fedaug.errors import ConfigError

M = TypeVar("M", bound=nn.Module)

CHANNELS_LAST_MODES = ("auto", "none", "eval", "all")
"""``none`` rather than ``off``: YAML reads a bare ``off`` as the boolean false."""
MEASURED_FASTER_EVAL = frozenset({"harnet", "bn_cnn_mnist", "bn_cnn_cifar"})
"""Models whose evaluation was measured faster in channels-last (bn_cnn_cifar: same layer types)."""


def resolve_channels_last(mode: str, model_name: str) -> str:
    """``auto`` resolved for ``model_name``: ``none``, ``eval`` or ``all``."""
    if mode not in CHANNELS_LAST_MODES:
        raise ConfigError(
            f"engine.channels_last must be one of {', '.join(CHANNELS_LAST_MODES)}, got {mode!r}"
        )
    if mode == "auto":
        return "eval" if model_name in MEASURED_FASTER_EVAL else "none"
    return mode


def apply_channels_last(model: M, mode: str, workspace: str) -> M:
    """``model``, converted in place to channels-last if the resolved ``mode`` covers ``workspace``."""
    if mode == "all" or (mode == "eval" and workspace == "eval"):
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model
