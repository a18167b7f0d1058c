"""The compute device of a run (``engine.device``): resolution, facts for ``env.json``, and moving state.

fedaug runs the same code on a CPU and on a CUDA GPU. The one seam is the resolved :class:`torch.device`:
the engine puts the data, the workspace models and the server state on it once, methods create their
tensors where their inputs live (``like.device``), and every random number is drawn from the run's CPU
generators (:mod:`fedaug.runtime.seeding`) and then moved, so the same config and seed sample the same
clients,
batches, Beta weights and AugMix operations on either device.

What is and is not bit-identical:

* CPU runs are bit-identical for the same thread count and kind of CPU (:mod:`fedaug.runtime.machine`).
* CUDA runs pick kernels (cuDNN convolutions, atomics in scatter/index_add backward) that may sum in another
  order from run to run; ``engine.deterministic: true`` turns on ``torch.use_deterministic_algorithms`` (and
  cuDNN's deterministic mode), after which a CUDA run, and a CUDA run killed and resumed, repeat to the last
  bit on the same GPU model and software stack.
* A CPU run and a CUDA run of the same config draw the same random numbers but round differently, so their
  curves are alike, not identical.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import fields, is_dataclass, replace
from typing import Any, TypeVar

import torch

from fedaug.errors import ConfigError
from fedaug.runtime.choices import DEVICE_CHOICES as DEVICE_CHOICES
from fedaug.runtime.choices import is_device_name

T = TypeVar("T")


class DeviceError(ConfigError):
    """A device that this machine does not have (or a malformed device name)."""


def check_device_name(name: str, *, key: str = "engine.device") -> str:
    """``name`` if it is spelled like a device (``auto``, ``cpu``, ``cuda``, ``cuda:N``), else DeviceError.

    Whether this machine has it is checked when a run starts (:func:`resolve_device`): a config may be
    written on a CPU machine for a GPU one.
    """
    if is_device_name(name):
        return name
    raise DeviceError(
        f"{key}={name!r} is not a device; valid choices: {', '.join(DEVICE_CHOICES)} "
        f"(this machine has: {', '.join(available_devices())})"
    )


def available_devices() -> list[str]:
    """The devices this machine has, e.g. ``["cpu", "cuda:0"]``."""
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return ["cpu", *(f"cuda:{i}" for i in range(count))]


def resolve_device(name: str | torch.device | None, *, key: str = "engine.device") -> torch.device:
    """The device ``name`` names on this machine; raises :class:`DeviceError` naming what is available.

    ``auto`` (and None) is ``cuda`` when :func:`torch.cuda.is_available`, else ``cpu``; ``cuda`` is the
    current CUDA device (``cuda:0`` unless ``CUDA_VISIBLE_DEVICES``/``torch.cuda.set_device`` say otherwise).
    """
    if isinstance(name, torch.device):
        name = str(name)
    text = "auto" if name is None else str(name).strip().lower()
    available = available_devices()
    if text == "auto":
        return _with_index(torch.device("cuda")) if len(available) > 1 else torch.device("cpu")
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise DeviceError(
            f"{key}={name!r} is not a device; valid choices: {', '.join(DEVICE_CHOICES)} "
            f"(this machine has: {', '.join(available)})"
        ) from None
    if device.type == "cpu" and device.index in (None, 0):
        return torch.device("cpu")
    if device.type != "cuda":
        raise DeviceError(
            f"{key}={name!r}: fedaug runs on cpu or cuda; valid choices: {', '.join(DEVICE_CHOICES)} "
            f"(this machine has: {', '.join(available)})"
        )
    if len(available) == 1:
        raise DeviceError(
            f"{key}={name!r} but this machine has no CUDA device (torch {torch.__version__}, "
            f"CUDA build: {torch.version.cuda or 'no'}); available: cpu"
        )
    if device.index is not None and device.index >= len(available) - 1:
        raise DeviceError(f"{key}={name!r} but this machine has: {', '.join(available)}")
    return _with_index(device)


def _with_index(device: torch.device) -> torch.device:
    """``cuda`` as the ``cuda:N`` it means now, so it compares equal to its tensors' ``.device``."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def device_facts(device: torch.device) -> dict[str, Any]:
    """What ``env.json`` records about ``device``: its name, and for CUDA the GPU, CUDA and cuDNN versions."""
    facts: dict[str, Any] = {"device": str(device)}
    if device.type != "cuda":
        return facts
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    facts.update(
        {
            "gpu_name": props.name,
            "gpu_memory_gib": round(props.total_memory / 2**30, 1),
            "gpu_capability": f"{props.major}.{props.minor}",
            "cuda": torch.version.cuda,
            "cudnn": _cudnn_version(),
        }
    )
    return facts


def _cudnn_version() -> int | None:
    cudnn: Any = torch.backends.cudnn  # untyped module functions
    return int(cudnn.version()) if cudnn.is_available() else None


CPU_EVAL_BATCH_SIZES: dict[str, int] = {"bn_cnn_cifar": 256, "audionet": 32}
"""``engine.eval_batch_size`` on a CPU for the models where a batch other than 1024 was measured clearly
faster (``benchmarks/step_variants.py --compare eval_batch``: benchmarks/results/eval_batch_<model>_cpu.json;
docs/guide/cpu-campaign.md). Evaluation only: the batch size changes no trained weight, and these models'
logits came out bit-identical at batch 32, 256 and 1024 (the mean test loss is summed in another order)."""


