"""``torch._dynamo`` imported only by what compiles: eager optimizers without it.

``torch.optim`` imports ``torch._dynamo`` (1-5 s on a loaded CPU, two thirds of a smoke run's start-up) the
first time an optimizer is built or stepped, only to tell a compiler where not to trace:

* ``Optimizer.add_param_group`` (every optimizer's ``__init__`` calls it), ``zero_grad``, ``state_dict`` and
  ``load_state_dict`` are wrapped by ``torch._disable_dynamo``, whose wrapper imports ``torch._dynamo`` on its
  first call to build the "disabled" function and caches it on the wrapped function as ``__dynamo_disable``;
* each optimizer's ``step`` is wrapped by ``torch.optim.optimizer._use_grad_for_differentiable``, which
  imports it to call ``torch._dynamo.graph_break()`` (a no-op outside a trace) around the step.

In a process that has not imported ``torch._dynamo`` nothing is being compiled, so the disabled function is
the function itself and the graph breaks are no-ops. :func:`defer_dynamo_import` makes both wrappers call
straight through while ``torch._dynamo`` is not imported, and do exactly what PyTorch's do from the first call
after anything imports it (``torch.compile``, an export, a library), so a compile path gets what it always
had.
fedaug itself never compiles (CUDA graphs record eager steps; ``torch.use_deterministic_algorithms``, which
imports it too, is called only to change the setting: :func:`fedaug.runtime.device.set_deterministic`).
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

_CACHE = "__dynamo_disable"
"""The attribute ``torch._compile._disable_dynamo``'s wrapper caches its disabled function in."""
_DEFERRED = "_fedaug_deferred_step"
"""Set on the steps :func:`defer_dynamo_import` installed, to PyTorch's wrapped step."""


class _UntilDynamo:
    """``fn`` called as it is until ``torch._dynamo`` is imported, then through ``torch._dynamo.disable``."""

    def __init__(self, fn: Callable[..., Any], recursive: bool) -> None:
        self.fn = fn
        self.recursive = recursive

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" not in sys.modules:
            return self.fn(*args, **kwargs)
        import torch._dynamo

        disabled = torch._dynamo.disable(self.fn, self.recursive, wrapping=False)  # type: ignore[no-untyped-call]
        setattr(self.fn, _CACHE, disabled)  # torch's own cache from now on (a string: no name mangling)
        return disabled(*args, **kwargs)


def _until_dynamo_step(use_grad: Callable[..., Any]) -> Callable[..., Any]:
    """An optimizer's ``step`` as ``_use_grad_for_differentiable`` wraps it, without its graph breaks (no-ops
    outside a trace) while ``torch._dynamo`` is not imported; ``use_grad`` itself once it is."""
    step: Callable[..., Any] = use_grad.__wrapped__  # type: ignore[attr-defined]

    @functools.wraps(step)
    def deferred(*args: Any, **kwargs: Any) -> Any:
        if "torch._dynamo" in sys.modules:
            return use_grad(*args, **kwargs)
        previous = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(args[0].defaults["differentiable"])
            return step(*args, **kwargs)
        finally:
            torch.set_grad_enabled(previous)

    setattr(deferred, _DEFERRED, use_grad)
    return deferred


def _probe(*args: Any, **kwargs: Any) -> None:
    """Wrapped once by each of PyTorch's wrappers, to recognise them by their code objects."""


def _disable_dynamo_wrapped(owner: type) -> Iterator[tuple[Callable[..., Any], bool]]:
    """The functions that ``owner``'s ``torch._disable_dynamo`` wrappers wrap, with their ``recursive``
    flags."""
    code = torch._disable_dynamo(_probe).__code__  # type: ignore[attr-defined]
    for attr in vars(owner).values():
        if getattr(attr, "__code__", None) is not code or not attr.__closure__:
            continue
        cells = dict(zip(attr.__code__.co_freevars, attr.__closure__, strict=True))
        if "fn" in cells and "recursive" in cells:
            yield cells["fn"].cell_contents, bool(cells["recursive"].cell_contents)


def _optimizer_classes() -> Iterator[type[torch.optim.Optimizer]]:
    """``torch.optim.Optimizer`` and its subclasses defined so far, each once."""
    seen: set[type] = set()
    todo: list[type[torch.optim.Optimizer]] = [torch.optim.Optimizer]
    while todo:
        cls = todo.pop()
        if cls not in seen:
            seen.add(cls)
            yield cls
            todo.extend(cls.__subclasses__())


def _defer_step(cls: type[torch.optim.Optimizer], use_grad_code: Any) -> bool:
    """Replaces ``cls.step`` (its own, as ``_use_grad_for_differentiable`` wrapped it, maybe inside the
    profiling hook ``Optimizer`` adds at the first instance) with :func:`_until_dynamo_step`'s."""
    step = vars(cls).get("step")
    if step is None:
        return False
    hooked = bool(getattr(step, "hooked", False))
    inner = step.__wrapped__ if hooked else step
    if getattr(inner, "__code__", None) is not use_grad_code:
        return False  # another wrapper (no_grad, a user's) or already deferred
    deferred = _until_dynamo_step(inner)
    if hooked:
        deferred = torch.optim.Optimizer.profile_hook_step(deferred)
        deferred.hooked = True  # type: ignore[attr-defined]
    cls.step = deferred  # type: ignore[method-assign]
    return True


def defer_dynamo_import() -> int:
    """Lets ``torch.optim``'s optimizers be built and stepped without importing ``torch._dynamo`` (module
    docstring); the number of functions deferred (0 once ``torch._dynamo`` is imported, or if this PyTorch's
    wrappers are not the ones recognised here). Idempotent and process-wide; optimizer classes defined later
    keep PyTorch's wrappers."""
    if "torch._dynamo" in sys.modules:
        return 0
    optimizer_module = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the name
    use_grad = getattr(optimizer_module, "_use_grad_for_differentiable", None)
    if getattr(torch, "_disable_dynamo", None) is None or use_grad is None:
        return 0
    deferred = 0
    for fn, recursive in _disable_dynamo_wrapped(torch.optim.Optimizer):
        if getattr(fn, _CACHE, None) is None:
            setattr(fn, _CACHE, _UntilDynamo(fn, recursive))
            deferred += 1
    use_grad_code = use_grad(_probe).__code__
    deferred += sum(_defer_step(cls, use_grad_code) for cls in _optimizer_classes())
    return deferred
