"""FLea's local objective: the paper-vs-official switches as tables, and the loss as a list of terms.

Each switch of :class:`~fedaug.methods.flea.method.FLeaConfig` names an entry of one table here
(:data:`DECOR_SCHEDULES`, :data:`WARMUPS`, :data:`DISTILL_INPUTS`, :data:`KL_DIRECTIONS`); ``decor_form`` is
one of :func:`~fedaug.privacy.dcor.decorrelation_loss`'s forms, ``local_ce_weight`` the weight of one more
term, and ``share_sampling`` picks from :data:`~fedaug.methods.flea.buffer.SHARE_SUBSETS`. FLea resolves them
once per client update into :class:`LossTerm` s; the loss of a step is then the main cross-entropy plus each
term's ``weight * value(step)`` (:func:`with_terms`), with no switch inside the step.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar, cast

import torch
from torch import Tensor, nn

from fedaug.methods.flea.buffer import FLeaBuffer
from fedaug.methods.flea.head_passes import HEAD_PASSES
from fedaug.methods.parts.losses import kl_divergence, one_hot, soft_cross_entropy
from fedaug.models.base import SplitModel
from fedaug.privacy.dcor import decorrelation_loss
from fedaug.runtime.device import host_to_device
from fedaug.training.loop import BatchableLoss, ClientTensors, LossFn, LossOutput
from fedaug.training.row_mask import mean_cross_entropy


@dataclass(frozen=True)
class Step:
    """What the loss terms of one local step read.

    Attributes:
        model: the client's model.
        x: the local batch.
        y: its labels.
        f: its activations at the split layer (with gradient).
        logits: the head's output on what the main loss classifies (f~ when mixing, f in the warm-up).
        heads: the local head's output on the other features the terms read, by name (``f``, ``partners``;
            see :attr:`LossTerm.heads`), computed with the main pass (:mod:`fedaug.methods.flea.head_passes`).
    """

    model: SplitModel
    x: Tensor
    y: Tensor
    f: Tensor
    logits: Tensor
    heads: Mapping[str, Tensor]


@dataclass(frozen=True)
class MixStep(Step):
    """A step with a non-empty buffer.

    Attributes:
        mixed: the mixed activations f~ (``logits`` is head(f~)).
        partners: the buffer activations mixed in.
    """

    mixed: Tensor
    partners: Tensor


StepT = TypeVar("StepT", bound=Step)
StepT_contra = TypeVar("StepT_contra", bound=Step, contravariant=True)


@dataclass(frozen=True)
class LossTerm(Generic[StepT_contra]):
    """One weighted term of the local loss: ``weight * value(step)``, logged as ``train/<key>``.

    ``heads`` names the features (``f``, ``partners``) whose local-head logits ``value`` reads from
    ``step.heads``: the loss runs those head passes together with its main one, in the order the terms ask.
    """

    key: str
    weight: float
    value: Callable[[StepT_contra], Tensor]
    heads: tuple[str, ...] = ()


def _official_decor_schedule(weight: float, round_num: int) -> float:
    """The official code's lambda2 in round t: max(lambda2 - 0.1 (t - 1), 1), 3 -> 1 over rounds 1-21.

    The official code hard-codes lambda2 = 3. For a configured lambda2 below 1 the floor is lambda2 itself (a
    constant weight): ``decor_weight: 0`` turns decorrelation off under either schedule.
    """
    return max(weight - 0.1 * (round_num - 1), min(weight, 1.0))


DECOR_SCHEDULES: dict[str, Callable[[float, int], float]] = {
    "constant": lambda weight, round_num: weight,  # paper
    "official": _official_decor_schedule,
}
"""``decor_schedule``: lambda2 of round t from the configured lambda2."""


@dataclass(frozen=True)
class Warmup:
    """Round 1's objective, while the buffer is empty.

    Attributes:
        epoch_factor: round 1's local epochs, in multiples of ``train.local_epochs``.
        distill_weight: weight of KL(global || local) towards the received (untrained) global model; 0: none.
    """

    epoch_factor: int
    distill_weight: float


WARMUPS: dict[str, Warmup] = {
    "paper": Warmup(epoch_factor=1, distill_weight=0.0),  # CE + lambda2 L_dec
    "official": Warmup(epoch_factor=3, distill_weight=0.5),  # 3x epochs, CE + 0.5 KL + lambda2(t) L_dec
}
"""``warmup``: round 1's objective."""


