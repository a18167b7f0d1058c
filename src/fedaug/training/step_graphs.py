"""Local training steps replayed as CUDA graphs (``engine.cuda_graphs``).

A HARNet step on a GPU is about a hundred kernel launches of a few microseconds of arithmetic each, and eager
PyTorch spends longer issuing them than the GPU spends running them (an H200 took 3.8 ms per FedAvg step,
``benchmarks/results/gpu_h200.json``). A CUDA graph records a step's kernels once and replays them with one
launch (``torch.cuda.CUDAGraph``, PyTorch's whole-network capture recipe). In graph mode
:func:`fedaug.training.loop.train_local` still gathers each batch, applies the batch transform and draws the
loss's random numbers eagerly, exactly as the eager loop does; it then copies them into the static inputs of
the graph recorded for that batch shape and replays it: ``zero_grad``, the loss hook, ``backward`` and the
Adam step.

What a step needs to be recorded (:func:`graph_refusal`; otherwise the client trains eagerly and the reason is
logged once):

* the loss hook is plain cross-entropy or a :class:`~fedaug.training.loop.BatchableLoss`, so whatever changes
  from step to step reaches it as tensors (the batch, ``step`` draws, per-client ``client`` constants);
* Adam (the papers' optimizer), float32, no ``reset_optimizer_every_step``, BatchNorm not frozen, no dropout.

A graph keeps reading the tensors it was recorded with, so the steps are recorded per loss hook: once per run
for a hook that is one object for every client (FedAvg's cross-entropy, FedMix's soft-label loss), once per
round for a closure built per client over the round's tensors. A closure of the same code made in the same
round is served by the first client's recording: by the :class:`~fedaug.training.loop.BatchableLoss` contract
(which batched clients rely on too) everything that differs between a round's clients reaches the hook as
tensors, which are copied into the recorded ones. A hook whose round state reaches it as tensors too, or lives
in workspace models loaded in place, declares a ``rounds_key`` (FedProx: its anchors as client tensors, mu in
the key; FLea: its buffer padded to a power of two and lambda2 as client tensors), and its recordings then
serve later rounds with an equal key. A hook must keep no Python state from step to step: recorded steps do
not run Python.

The optimizer is one Adam per workspace model with a tensor learning rate, fused and capturable on a GPU; at
the start of every client its state is zeroed (which is what a fresh ``torch.optim.Adam`` holds) and the
round's lr written into it. The first time a hook's code is recorded on a shape, warm-up steps run on a side
stream (cuDNN and cuBLAS set themselves up lazily) and the weights, buffers and optimizer state are restored
after them; a recording itself computes nothing, and costs about one eager step. A capture that fails (a hook
that reads a device value on the host, say) leaves the hook eager for the rest of the run, with a warning.

On a CPU the same code runs without capture: the static inputs are filled and the step function is called. The
results then equal the eager loop bit for bit (``tests/unit/test_step_graphs.py``), which is how CI checks the
bookkeeping; on a GPU the fused Adam rounds differently from the eager (foreach) one, so a run with graphs is
equal to one without to float rounding (``tests/gpu/``).
"""

from __future__ import annotations

import contextlib
import logging
import time
import warnings
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from fedaug.api import TrainSettings
from fedaug.training.objective import hook_code

if TYPE_CHECKING:
    from fedaug.training.objective import BatchableLoss, ClientTensors, LossOutput, ObjectiveFn

logger = logging.getLogger(__name__)

WARMUP_STEPS = 3
"""Eager steps on a side stream before a shape is recorded (PyTorch's recipe uses a few)."""

ShapeKey = tuple[object, ...]


def graph_refusal(model: nn.Module, batchable: BatchableLoss | None, settings: TrainSettings) -> str | None:
    """Why this client's steps cannot be recorded as CUDA graphs (None: they can)."""
    problems = []
    if batchable is None:
        problems.append("the loss hook is not a BatchableLoss (it may hide per-step state from the graph)")
    if settings.optimizer != "adam":
        problems.append(f"optimizer {settings.optimizer!r} (graphs implement adam)")
    return "; ".join(problems + unrepeated_settings(model, settings)) or None


def unrepeated_settings(model: nn.Module, settings: TrainSettings) -> list[str]:
    """What neither a recorded step nor a batched-clients step repeats (each refuses these clients)."""
    problems = []
    if settings.reset_optimizer_every_step:
        problems.append("train.reset_optimizer_every_step")
    if settings.batchnorm_eval:
        problems.append("BatchNorm in eval mode while training")
    if settings.precision != "float32":
        problems.append(f"engine.precision={settings.precision}")
    if any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()):
        problems.append("a model with dropout (randomness in the forward pass)")
    return problems


