"""A CPU stand-in for CUDA graph capture that checks every replay of a recorded step would compute what the
eager step computes.

A CUDA graph replays the kernels its capture issued: the same operations, reading and writing the same memory,
with the same scalar arguments, and it runs no Python. On a CPU,
:class:`fedaug.training.step_graphs.StepGraphs` runs
the step's Python every time, so the bit-identity tests alone would pass a hook that a GPU replays wrongly:
one that keeps Python state from step to step, makes a tensor from host values, rebinds a tensor it reads,
reads a device value on the host, or draws random numbers inside the step.

:func:`checking_capture` replaces ``StepGraphs._capture``. Its "capture" runs the step once under a
:class:`~torch.utils._python_dispatch.TorchDispatchMode` that writes down each ATen operation (the optimizer's
own are left out: on a GPU that is the fused capturable Adam, which is not the CPU one); each "replay" runs
the step again eagerly under the same mode and requires the same list: the same operations, the same
non-tensor arguments, and for every tensor that was not made inside the step the same memory (storage address,
offset, shape, strides, dtype). The tensors the capture read are kept alive, so a tensor made afresh between
steps cannot take an old one's address. Operations a capture cannot hold (host reads, outputs whose shape
depends on values, random draws, tensors from host values) fail the check at once. Like a replay on a GPU, a
replay returns the capture's output tensors, overwritten with this step's values.

What it cannot see: everything here is on the CPU, so a tensor a hook makes without naming the device
(``torch.arange(n)`` beside CUDA data) looks like any other. On a GPU that is a copy from the host inside the
capture, which fails it; the hook then trains eagerly with a warning, and ``tests/gpu`` (every method captured
with no eager step) fails.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from fedaug.training.objective import LossOutput
from fedaug.training.step_graphs import WARMUP_STEPS, StepGraphs
from tools.host_reads import bool_index

_UNRECORDABLE = {
    torch.Tag.data_dependent_output: "reads a device value on the host (a capture fails)",
    torch.Tag.dynamic_output_shape: "its output's shape depends on values (a capture fails)",
    torch.Tag.nondeterministic_seeded: "draws random numbers inside the step (BatchableLoss.draws)",
}
_FROM_HOST = {torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default}


class ReplayMismatch(AssertionError):
    """A replay of a recorded step would not compute what the eager step computes."""


def _integer_indexing(func: Any, args: tuple[Any, ...]) -> bool:
    """``aten.index`` with integer indices: tagged as value-shaped because a mask would be, but its shape is
    the indices' (recordable, no host read)."""
    return func is torch.ops.aten.index.Tensor and not bool_index(args)


def _storage(t: Tensor) -> int:
    return t.untyped_storage().data_ptr()


class OpLog(TorchDispatchMode):
    """The ATen operations of one step, each with its arguments described as a replay sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[tuple[str, object]] = []
        self.inputs: list[Tensor] = []  # tensors not made inside the step, in order of first use
        self.paused = False
        self._made: set[int] = set()  # storages allocated inside the step

    def _describe(self, arg: object) -> object:
        if not isinstance(arg, Tensor):
            return arg
        meta = (tuple(arg.shape), arg.stride(), arg.dtype, arg.device)
        if arg.numel() == 0 or _storage(arg) in self._made:
            return ("made in the step", *meta)
        self.inputs.append(arg)
        return ("input", _storage(arg), arg.storage_offset(), *meta)

    def __torch_dispatch__(
        self, func: Any, types: object, args: tuple[object, ...] = (), kwargs: dict[str, object] | None = None
    ) -> object:
        kwargs = kwargs or {}
        if self.paused or func.namespace == "profiler":  # record_function markers compute nothing
            return func(*args, **kwargs)
        for tag, why in _UNRECORDABLE.items():
            if tag in func.tags and not _integer_indexing(func, args):
                raise ReplayMismatch(f"{func} {why}")
        if func in _FROM_HOST:
            raise ReplayMismatch(
                f"{func}: a tensor made from host values inside the step (replays keep its capture's values)"
            )
        described = tree_map(self._describe, (args, kwargs))
        out = func(*args, **kwargs)
        read = {_storage(t) for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)}
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor) and t.numel() and _storage(t) not in read:
                self._made.add(_storage(t))
        self.ops.append((str(func), described))
        return out


def _logged(graphs: StepGraphs, body: Callable[[], LossOutput]) -> tuple[LossOutput, OpLog]:
    """``body`` run under an :class:`OpLog`, without logging the optimizer's step."""
    log = OpLog()
    optimizer = graphs.optimizer
    step = type(optimizer).step

    def unlogged_step(*args: Any, **kwargs: Any) -> Any:
        log.paused = True
        try:
            return step(optimizer, *args, **kwargs)
        finally:
            log.paused = False

    optimizer.step = unlogged_step  # type: ignore[method-assign]
    try:
        with log:
            out = body()
    finally:
        del optimizer.step
    return out, log


def _first_difference(captured: OpLog, replayed: OpLog) -> str | None:
    for i, (a, b) in enumerate(zip(captured.ops, replayed.ops, strict=False)):
        if a != b:
            return f"operation {i}: captured {a}, replayed {b}"
    if len(captured.ops) != len(replayed.ops):
        return f"captured {len(captured.ops)} operations, replayed {len(replayed.ops)}"
    return None


def _outputs(out: LossOutput) -> list[Tensor]:
    return [out.loss, *out.logs.values()]


def checking_capture(
    replays: list[int],
) -> Callable[[StepGraphs, Callable[[], LossOutput]], Callable[[], LossOutput]]:
    """A ``StepGraphs._capture`` for the CPU that checks each replay (see the module); ``replays`` gets one
    entry per recording, counting its checked replays."""

    def capture(
        self: StepGraphs, body: Callable[[], LossOutput], *, warm_up: bool
    ) -> Callable[[], LossOutput]:
        for _ in range(WARMUP_STEPS if warm_up else 0):
            body()
        saved = self._save()  # a capture computes nothing
        captured_out, captured = _logged(self, body)
        self._restore(saved)
        index = len(replays)
        replays.append(0)

        def replay() -> LossOutput:
            out, replayed = _logged(self, body)
            difference = _first_difference(captured, replayed)
            if difference is not None:
                raise ReplayMismatch(f"a replay would not compute the eager step: {difference}")
            with torch.no_grad():
                for kept, value in zip(_outputs(captured_out), _outputs(out), strict=True):
                    kept.detach().copy_(value.detach())
            replays[index] += 1
            return captured_out

        return replay

    return capture


def record_on_cpu(monkeypatch: Any, replays: list[int]) -> None:
    """Makes every StepGraphs made from now on take the GPU's path (warm up, capture, replay) with
    :func:`checking_capture`."""
    init = StepGraphs.__post_init__

    def post_init(self: StepGraphs) -> None:
        init(self)
        self.capture = True

    monkeypatch.setattr(StepGraphs, "__post_init__", post_init)
    monkeypatch.setattr(StepGraphs, "_capture", checking_capture(replays))