@dataclass(frozen=True)
class DistillInput:
    """What L_dis compares: the features the frozen global head sees, and the local head's logits on them.

    Attributes:
        features: those features of a step.
        head: the name in ``step.heads`` of the local logits on them (None: the main pass's ``logits``).
    """

    features: Callable[[MixStep], Tensor]
    head: str | None


DISTILL_INPUTS: dict[str, DistillInput] = {
    "mixed": DistillInput(lambda step: step.mixed, None),  # paper Eq. 4: f~ and the local head's logits on it
    "buffer": DistillInput(lambda step: step.partners, "partners"),  # official: the unmixed buffer features
}
"""``distill_on``: the features the frozen global head sees and the local logits on them."""

KL_DIRECTIONS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "local_global": lambda local, teacher: kl_divergence(local, teacher),  # paper Eq. 4: KL(local || global)
    "global_local": lambda local, teacher: kl_divergence(teacher, local),  # official: teacher first
}
"""``distill_direction``: L_dis from the local and the global logits."""


def warmup_loss(layer: int, terms: Sequence[LossTerm[Step]]) -> LossFn:
    """Round 1 (empty buffer): CE on the local batch, then ``terms``."""

    def loss_fn(
        module: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
    ) -> LossOutput:
        del client, step
        model = cast(SplitModel, module)
        f = model.encode(x, layer)
        logits = model.decode(f, layer)
        loss = mean_cross_entropy(logits, y)
        return with_terms(loss, {"ce": loss.detach()}, Step(model, x, y, f, logits, {"f": logits}), terms)

    # the teacher is the broadcast model: the same for every client
    return BatchableLoss(loss_fn, masked=True)


def mix_loss(
    layer: int,
    buffer: ClientTensors,
    terms: Sequence[LossTerm[MixStep]],
    draws: Callable[[int], ClientTensors],
    rounds_key: Hashable,
    tensor_weights: Sequence[str] = (),
    head_passes: str = "fused",
) -> LossFn:
    """A step with a buffer: L_cls, the soft-label CE of head(f~) against y~, then ``terms``.

    The local head runs on f~ and on whatever features the terms name (:attr:`LossTerm.heads`) in one pass
    (``head_passes``, :data:`~fedaug.methods.flea.head_passes.HEAD_PASSES`: ``fused``, equal to ``separate``
    passes to float rounding).

    The buffer reaches the step as ``client`` tensors (``buffer``: :func:`padded_buffer`'s, built once per
    round for all its clients), and so do the weights of the terms named in ``tensor_weights`` (0-d, in the
    buffer's dtype: the same products as the float weights), so with ``rounds_key`` (what else differs
    between rounds) the steps recorded in one round serve the next (``engine.cuda_graphs``) instead of being
    recorded again with every new buffer and lambda2.
    """
    names = tuple(term.key for term in terms if term.key in tensor_weights)
    heads = tuple(dict.fromkeys(name for term in terms for name in term.heads))  # in the order terms ask
    passes = HEAD_PASSES[head_passes]

    def loss_fn(
        module: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
    ) -> LossOutput:
        weights = {name: client[f"weight.{name}"] for name in names}
        model = cast(SplitModel, module)
        f = model.encode(x, layer)
        idx, lam = step["idx"], step["lam"]
        fb, yb = client["buffer_x"][idx], client["buffer_y"][idx]
        num_classes = model.num_classes
        f_mix = _expand(lam, f) * f + _expand(1 - lam, f) * fb
        y_mix = lam[:, None] * one_hot(y, num_classes) + (1 - lam)[:, None] * one_hot(yb, num_classes)
        features = {"f": f, "partners": fb}
        logits, *others = passes(model, [f_mix, *(features[name] for name in heads)], layer)
        loss = soft_cross_entropy(logits, y_mix)
        mix = MixStep(model, x, y, f, logits, dict(zip(heads, others, strict=True)), f_mix, fb)
        return with_terms(loss, {"cls": loss.detach()}, mix, terms, weights)

    # The buffer and the teacher are the broadcast ones, the same for every client; the draws are its own.
    client = dict(buffer)  # the round's tensors, shared; this client's weights added to its own dict
    features = buffer["buffer_x"]
    for term in terms:
        if term.key in names:  # pinned and copied without waiting for the GPU, like the draws
            weight = torch.tensor(term.weight, dtype=features.dtype)
            client[f"weight.{term.key}"] = host_to_device(weight, features.device)
    key = (rounds_key, head_passes)
    return BatchableLoss(loss_fn, client=client, draws=draws, rounds_key=key, masked=True)