@dataclass
class _Recorded:
    """One recorded step: its static inputs and what replaying it computes."""

    x: Tensor
    y: Tensor
    step: ClientTensors
    run: Callable[[], LossOutput]


@dataclass
class StepGraphs:
    """One workspace model's optimizer and recorded training steps, kept across clients and rounds.

    It holds the model by weak reference: :data:`_GRAPHS` keys on the model, and a strong one would keep every
    model (and its graphs' GPU memory) alive for as long as the process.
    """

    model_ref: weakref.ref[nn.Module]
    params: list[nn.Parameter]
    weight_decay: float
    lr: Tensor = field(init=False)
    optimizer: torch.optim.Adam = field(init=False)
    capture: bool = field(init=False)
    fn: ObjectiveFn | None = None  # the hook whose steps are recorded
    settings: TrainSettings | None = None  # the round's settings that hook came with
    rounds_key: Hashable | None = None  # that hook's BatchableLoss.rounds_key
    reuse: bool = False  # whether this client's steps are recorded (False: the hook's capture failed)
    client: ClientTensors = field(default_factory=dict)
    recorded: dict[ShapeKey, _Recorded] = field(default_factory=dict)
    warmed: set[tuple[object, ShapeKey]] = field(default_factory=set)  # (hook code, shapes) warmed up
    failed: set[object] = field(default_factory=set)  # hooks (their code) whose capture failed
    counts: dict[str, int] = field(default_factory=lambda: {"captured": 0, "replayed": 0, "eager": 0})
    record_seconds: float = 0.0  # host time spent recording (warm-ups included), for benchmarks/gpu.py
    stream: torch.cuda.Stream | None = None  # where warm-ups and captures run (made at the first)

    @property
    def model(self) -> nn.Module:
        model = self.model_ref()
        if model is None:
            raise RuntimeError("the model of these recorded steps no longer exists")
        return model

    def __post_init__(self) -> None:
        device = self.params[0].device
        self.capture = device.type == "cuda"
        if self.capture:  # fused and capturable: one kernel per step, recordable
            self.lr = torch.zeros((), device=device)
            self.optimizer = torch.optim.Adam(
                self.params, lr=0.0, weight_decay=self.weight_decay, fused=True, capturable=True
            )
        else:  # float64 lr and the single-tensor path: the eager CPU Adam's arithmetic exactly
            self.lr = torch.zeros((), dtype=torch.float64)
            self.optimizer = torch.optim.Adam(
                self.params, lr=0.0, weight_decay=self.weight_decay, foreach=False
            )
        # the tensor goes in after the constructor, whose range check (0.0 <= lr) would read a GPU tensor
        # on the host and wait for the GPU
        for group in self.optimizer.param_groups:
            group["lr"] = self.lr

    def matches(self, model: nn.Module, params: list[nn.Parameter], settings: TrainSettings) -> bool:
        """Whether these graphs serve ``model`` trained with ``settings`` (same tensors, same decay)."""
        same = len(params) == len(self.params) and all(
            p is q for p, q in zip(params, self.params, strict=False)
        )
        return model is self.model_ref() and same and settings.weight_decay == self.weight_decay

    def start_client(self, loss: BatchableLoss, settings: TrainSettings) -> None:
        """A fresh optimizer (zero state, this round's lr) and ``loss``'s constants for the next client."""
        self.lr.fill_(settings.lr)
        state = [t for s in self.optimizer.state.values() for t in s.values() if isinstance(t, Tensor)]
        if state:
            torch._foreach_zero_(state)
        if self._same_hook(loss, settings):
            for key, value in loss.client.items():
                self.client[key].copy_(value)
            self.settings = settings
        else:  # what was recorded reads the old hook's tensors: drop it and record this hook
            dropped = bool(self.recorded)
            self.recorded.clear()
            if dropped and self.capture:
                self.optimizer.zero_grad(set_to_none=True)  # the gradients live in the last recording's pool
                release_memory()
            self.fn, self.settings, self.rounds_key = loss.fn, settings, loss.rounds_key
            self.client = {key: value.clone() for key, value in loss.client.items()}
        self.reuse = hook_code(self.fn) not in self.failed

    def _same_hook(self, loss: BatchableLoss, settings: TrainSettings) -> bool:
        """Whether the recorded steps serve ``loss``: its ``fn`` is the recorded one, or another closure of
        the same code made in the same round (the engine gives every client of a round one settings object),
        or in a later round with the recorded hook's ``rounds_key``.

        The second case rests on the BatchableLoss contract, which batched clients rely on too: everything
        that differs between the clients of a round reaches ``fn`` as ``client`` and ``step`` tensors, so the
        first client's ``fn`` computes every other client's objective (tested for every method). The third
        rests on ``rounds_key``'s promise: what differs between rounds reaches ``fn`` as ``client`` tensors
        too, or is in the key.
        """
        if _shapes(loss.client) != _shapes(self.client) or self.fn is None:
            return False
        if loss.fn is self.fn:
            return True
        if hook_code(loss.fn) is not hook_code(self.fn) or hook_code(loss.fn) is loss.fn:
            return False
        return settings is self.settings or (
            loss.rounds_key is not None and loss.rounds_key == self.rounds_key
        )

    def step(self, loss: BatchableLoss, x: Tensor, y: Tensor) -> LossOutput:
        """One local step on ``(x, y)``: replayed when its shape is recorded, else recorded or run eagerly."""
        draws = loss.draws(x.shape[0]) if loss.draws is not None else {}
        if not self.reuse:
            self.counts["eager"] += 1
            return self._body(x, y, draws)()
        key = (_shapes({"x": x, "y": y}), _shapes(draws))
        recorded = self.recorded.get(key)
        if recorded is None:
            start = time.perf_counter()
            recorded = self._record(key, x, y, draws)
            self.record_seconds += time.perf_counter() - start
        if recorded is None:
            self.counts["eager"] += 1
            return self._body(x, y, draws)()
        recorded.x.copy_(x)
        recorded.y.copy_(y)
        for name, value in draws.items():
            recorded.step[name].copy_(value)
        self.counts["replayed"] += 1
        return recorded.run()

    def _body(self, x: Tensor, y: Tensor, draws: ClientTensors) -> Callable[[], LossOutput]:
        """The step on these tensors: what is recorded, and what runs when nothing is."""
        fn, client, optimizer = self.fn, self.client, self.optimizer
        assert fn is not None

        def body() -> LossOutput:
            # no gradients: backward writes them (into the graph's memory when recorded), as on a fresh start
            optimizer.zero_grad(set_to_none=True)
            out = fn(self.model, x, y, client, draws)
            out.loss.backward()  # type: ignore[no-untyped-call]
            with warnings.catch_warnings():  # a capturable Adam stepped outside a capture warns once
                warnings.filterwarnings("ignore", message=".*capturable.*")
                optimizer.step()
            return out

        return body

    def _record(self, key: ShapeKey, x: Tensor, y: Tensor, draws: ClientTensors) -> _Recorded | None:
        """Records the step for ``key``'s shapes (None, and the hook eager from now on, if capture fails)."""
        sx, sy, sstep = x.clone(), y.clone(), {k: v.clone() for k, v in draws.items()}
        body = self._body(sx, sy, sstep)
        warm = (hook_code(self.fn), key)  # the hook's operations on these shapes have run on the side stream
        warm_up = self.capture and warm not in self.warmed
        saved = self._save() if warm_up else None  # a capture alone computes nothing
        try:
            run = self._capture(body, warm_up=warm_up) if self.capture else body
        except RuntimeError as err:
            # the message only: the exception's frames hold the failed step's autograd graph, whose
            # gradient-accumulation nodes belong to the side stream, and a log handler may keep the record
            cause = err.__context__ if isinstance(err.__context__, RuntimeError) else err  # the step's own
            reason = (str(cause).strip() or type(cause).__name__).splitlines()[0]
            del err, cause
            self._restore(saved)
            self.failed.add(hook_code(self.fn))
            self.reuse = False
            logger.warning(
                "engine.cuda_graphs: this loss hook could not be recorded, so it runs eagerly (%s)", reason
            )
            return None
        self._restore(saved)
        self.warmed.add(warm)
        self.recorded[key] = recorded = _Recorded(sx, sy, sstep, run)
        self.counts["captured"] += 1
        return recorded

    def _capture(self, body: Callable[[], LossOutput], *, warm_up: bool) -> Callable[[], LossOutput]:
        """``body`` recorded as a CUDA graph on a side stream (after warm-up steps there the first time its
        shapes are recorded); returns its replay.

        ``torch.cuda.graph`` is not used: it waits for the whole device and empties the allocator's cache
        before every capture, which a run that records once per round per shape cannot afford (and which
        would stall every run sharing the GPU). Ordering the side stream after the current one is enough:
        capturing executes nothing.
        """
        device = self.params[0].device
        main = torch.cuda.current_stream(device)
        if self.stream is None:
            self.stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side = self.stream
        side.wait_stream(main)
        try:
            with torch.cuda.stream(side):
                for _ in range(WARMUP_STEPS if warm_up else 0):
                    body()
                graph = torch.cuda.CUDAGraph()
                self.optimizer.zero_grad(set_to_none=True)
                graph.capture_begin()
                try:
                    captured = body()
                finally:
                    try:
                        graph.capture_end()  # raises too when the capture was invalidated
                    except RuntimeError:
                        _end_generator_capture()
                        raise
        finally:
            # also after a failed capture: the warm-up steps must finish before the weights are put back
            main.wait_stream(side)
        # detached: the recorded autograd graph is not kept alive (the next eager backward would warn)
        out = type(captured)(captured.loss.detach(), {k: v.detach() for k, v in captured.logs.items()})

        def replay() -> LossOutput:
            graph.replay()
            return out

        return replay

    def _save(self) -> list[Tensor]:
        """Copies of everything a warm-up step changes: weights, buffers, optimizer state."""
        with torch.no_grad():
            return [t.detach().clone() for t in self._mutable()]

    def _restore(self, saved: list[Tensor] | None) -> None:
        """Puts back what :meth:`_save` copied (None: nothing was); optimizer state created since (a first
        step) is zeroed."""
        if saved is None:
            return
        current = self._mutable()
        with torch.no_grad():
            for target, value in zip(current, saved, strict=False):
                target.copy_(value)
            if len(current) > len(saved):  # state the warm-up created: what a fresh optimizer holds
                torch._foreach_zero_(current[len(saved) :])

    def _mutable(self) -> list[Tensor]:
        """Weights, buffers, then optimizer state tensors (made at the first step), in a fixed order."""
        state = [
            t for p in self.params for t in self.optimizer.state.get(p, {}).values() if isinstance(t, Tensor)
        ]
        return [*self.model.parameters(), *self.model.buffers(), *state]


