"""Counting the places where a run reads device values on the host, on any device, CPU included.

On a GPU every such read is a synchronisation: the Python process stops until the GPU has run everything
queued so far. A run alone pays a little for each; runs packed on one GPU (``fedaug sweep --workers 16
--device cuda``) pay much more, because each wait lasts until this run's CUDA context gets its next turn on
the GPU. :class:`HostReadCounter` finds them without a GPU: inside its block it counts

* the aten operators that read a value on the host or whose output size depends on values
  (``.item()``/``float()``/``bool()`` of a tensor, boolean-mask indexing, ``nonzero``, ``unique``,
  ``bincount``, ...: :data:`SYNCING_OPS`), through a :class:`~torch.utils._python_dispatch.TorchDispatchMode`;
* the copies to the host the code asks for (``Tensor.tolist``, ``.cpu()``, ``.numpy()``), patched at the
  Python level for the block, because on a CPU tensor they dispatch nothing.

Each is attributed to the innermost line of fedaug's own source that made it. Reads of host data are not
counted: the result of a counted ``.cpu()``, what a CPU generator draws (it cannot fill a GPU tensor),
tensors made from Python values, and whatever is computed from such tensors alone; nor are the optimizers'
reads of their step counters, or ``F.one_hot``'s range checks with ``num_classes`` given (both happen on a CPU
only), nor a checkpoint's digest (:func:`fedaug.engine.checkpoint.content_digest`: it reads what
``torch.save`` copies to the host right after). On a CPU the
count is still an upper bound of a GPU run's synchronisations: a read of a tensor that lives on the host even
in a GPU run (a CPU-drawn batch order, say) is counted. Copies from the host to the device, which may wait on
a GPU when the host memory is not pinned, cannot be seen on a CPU;
:func:`fedaug.runtime.device.host_to_device` makes
them without a wait, and ``benchmarks/host_syncs.py`` counts the real synchronisations on a GPU.
"""

from __future__ import annotations

import sys
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import fedaug
from fedaug.api import ServerState
from fedaug.engine.checkpoint import feed_digest
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.types import Metrics

_aten = torch.ops.aten
SYNCING_OPS = frozenset(
    {
        _aten._local_scalar_dense.default,  # .item(), float(t), int(t), bool(t), `if t:`
        _aten.nonzero.default,
        _aten.masked_select.default,
        _aten.unique_dim.default,
        _aten._unique2.default,
        _aten.unique_consecutive.default,
        _aten.bincount.default,  # on CUDA it reads the largest value to size its output
        _aten.repeat_interleave.Tensor,
        _aten.equal.default,
        _aten.is_nonzero.default,
    }
)
"""aten operators that synchronise on CUDA (besides copies to the host)."""

_INDEX_OPS = frozenset({_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default})
_HOST_COPIES = ("tolist", "cpu", "numpy")
_SRC = Path(fedaug.__file__).resolve().parent  # .../src/fedaug
_THIS = Path(__file__).resolve()
_TORCH = Path(torch.__file__).resolve().parent
_OPTIM = _TORCH / "optim"
_WRAPPERS = (_TORCH / "_dynamo", _TORCH / "utils" / "_python_dispatch.py", _TORCH / "_compile.py")


_DIGEST_READS = feed_digest.__code__
"""A checkpoint's digest reads every tensor that ``torch.save`` copies to the host right after, so it adds no
wait of its own: not counted."""


def _plumbing(path: Path) -> bool:
    """Whether a frame of ``path`` is this module or the wrappers torch calls a dispatch mode through."""
    return path == _THIS or any(path == w or w in path.parents for w in _WRAPPERS)


def bool_index(args: tuple[Any, ...]) -> bool:
    """Whether an ``index``/``index_put`` call indexes with a mask (bool, or the deprecated uint8): its size
    depends on values, so it waits for the GPU; integer indices do not."""
    indices = args[1] if len(args) > 1 else ()
    masks = (torch.bool, torch.uint8)
    return any(isinstance(i, torch.Tensor) and i.dtype in masks for i in indices or ())


def _caller() -> str | None:
    """``fedaug/<path>:<line>`` of the innermost frame in fedaug's source outside this module, ``other`` if
    none is, or None for a read inside ``torch.optim``: the optimizers' step counters stay on the host in a
    GPU run too (``capturable=False``), so reading them waits for nothing."""
    frame = sys._getframe(1)
    while frame is not None and _plumbing(Path(frame.f_code.co_filename)):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is not None and _OPTIM in Path(frame.f_code.co_filename).parents:
        return None
    if frame is not None and frame.f_code is _DIGEST_READS:  # what torch.save reads right after: no new wait
        return None
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        if _SRC in path.parents:
            return f"fedaug/{path.relative_to(_SRC).as_posix()}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return "other"


def _cpu_generator(generator: Any) -> bool:
    return isinstance(generator, torch.Generator) and generator.device.type == "cpu"


