"""The method interface: what a federated method is, and the messages it exchanges.

A method is a small object with a typed, frozen config and no hidden state. The engine (in-process simulation
or the Flower adapter) drives it through four calls, cut along Flower's configure/aggregate seam::

    state = method.init_server(model_state, run)                 # once
    payload = method.payload(state, round_num, train)            # what the server broadcasts
    update = method.client_update(payload, client_ctx)           # on each sampled client
    state = method.server_update(state, updates, run)            # aggregation

and, for methods that share information between clients (FLea's feature buffer, FedMix's averages, FedData's
raw samples), an optional share phase after aggregation (``round_num = 0`` means before the first round)::

    request = method.share_request(state, round_num=..., participants=..., run=...)   # None: nothing to share
    shares = [method.client_share(request, client_ctx) for each client in request.client_ids]
    state = method.receive_shares(state, shares, run)

A method that is FedAvg in its first rounds may also say so (:class:`BranchesFromFedAvg`, an optional
protocol that a run asks for; the base class knows nothing of it).

States and messages are dataclasses of tensors, numbers, lists and dicts. They never hold a live module,
optimizer or data loader, so they checkpoint and travel over Flower unchanged.
Methods never import the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, runtime_checkable

import torch
from torch import Tensor

from fedaug.types import ClientId, Extra, Metrics, StateDict

if TYPE_CHECKING:  # the contract names the model type; it does not depend on the models
    from fedaug.models.base import SplitModel


@dataclass(frozen=True)
class TrainSettings:
    """Local optimisation settings for one round (the lr already includes the round's decay).

    Attributes:
        local_epochs: passes over the local data per round (paper: 5).
        batch_size: local mini-batch size (paper: 32).
        lr: learning rate for this round.
        optimizer: ``"adam"`` (paper) or ``"sgd"``.
        momentum: SGD momentum (ignored by Adam).
        weight_decay: L2 weight decay.
        reset_optimizer_every_step: rebuild the optimizer before every step, as the official FLea code does
            (which turns Adam into sign-SGD); off by default.
        precision: ``"float32"`` (default) or ``"bf16"`` (forward and loss under bfloat16 autocast, float32
            weights and optimizer; see :mod:`fedaug.runtime.precision`). The engine sets it every round from
            the
            run's ``engine.precision`` (``SimulationSpec.precision``), the one way the setting travels.
        batchnorm_eval: keep BatchNorm layers in eval mode while training (they normalise with their running
            statistics and do not update them); off by default. Fed-ZDAS's server step on synthetic data
            can use it (``server_batchnorm: frozen``).
        cuda_graphs: record each local step as a CUDA graph and replay it
        (:mod:`fedaug.training.step_graphs`); set
            by the engine from ``engine.cuda_graphs``, like ``precision``. On a CPU the same code runs
            unrecorded.
    """

    local_epochs: int = 5
    batch_size: int = 32
    lr: float = 1e-3
    optimizer: str = "adam"
    momentum: float = 0.0
    weight_decay: float = 0.0
    reset_optimizer_every_step: bool = False
    precision: str = "float32"
    batchnorm_eval: bool = False
    cuda_graphs: bool = False


@dataclass(frozen=True)
class RunContext:
    """Facts about the run that every method may read.

    ``workspace`` gives server-side code (e.g. FedGen's generator training, Fed-ZDAS) a model of the run's
    architecture by key, built once and reused; it is set by the engine (None where the engine has none) and
    is not part of the run's identity (excluded from comparison). ``input_mean`` / ``input_std`` are the
    per-channel normalisation of the inputs (None: not normalised), for augmentations that work on pixels
    (AugMix de-normalises with them). ``input_modality`` is the dataset's ``modality`` (``image``,
    ``signal``, ``audio``). ``device`` is where the run computes (``engine.device``, resolved by
    :mod:`fedaug.runtime.device`): the engine puts data, models and server state there, and a method that
    creates a
    tensor from nothing (a generator, noise for ZSDG) creates it there; it is not part of the run's identity.
    """

    num_clients: int
    num_classes: int
    input_shape: tuple[int, ...]
    seed: int
    num_rounds: int
    client_sizes: tuple[int, ...] = ()
    input_mean: tuple[float, ...] | None = None
    input_std: tuple[float, ...] | None = None
    input_modality: str = "image"
    workspace: Callable[[str], SplitModel] | None = field(default=None, compare=False, repr=False)
    device: torch.device = field(default=torch.device("cpu"), compare=False)
    clients_per_round: int = field(default=0, compare=False)
    """The clients of a round (0: not stated); what a method may size per-round state by (FLea's buffer)."""


@dataclass
class ClientData:
    """One client's local training data, held as tensors."""

    client_id: ClientId
    x: Tensor
    y: Tensor
    num_classes: int

    @property
    def num_examples(self) -> int:
        return int(self.y.shape[0])

    def class_counts(self) -> Tensor:
        """Number of local samples of every class, shape ``[num_classes]``."""
        return torch.bincount(self.y, minlength=self.num_classes)


@dataclass
class ClientContext:
    """Everything a client may use for one round (built by the engine, handed to the method).

    Attributes:
        client_id: the client.
        round_num: 1-based round number (0 in the pre-training share phase).
        data: the client's local data.
        model: a workspace model of the run's architecture; its weights are undefined until the method
            loads the payload's state into it.
        generator: the client's random generator for this round (derived from the run seed).
        run: the run context.
        client_state: this client's persistent state from its last participation (None the first time).
        workspace: returns another workspace model by key (e.g. ``"teacher"``), reused across clients.
    """

    client_id: ClientId
    round_num: int
    data: ClientData
    model: SplitModel
    generator: torch.Generator
    run: RunContext
    client_state: Any = None
    workspace: Callable[[str], SplitModel] | None = None


@dataclass
class ServerState:
    """The server's state: global weights plus method-specific content (e.g. FLea's feature buffer)."""

    round_num: int
    model_state: StateDict
    extra: Extra = field(default_factory=dict)


@dataclass
class Payload:
    """What the server broadcasts to the clients of a round."""

    round_num: int
    model_state: StateDict
    train: TrainSettings
    extra: Extra = field(default_factory=dict)


@dataclass
class ClientUpdate:
    """What a client returns after local training."""

    client_id: ClientId
    num_examples: int
    model_state: StateDict
    metrics: Metrics = field(default_factory=dict)
    extra: Extra = field(default_factory=dict)
    client_state: Any = None


@dataclass
class ShareRequest:
    """A request from the server for clients to share information (features, averages, samples)."""

    round_num: int
    client_ids: list[ClientId]
    model_state: StateDict
    extra: Extra = field(default_factory=dict)


@dataclass
class ClientShare:
    """What one client shares in answer to a :class:`ShareRequest`."""

    client_id: ClientId
    extra: Extra = field(default_factory=dict)
    metrics: Metrics = field(default_factory=dict)


@dataclass(frozen=True)
class MethodConfig:
    """Base of every method's typed config (frozen; fields carry the paper's defaults)."""


class Method:
    """Base class of federated methods; concrete methods override what they change.

    Subclasses set ``name`` (the registry key) and ``config_cls`` and implement :meth:`client_update` and
    :meth:`server_update`. The share phase and :meth:`eval_state` default to no-ops.
    """

    name: ClassVar[str] = "method"
    config_cls: ClassVar[type[MethodConfig]] = MethodConfig

    def __init__(self, config: MethodConfig | None = None) -> None:
        self.config = config if config is not None else self.config_cls()

    def check(self, model: SplitModel, run: RunContext) -> None:
        """Raises a FedaugError (naming the option and its valid values) when the method's options do not fit
        ``model`` or the run's data, e.g. FLea's ``split_layer``; called before any file of the run is
        written, so a bad option never leaves a half-made run dir. Default: nothing to check."""
        del model, run

    def init_server(self, model_state: StateDict, run: RunContext) -> ServerState:
        """The state before round 1."""
        del run
        return ServerState(round_num=0, model_state=model_state)

    def payload(self, state: ServerState, round_num: int, train: TrainSettings) -> Payload:
        """The broadcast for ``round_num``: global weights and the round's training settings."""
        return Payload(round_num=round_num, model_state=state.model_state, train=train)

    def client_update(self, payload: Payload, ctx: ClientContext) -> ClientUpdate:
        raise NotImplementedError

    def server_update(
        self, state: ServerState, updates: Sequence[ClientUpdate], run: RunContext
    ) -> ServerState:
        raise NotImplementedError

    def share_request(
        self, state: ServerState, *, round_num: int, participants: Sequence[ClientId], run: RunContext
    ) -> ShareRequest | None:
        """Which clients should share what after ``round_num`` (0 = before training); None = nothing."""
        del state, round_num, participants, run
        return None

    def client_share(self, request: ShareRequest, ctx: ClientContext) -> ClientShare:
        raise NotImplementedError(f"{self.name} does not share")

    def receive_shares(
        self, state: ServerState, shares: Sequence[ClientShare], run: RunContext
    ) -> ServerState:
        del shares, run
        return state

    def eval_state(self, state: ServerState) -> StateDict:
        """The weights to evaluate (CCVR overrides this with its calibrated classifier)."""
        return state.model_state

    def round_metrics(self, state: ServerState) -> Metrics:
        """Method-specific metrics logged once per round (e.g. FLea's buffer size)."""
        del state
        return {}


@runtime_checkable
class BranchesFromFedAvg(Protocol):
    """Optional: a method that is FedAvg bit for bit in its first rounds (Fed-ZDAC/ZDAS' burn-in, FedGen's
    warm-up, CCVR before its post-hoc calibration). A method satisfies it by defining the method below; one
    that does not is FedAvg in no round.

    Within those rounds it must train, aggregate, evaluate and log exactly as ``fedavg`` does with the same
    seeds and share nothing, so that a FedAvg run's checkpoint after any of them is a valid start
    (``engine.branch_from_fedavg``, :mod:`fedaug.runs.branch`); the engine's progress line also
    stops its estimate there. Each implementation is checked against a run from scratch.
    """

    def fedavg_rounds(self, num_rounds: int) -> int:
        """How many first rounds of a ``num_rounds``-round run this method is FedAvg (0: none). Depends only
        on the method's config and ``num_rounds``, so a sweep can ask before loading any data
        (:func:`fedaug.runs.branch.branch_plan`)."""
        ...


@runtime_checkable
class ConvertsFedAvgState(Protocol):
    """Optional, beside :class:`BranchesFromFedAvg`: a method whose state after its FedAvg rounds holds more
    than :meth:`Method.init_server`'s with FedAvg's weights (the default conversion,
    :func:`fedaug.runs.branch.fedavg_start_state`)."""

    def from_fedavg_state(self, state: ServerState, run: RunContext) -> ServerState:
        """This method's server state after FedAvg's ``state``."""
        ...


def fedavg_rounds_of(method: Method, num_rounds: int) -> int:
    """``method.fedavg_rounds(num_rounds)`` where the method declares FedAvg rounds
    (:class:`BranchesFromFedAvg`), else 0."""
    return method.fedavg_rounds(num_rounds) if isinstance(method, BranchesFromFedAvg) else 0


@runtime_checkable
class KeepsClientModels(Protocol):
    """Optional: a method whose result is one model per client rather than one global model (``local``, the
    train-alone reference run). The engine then evaluates every client's model on the global test set and
    logs the mean client (``test/acc``, ``test/loss``, per-class accuracies: means over the clients) with the
    spread (``test/client_acc``: every client's accuracy; ``test/client_acc_var``, ``test/client_acc_min``),
    and evaluates client i's own model on client i's local test split (``local/acc``).

    A client's results are reused while its entry holds the same tensor objects, unchanged (their version
    counters: :mod:`fedaug.engine.eval_cache`): return an untrained client's kept weights as they are (a copy
    is evaluated again: the same numbers, only slower), and change kept weights only with PyTorch operations,
    never through ``Tensor.data`` (which the counters do not see)."""

    def client_eval_states(self, state: ServerState, run: RunContext) -> list[StateDict]:
        """The weights to evaluate for each client ``0..run.num_clients - 1``, in client order."""
        ...


def client_eval_states_of(method: Method, state: ServerState, run: RunContext) -> list[StateDict] | None:
    """``method.client_eval_states(state, run)`` where the method keeps a model per client
    (:class:`KeepsClientModels`), else None (one global model: :meth:`Method.eval_state`)."""
    if isinstance(method, KeepsClientModels):
        return method.client_eval_states(state, run)
    return None
