"""Numeric precision of local training and evaluation: float32 (default) or opt-in bfloat16 autocast.

``bf16`` runs the forward pass (and the method's loss, which calls the model) under
``torch.autocast(<the model's device type>, dtype=torch.bfloat16)`` (``cpu`` or ``cuda``): convolutions and
matrix products run in bfloat16 (AVX-512 BF16 / AMX on recent Xeons, tensor cores on a GPU), while the
master weights, gradients and optimizer state stay float32 (autocast casts copies of the weights per op).
Two guards keep the objective in float32:

* the logits are cast back to float32 by a forward hook on the model's ``classifier``, so softmax,
  log-softmax, KL and cross-entropy on logits run in float32 for every method (FedAvg, FLea's mixed loss,
  distillation terms);
* the loss is cast to float32 before ``backward`` (CPU autocast already runs cross-entropy, NLL and KL in
  float32).

Intermediate features (e.g. the ones FLea decorrelates or shares) are bfloat16 inside the context.
``float32`` enters no context and registers no hook: results are bit-identical to a build without this module.

:func:`flush_denormals` (``engine.flush_denormals``) is the other numeric switch: subnormal floats (below
1.2e-38) become zero, which x86 CPUs otherwise compute in slow microcode.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from fedaug.errors import ConfigError
from fedaug.runtime.choices import PRECISIONS as PRECISIONS


def check_precision(precision: str) -> str:
    """Returns ``precision`` if it is in :data:`PRECISIONS`, else raises ConfigError naming the choices."""
    if precision not in PRECISIONS:
        raise ConfigError(f"unknown precision {precision!r}; valid choices: {', '.join(PRECISIONS)}")
    return precision


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX-512 BF16 / AMX), as oneDNN reports it.

    Without it (e.g. AVX2-only CPUs) autocast emulates bfloat16 and runs far slower than float32.
    """
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def bf16_warning(precision: str, device: torch.device | None = None) -> str | None:
    """A warning for ``bf16`` on a CPU without native bfloat16, else None (GPUs: never)."""
    if precision != "bf16" or (device is not None and device.type != "cpu") or native_bf16():
        return None
    return (
        f"engine.precision=bf16 on a CPU without native bfloat16 ({torch.backends.cpu.get_cpu_capability()}, "
        "no AVX-512 BF16/AMX): autocast emulates it and is usually much slower than float32 here"
    )


def _float_output(module: nn.Module, inputs: Any, output: torch.Tensor) -> torch.Tensor:
    del module, inputs
    return output.float()


def _device_type(model: nn.Module) -> str:
    """``cpu`` or ``cuda``: where ``model``'s weights are (``cpu`` for a model without any)."""
    param = next(iter(model.parameters()), None)
    return "cpu" if param is None else param.device.type


@contextmanager
def autocast(model: nn.Module, precision: str) -> Iterator[None]:
    """Runs the body in ``precision``; for ``bf16``, with float32 logits from ``model``'s classifier."""
    if check_precision(precision) == "float32":
        yield
        return
    head = getattr(model, "classifier", None)
    handle = head.register_forward_hook(_float_output) if isinstance(head, nn.Module) else None
    try:
        with torch.autocast(_device_type(model), dtype=torch.bfloat16):
            yield
    finally:
        if handle is not None:
            handle.remove()


@contextmanager
def flush_denormals(enabled: bool) -> Iterator[None]:
    """Runs the body with subnormal floats flushed to zero (``torch.set_flush_denormal``) when ``enabled``.

    Why: a model that is very confident on its inputs (FedGen's generated samples: logit gaps of hundreds)
    has softmax probabilities below 1.2e-38, and the backward pass carries them through every layer as
    subnormals (about a fifth of HARNet's activation gradients on a late FedGen round), which x86 CPUs
    handle in microcode: 4-5x slower steps (``benchmarks/fedgen_denormals.py``). Flushing changes only those
    values, to zero. The setting belongs to the calling thread (and threads started inside the body); it is
    switched off again on exit. ``enabled=False`` (the default of ``engine.flush_denormals``) touches nothing.
    No effect on CPUs without the SSE3 flush/DAZ flags (``torch.set_flush_denormal`` returns False there).
    """
    if not enabled:
        yield
        return
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)
