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
such as the BN CNNs); ``auto`` (default): ``all`` on a CPU for the models in
:data:`MEASURED_FASTER_TRAIN_CPU`, else ``eval`` for the models in :data:`MEASURED_FASTER_EVAL`, ``none``
for every other model (unmeasured ones are left alone).

Training channels-last is not bit-identical to the default format: for ``bn_cnn_cifar`` 50 Adam steps from
the same start land 1.7% (of the update's norm) from the contiguous weights, as far from float64 as the
contiguous float32 ones are (1.4%): float rounding, which train-mode batch norm amplifies
(docs/guide/cpu-campaign.md, "Channels-last and the evaluation batch size").
"""

from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from fedaug.errors import ConfigError
from fedaug.runtime.choices import CHANNELS_LAST_MODES as CHANNELS_LAST_MODES

M = TypeVar("M", bound=nn.Module)

MEASURED_FASTER_EVAL_MODELS = ("harnet", "bn_cnn_mnist", "bn_cnn_cifar")
"""Models whose evaluation was measured faster in channels-last (benchmarks/results/channels_last.json,
channels_last_cifar_cpu_batch32.json)."""
MEASURED_FASTER_TRAIN_CPU_MODELS = ("bn_cnn_cifar",)
"""Models whose training step on a CPU was measured faster in channels-last, and checked to train to float
rounding in it (benchmarks/results/channels_last_cifar_cpu_batch32.json)."""
MEASURED_FASTER_EVAL = frozenset(MEASURED_FASTER_EVAL_MODELS)
MEASURED_FASTER_TRAIN_CPU = frozenset(MEASURED_FASTER_TRAIN_CPU_MODELS)


def resolve_channels_last(mode: str, model_name: str, device_type: str = "cpu") -> str:
    """``auto`` resolved for ``model_name`` on a device of ``device_type`` (``cpu``, ``cuda``): ``none``,
    ``eval`` or ``all``."""
    if mode not in CHANNELS_LAST_MODES:
        raise ConfigError(
            f"engine.channels_last must be one of {', '.join(CHANNELS_LAST_MODES)}, got {mode!r}"
        )
    if mode == "auto":
        if device_type == "cpu" and model_name in MEASURED_FASTER_TRAIN_CPU:
            return "all"
        return "eval" if model_name in MEASURED_FASTER_EVAL else "none"
    return mode


def apply_channels_last(model: M, mode: str, workspace: str) -> M:
    """``model``, converted in place to channels-last if the resolved ``mode`` covers ``workspace``."""
    if mode == "all" or (mode == "eval" and workspace == "eval"):
        model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    return model