def padded_buffer(
    buffer: FLeaBuffer, memory_format: torch.memory_format = torch.contiguous_format
) -> ClientTensors:
    """The buffer as ``client`` tensors (``buffer_x``, ``buffer_y``), its N rows padded with zeros to the next
    power of two: rounds whose buffers differ in size keep their shapes, and the steps read only the rows the
    draws pick, all below N.

    ``memory_format`` is the layout ``buffer_x`` is stored in: that of the local activations it is mixed with
    (:func:`activation_format`), so the mixing's elementwise operations read both operands alike. The values
    are the same in any layout, and so is every product and sum of the mixing: only the speed differs."""
    n = int(buffer.y.shape[0])
    rows = 1 << (n - 1).bit_length()
    x = buffer.x.new_zeros((rows, *buffer.x.shape[1:]))
    if memory_format != torch.contiguous_format:
        x = x.contiguous(memory_format=memory_format)
    y = buffer.y.new_zeros((rows,))
    x[:n], y[:n] = buffer.x, buffer.y
    return {"buffer_x": x, "buffer_y": y}


def activation_format(model: SplitModel, layer: int, features: Tensor) -> torch.memory_format:
    """The layout of ``model``'s activations at split ``layer``, for a buffer of ``features``: channels-last
    for 4-D features of a layer past the input when the encoder's 4-D weights are stored channels-last
    (``engine.channels_last``: its convolutions then return channels-last activations), else contiguous."""
    if layer < 0 or features.dim() != 4:
        return torch.contiguous_format
    weights = [p for block in model.blocks[: layer + 1] for p in block.parameters() if p.dim() == 4]
    if any(w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous() for w in weights):
        return torch.channels_last
    return torch.contiguous_format


def with_terms(
    loss: Tensor,
    logs: dict[str, Tensor],
    step: StepT,
    terms: Sequence[LossTerm[StepT]],
    weights: Mapping[str, Tensor] | None = None,
) -> LossOutput:
    """``loss`` plus each term's ``weight * value(step)``, in order, each value logged under its key; a term
    named in ``weights`` is weighted by that tensor instead of its float."""
    for term in terms:
        value = term.value(step)
        weight = weights[term.key] if weights and term.key in weights else term.weight
        loss = loss + weight * value
        logs[term.key] = value.detach()
    return LossOutput(loss, logs)


def positive_terms(terms: list[LossTerm[StepT_contra]]) -> list[LossTerm[StepT_contra]]:
    """The terms of positive weight: a zero-weight term is not computed at all (nor logged)."""
    return [term for term in terms if term.weight > 0]


def decor_term(weight: float, form: str) -> LossTerm[Step]:
    """lambda2 L_dec(x, f) of ``form``, the ``decor_form`` (KDD Eq. 5's squared dCor, the official dCor)."""
    return LossTerm("dec", weight, lambda step: decorrelation_loss(step.x, step.f, form=form))


def local_ce_term(weight: float) -> LossTerm[Step]:
    """The official code's plain CE on the unmixed local batch (a second pass of the head, on f)."""
    return LossTerm("ce", weight, lambda step: mean_cross_entropy(step.heads["f"], step.y), heads=("f",))


def distill_term(
    weight: float,
    teacher: SplitModel,
    layer: int,
    inputs: DistillInput,
    direction: Callable[[Tensor, Tensor], Tensor],
) -> LossTerm[MixStep]:
    """lambda1 L_dis: the KL (``direction``) between the local logits and the frozen global head's on the
    features ``inputs`` picks (the teacher's pass is its own: other weights, in eval mode)."""

    def value(step: MixStep) -> Tensor:
        local = step.logits if inputs.head is None else step.heads[inputs.head]
        with torch.no_grad():
            global_logits = teacher.decode(inputs.features(step).detach(), layer)
        return direction(local, global_logits)

    heads = () if inputs.head is None else (inputs.head,)
    return LossTerm("dis", weight, value, heads=heads)


def warmup_distill_term(weight: float, teacher: SplitModel) -> LossTerm[Step]:
    """The official warm-up's KL(global || local) towards the initial global model (a full pass on x)."""

    def value(step: Step) -> Tensor:
        with torch.no_grad():
            global_logits = teacher(step.x)
        return kl_divergence(global_logits, step.logits)

    return LossTerm("dis", weight, value)


def _expand(weights: Tensor, like: Tensor) -> Tensor:
    return weights.view(-1, *([1] * (like.dim() - 1)))