def _add(counts: Counter[str], where: str | None) -> None:
    if where is not None:
        counts[where] += 1


class _HostTensors:
    """The tensors already read to the host (``.cpu()``, ``.numpy()``) and those computed only from them:
    reading their values again waits for nothing on a GPU either. Held by id with weak references (a tensor's
    ``==`` is elementwise, so tensors cannot be set members)."""

    def __init__(self) -> None:
        self._refs: dict[int, weakref.ref[torch.Tensor]] = {}

    def add(self, tensor: Any) -> None:
        if isinstance(tensor, torch.Tensor) and id(tensor) not in self._refs:
            key = id(tensor)

            def forget(_: object) -> None:
                self._refs.pop(key, None)

            self._refs[key] = weakref.ref(tensor, forget)

    def __contains__(self, tensor: torch.Tensor) -> bool:
        ref = self._refs.get(id(tensor))
        return ref is not None and ref() is tensor


class _SyncOpMode(TorchDispatchMode):  # type: ignore[no-untyped-call]
    def __init__(self, counts: Counter[str], host: _HostTensors) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.counts = counts
        self.host = host
        self.suspended = 0  # > 0 inside a call whose reads happen on a CPU only (F.one_hot's range checks)

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        on_host = bool(inputs) and all(t in self.host for t in inputs)
        syncs = func in SYNCING_OPS or (func in _INDEX_OPS and bool_index(args))
        if syncs and not on_host and not self.suspended:
            _add(self.counts, _caller())
        out = func(*args, **kwargs)
        # Host data: what a CPU generator draws (it cannot fill a GPU tensor, so it is on the host in a GPU
        # run too), tensors made from Python values (torch.tensor), and what is computed from host data alone.
        if on_host or func is _aten.lift_fresh.default or _cpu_generator(kwargs.get("generator")):
            for t in tree_leaves(out):
                self.host.add(t)
        return out


class HostReadCounter:
    """Counts host reads of tensor values inside ``with counter.counting():``, by fedaug source line.

    A read of a tensor that is already on the host (the result of a counted ``.cpu()``, or computed only
    from such results) is not counted again. ``counts`` keeps adding up over several blocks; :meth:`total`
    is their sum.
    """

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def total(self) -> int:
        """All reads counted so far."""
        return sum(self.counts.values())

    @contextmanager
    def counting(self) -> Iterator[HostReadCounter]:
        """Counts inside the block (not thread-safe: it patches ``torch.Tensor`` for the block)."""
        originals = {name: getattr(torch.Tensor, name) for name in _HOST_COPIES}
        host = _HostTensors()

        def patched(original: Callable[..., Any]) -> Callable[..., Any]:
            def call(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
                if tensor not in host:
                    _add(self.counts, _caller())
                out = original(tensor, *args, **kwargs)
                if out is tensor:  # .cpu() of a CPU tensor: on a GPU it would be a copy, never an alias
                    out = out.clone()
                host.add(out)
                return out

            return call

        mode = _SyncOpMode(self.counts, host)
        one_hot = torch.nn.functional.one_hot

        def one_hot_checked_on_cpu_only(tensor: torch.Tensor, num_classes: int = -1) -> torch.Tensor:
            # With num_classes given, one_hot reads min and max only on a CPU (a GPU run leaves the range
            # check to the scatter kernel); without it, it reads max(y) on any device.
            mode.suspended += num_classes >= 0
            try:
                return one_hot(tensor, num_classes)
            finally:
                mode.suspended -= num_classes >= 0

        for name, original in originals.items():
            setattr(torch.Tensor, name, patched(original))
        torch.nn.functional.one_hot = one_hot_checked_on_cpu_only
        try:
            with mode:
                yield self
        finally:
            for name, original in originals.items():
                setattr(torch.Tensor, name, original)
            torch.nn.functional.one_hot = one_hot


class RoundReads(Simulation):
    """The in-process simulator, noting ``snapshot()`` (counts by source line, e.g. a
    :class:`HostReadCounter`'s) at the start of every round, so that :meth:`per_round` gives each whole
    round's counts: train, aggregate, share, eval, logs and its checkpoint (the last round's also the
    summary)."""

    def __init__(self, spec: SimulationSpec, snapshot: Callable[[], Counter[str]]) -> None:
        super().__init__(spec)
        self._snapshot = snapshot
        self._marks: list[tuple[int, Counter[str]]] = []

    def _round(self, state: ServerState, round_num: int) -> tuple[ServerState, dict[str, Any], Metrics]:
        self._marks.append((round_num, self._snapshot()))
        return super()._round(state, round_num)

    def per_round(self) -> dict[int, Counter[str]]:
        """Each round's counts by line, after the run (the last round ends at the counts now)."""
        ends = [*(marks for _, marks in self._marks[1:]), self._snapshot()]
        return {r: end - start for (r, start), end in zip(self._marks, ends, strict=True)}
