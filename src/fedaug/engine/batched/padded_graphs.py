"""Padded batched steps recorded as CUDA graphs: batched clients and ``engine.cuda_graphs`` together.

A :class:`~fedaug.engine.batched.padded.PaddedStep` has the same static inputs and shapes at every step of a
round,
so its :meth:`~fedaug.engine.batched.padded.PaddedStep.run` (every client's forward, backward and optimizer
step)
can be recorded once and replayed with one launch per step. :func:`replay` records it the first time (after
warm-up steps on a side stream, whose effects on the weights, buffers and optimizer state are undone: a
capture computes nothing), then replays it. The recording is kept on the step, which the engine keeps with
the workspace model for later rounds of the same shapes and hook. A capture that fails (a hook that reads a
device value on the host) leaves the step eager, with a warning: the results are the same.

As in :mod:`fedaug.training.step_graphs`, ``torch.cuda.graph`` is not used (it waits for the whole device and
empties
the allocator cache at each capture); the side stream is ordered after the current one.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import torch
from torch import Tensor

from fedaug.training.step_graphs import WARMUP_STEPS, _end_generator_capture

logger = logging.getLogger(__name__)

EAGER = "eager"
"""``PaddedStep.graph`` of a step whose capture failed: it runs eagerly from then on."""


class Recordable(Protocol):
    """What :func:`replay` records (:class:`~fedaug.engine.batched.padded.PaddedStep`)."""

    graph: Any  # None until recorded, then the graph (or EAGER)

    def run(self) -> None: ...

    def mutable(self) -> list[Tensor]: ...


def replay(step: Recordable) -> None:
    """Runs ``step`` (its static inputs filled) as its recorded graph, recording it first if needed."""
    if step.graph is None:
        step.graph = _record(step)
    if step.graph == EAGER:
        step.run()
    else:
        step.graph.replay()


def _record(step: Recordable) -> torch.cuda.CUDAGraph | str:
    device = step.mutable()[0].device  # the stacked weights'
    main = torch.cuda.current_stream(device)
    side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    side.wait_stream(main)
    with torch.no_grad():
        saved = [t.clone() for t in step.mutable()]
    try:
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):  # cuDNN and cuBLAS set themselves up lazily; outputs allocated
                step.run()
            with torch.no_grad():
                for target, value in zip(step.mutable(), saved, strict=False):
                    target.copy_(value)  # also the warm-ups' effects: a capture computes nothing
            graph = torch.cuda.CUDAGraph()
            graph.capture_begin()
            try:
                step.run()
            finally:
                try:
                    graph.capture_end()
                except RuntimeError:
                    _end_generator_capture()
                    raise
    except RuntimeError as err:
        main.wait_stream(side)
        with torch.no_grad():
            for target, value in zip(step.mutable(), saved, strict=False):
                target.copy_(value)
        reason = (str(err).strip() or type(err).__name__).splitlines()[0]
        logger.warning(
            "engine.cuda_graphs: a padded batched step could not be recorded, runs eagerly (%s)", reason
        )
        return EAGER
    main.wait_stream(side)
    return graph