def default_eval_batch_size(device: torch.device, model_name: str | None = None) -> int:
    """``engine.eval_batch_size`` when the config leaves it out: on a CPU the model's measured batch
    (:data:`CPU_EVAL_BATCH_SIZES`) or 1024; 8192 on a GPU (UCI-HAR's 2947 test windows in one forward
    pass)."""
    if device.type == "cuda":
        return 8192
    return CPU_EVAL_BATCH_SIZES.get(model_name or "", 1024)


def describe_device(device: torch.device) -> str:
    """``cpu`` or e.g. ``cuda:0 (NVIDIA H200)``, for the line a run logs at its start."""
    if device.type != "cuda":
        return str(device)
    return f"{device} ({device_facts(device)['gpu_name']})"


def device_label(facts: Mapping[str, Any]) -> str:
    """A short name of where a run computed: the GPU's name for CUDA runs, else ``cpu``.

    ``env.json`` files written before devices were recorded have no ``device``: they ran on the CPU.
    """
    if str(facts.get("device", "cpu")).startswith("cuda"):
        return str(facts.get("gpu_name", "cuda"))
    return "cpu"


def set_deterministic(enabled: bool) -> None:
    """``engine.deterministic``: deterministic kernels only (CUDA runs repeat to the last bit), or torch's
    defaults. cuBLAS needs ``CUBLAS_WORKSPACE_CONFIG`` for it, set here if the user has not set it (it must be
    set before the first cuBLAS call of the process, which is why the runner calls this before any work)."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    # torch.use_deterministic_algorithms imports torch._inductor's config, and torch._dynamo with it
    # (seconds on a loaded CPU), to set a flag only compiled code reads: a process already in the wanted state
    # (off, the default) changes nothing: a command that resolves configs without training never imports them
    if (
        enabled
        or torch.are_deterministic_algorithms_enabled()
        or torch.is_deterministic_algorithms_warn_only_enabled()
    ):
        torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    torch.backends.cudnn.benchmark = False


def to_device(obj: T, device: torch.device | str) -> T:
    """``obj`` with every tensor inside (dicts, lists, tuples, dataclasses) moved to ``device``.

    Tensors already there are returned as they are (no copy), so moving state that lives on the device costs
    nothing. Used for checkpoints (a CUDA run resumes on a CPU machine and back) and Flower messages.
    """
    if isinstance(obj, torch.Tensor):
        return obj.to(device)  # type: ignore[return-value]
    if isinstance(obj, dict):
        return type(obj)((k, to_device(v, device)) for k, v in obj.items())
    if isinstance(obj, list):
        return [to_device(v, device) for v in obj]  # type: ignore[return-value]
    if isinstance(obj, tuple):
        moved = [to_device(v, device) for v in obj]
        return type(obj)(*moved) if hasattr(obj, "_fields") else tuple(moved)  # type: ignore[return-value]
    if is_dataclass(obj) and not isinstance(obj, type):
        changes = {f.name: to_device(getattr(obj, f.name), device) for f in fields(obj) if f.init}
        return replace(obj, **changes)
    return obj


def host_to_device(
    tensor: torch.Tensor, device: torch.device | str, *, dtype: torch.dtype | None = None
) -> torch.Tensor:
    """``tensor`` (drawn on the host: a batch order, Beta weights, AugMix parameters) on ``device``, in
    ``dtype`` if given, without making the host wait for the GPU.

    A copy from ordinary (pageable) host memory to a GPU may first wait for everything already queued on the
    stream, ``non_blocking`` or not: the CUDA driver stages it through pinned memory. Such a wait every step
    serialises the host and the GPU, and when runs share a GPU each wait lasts until this run's CUDA context
    gets its next turn. So on CUDA the tensor is pinned first and copied asynchronously; PyTorch's caching
    host allocator keeps the pinned block until the copy has run. On a CPU it is ``tensor.to(device, dtype)``
    (no copy when nothing changes), so CPU runs are unchanged.
    """
    target = torch.device(device)
    if dtype is not None:
        tensor = tensor.to(dtype)  # on the host: the cast rounds as it would on the device
    if target.type != "cuda" or tensor.device.type != "cpu":
        return tensor.to(target)
    return tensor.pin_memory().to(target, non_blocking=True)


def tensor_devices(obj: Any) -> set[torch.device]:
    """The devices of every tensor inside ``obj`` (dicts, lists, tuples, dataclasses, modules)."""
    found: set[torch.device] = set()
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            found.add(item.device)
        elif isinstance(item, torch.nn.Module):
            found.update(t.device for t in item.state_dict().values())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
        elif is_dataclass(item) and not isinstance(item, type):
            stack.extend(getattr(item, f.name) for f in fields(item))
    return found


def release_cached_memory() -> bool:
    """Gives what PyTorch's CUDA allocator keeps cached back to the device, after collecting garbage (an ended
    run's models, optimizer state and recorded steps can sit in reference cycles, e.g. a failed run's
    traceback). A sweep's worker process calls it after each run: the process outlives the run, and memory
    it keeps cached while idle, or after it ran out of memory, is memory the runs beside it cannot have.

    Returns:
        Whether there was anything to release: False in a process that has not used CUDA (any CPU run).
    """
    if not torch.cuda.is_available() or not torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        return False
    gc.collect()
    torch.cuda.empty_cache()
    return True