def _end_generator_capture() -> None:
    """Takes the CUDA random generator out of capture mode after a failed capture, on the current stream.

    ``CUDAGraph.capture_end`` ends the generator's capture only after the stream's capture ended without an
    error, so a failed capture left it in capture mode, and the process's next random draw on the GPU
    (``torch.randn(..., device="cuda")``) failed with "Offset increment outside graph capture encountered
    unexpectedly". An empty capture begins and ends it properly; its graph is never replayed.
    """
    graph = torch.cuda.CUDAGraph()
    with warnings.catch_warnings(), contextlib.suppress(RuntimeError):
        warnings.filterwarnings("ignore", message=".*empty.*")  # "The CUDA Graph is empty ..."
        graph.capture_begin()
        graph.capture_end()


def release_memory() -> None:
    """Returns the memory of dropped recordings to the device (:meth:`StepGraphs.start_client`).

    Each capture allocates in a memory pool of its own, and PyTorch keeps a dropped recording's pool reserved
    by the process until it empties its cache. FLea recorded its closure again every round (before its
    ``rounds_key``), and without this the process reserved more every round: 7.0 GiB after 20 rounds on an
    H100, for at most 0.8 GiB of live tensors (``benchmarks/gpu.py --modes graphs_unreleased``), and 16 packed
    FLea runs filled the 80 GiB card within a minute. Emptying the cache waits for this process's GPU work and
    frees its other cached blocks too: once in each round that records again (for the built-in methods, FLea's
    round 2), against the round's hundreds of replays.

    One pool shared by every recording of the model would reuse the memory without emptying the cache, but the
    one way to keep such a pool between rounds, a ``torch.cuda.MemPool``, failed on torch 2.11 (H100): once
    every recording in it had been dropped, the next round's capture failed an internal assert of the pinned
    host-memory allocator, so FLea's steps ran eagerly, and the process aborted at exit.
    """
    torch.cuda.empty_cache()


def _shapes(tensors: ClientTensors) -> ShapeKey:
    """Names, shapes and dtypes of ``tensors``: what a recorded step's static inputs must match."""
    return tuple((name, tuple(t.shape), t.dtype, t.device) for name, t in tensors.items())


_GRAPHS: weakref.WeakKeyDictionary[nn.Module, StepGraphs] = weakref.WeakKeyDictionary()


def graphs_for(model: nn.Module, params: list[nn.Parameter], settings: TrainSettings) -> StepGraphs:
    """The :class:`StepGraphs` of ``model`` (kept with the model, so they last as long as the workspace)."""
    graphs = _GRAPHS.get(model)
    if graphs is None or not graphs.matches(model, params, settings):
        graphs = StepGraphs(weakref.ref(model), params, settings.weight_decay)
        _GRAPHS[model] = graphs
    return graphs
