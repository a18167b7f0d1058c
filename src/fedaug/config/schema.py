"""The experiment config: a tree of frozen dataclasses, the single source of truth of a run.

YAML presets in ``configs/`` and ``--set section.key=value`` overrides are loaded into these classes by
:mod:`fedaug.config.load`, which rejects unknown keys and wrong types. The ``data``, ``partition``,
``model`` and ``method`` sections are *open*: besides their fixed fields they carry the options of the named
dataset, partitioner, model or method (``partition.alpha``, ``method.proximal_mu``), which the component
validates when it is built.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedaug.errors import ConfigError
from fedaug.runtime.choices import CHANNELS_LAST_MODES, OPTIMIZERS, PRECISIONS, is_device_name
from fedaug.validation import check_choice, check_int, check_number

if TYPE_CHECKING:  # what a round's settings are handed on as; torch is imported once a run starts
    from fedaug.api import TrainSettings

CUDA_GRAPHS_MODES = ("auto", True, False)
"""The values of ``engine.cuda_graphs``."""

BATCHED_CLIENTS_MODES = (False, True, "padded")
"""The values of ``engine.batched_clients`` (:mod:`fedaug.engine.batched.modes`)."""

LR_SCHEDULES = ("exponential", "official_flea")


MAX_ROUNDS = 100_000
"""Cap on ``train.rounds`` (the papers run 100-500): a larger value is a typo, not an experiment."""

MAX_LOCAL_EPOCHS = 10_000
"""Cap on ``train.local_epochs``."""

MAX_THREADS = 1024
"""Cap on ``engine.num_threads``."""


def check_run_name(name: str) -> None:
    """Raises ConfigError unless ``name`` is a relative path that stays inside ``out_dir`` (no ``..``
    segment, not absolute, not empty, no NUL byte): a run dir never lands outside ``--out-dir``."""
    parts = name.replace("\\", "/").split("/")
    if not name.strip() or "\0" in name or name.startswith("/") or ".." in parts:
        raise ConfigError(
            f"name must be a relative path inside out_dir (no '..' segment, not absolute), got {name!r}"
        )


@dataclass(frozen=True)
class DataConfig:
    """Which dataset and where it lives (options: e.g. ``channels`` for uci_har)."""

    name: str = "uci_har"
    data_dir: str | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PartitionConfig:
    """How the train set is split over clients.

    Attributes:
        name: partitioner (iid, quantity, dirichlet, shards, multimodal).
        num_clients: K; exclusive with ``mean_local_size`` (K = N / mean_local_size).
        mean_local_size: average samples per client (the papers' scarcity level, 100 or 50).
        local_test_fraction: fraction of each client's data held out as its local test set.
        options: the partitioner's parameters (``classes_per_client``, ``alpha``, ``min_size``, ...).
        seed: the partition's seed; None (default) draws it from the run's ``seed``. Set it to keep one
            partition over the seeds of a table, so that their spread is the training randomness alone
            (client sampling, batches, initial model; the local test sets are part of the partition).
    """

    name: str = "quantity"
    num_clients: int | None = 75
    mean_local_size: float | None = None
    local_test_fraction: float = 0.0
    options: dict[str, Any] = field(default_factory=lambda: {"classes_per_client": 2})
    seed: int | None = None

    def __post_init__(self) -> None:
        check_int("partition.seed", self.seed, 0, allow_none=True)
        if (self.num_clients is None) == (self.mean_local_size is None):
            raise ConfigError(
                "set exactly one of partition.num_clients and partition.mean_local_size, got "
                f"num_clients={self.num_clients}, mean_local_size={self.mean_local_size}"
            )
        if self.mean_local_size is not None:
            check_number("partition.mean_local_size", self.mean_local_size, 0, math.inf, low_open=True)
        if self.num_clients is not None:
            check_int("partition.num_clients", self.num_clients, 1)
        check_number("partition.local_test_fraction", self.local_test_fraction, 0, 1, high_open=True)
        if "groups" in self.options:
            raise ConfigError(
                "partition.groups is not an option: the run takes the group ids from the dataset; "
                "partition.group names which (natural partitioner)"
            )


@dataclass(frozen=True)
class ModelConfig:
    """Which model (options are passed to its builder, e.g. ``width`` for convnet).

    Attributes:
        name: the registered model.
        stand_in_for: the paper's model this one stands in for, as reports name it (e.g. ``MobileNetV2``;
            default None: the model is the paper's own). Every table, plot title and report header of the
            run then says "stand-in model for ..." beside the model's name. Changes no result (neither the
            run dir nor its identity).
        options: the builder's keywords.
    """

    name: str = "harnet"
    stand_in_for: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        paper_model = self.stand_in_for
        if paper_model is not None and (not isinstance(paper_model, str) or not paper_model):
            raise ConfigError(
                f"model.stand_in_for must be the name of the paper's model (e.g. MobileNetV2) or null, "
                f"got {paper_model!r}"
            )


@dataclass(frozen=True)
class MethodSpec:
    """Which method; ``options`` are the fields of the method's own typed config."""

    name: str = "fedavg"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrainConfig:
    """The FL protocol (defaults: the FLea paper).

    Attributes:
        rounds: communication rounds (paper: 100).
        client_fraction: fraction of clients sampled per round (paper: 0.1).
        clients_per_round: explicit number per round; overrides ``client_fraction``.
        local_epochs: local passes per round (paper: 5).
        batch_size: local batch size (paper: 32).
        optimizer: ``adam`` (paper) or ``sgd``.
        lr: initial learning rate (paper: 1e-3).
        lr_decay: multiplicative decay per round (paper: 0.98, i.e. 2% per round).
        lr_min: floor of the decayed lr (paper: 1e-5).
        lr_schedule: ``exponential`` (paper: lr * lr_decay^(t-1), floored at lr_min) or ``official_flea``
            (the FLea code: lr * (1 - 0.018 (t-1)) for t <= 50, then lr * 0.1).
        momentum: SGD momentum.
        weight_decay: L2 weight decay.
        reset_optimizer_every_step: rebuild the optimizer every step (official FLea code; off by default).
    """

    rounds: int = 100
    client_fraction: float = 0.1
    clients_per_round: int | None = None
    local_epochs: int = 5
    batch_size: int = 32
    optimizer: str = "adam"
    lr: float = 1e-3
    lr_decay: float = 0.98
    lr_min: float = 1e-5
    lr_schedule: str = "exponential"
    momentum: float = 0.0
    weight_decay: float = 0.0
    reset_optimizer_every_step: bool = False

    def __post_init__(self) -> None:
        check_int("train.rounds", self.rounds, 1, MAX_ROUNDS, why=" (a cap against typos)")
        check_int("train.local_epochs", self.local_epochs, 1, MAX_LOCAL_EPOCHS, why=" (a cap against typos)")
        check_int("train.batch_size", self.batch_size, 1)
        check_number("train.lr", self.lr, 0, math.inf, low_open=True)
        check_number("train.lr_decay", self.lr_decay, 0, 1, low_open=True)
        check_number("train.lr_min", self.lr_min, 0, math.inf)
        check_number("train.momentum", self.momentum, 0, 1)
        check_number("train.weight_decay", self.weight_decay, 0, math.inf)
        check_number("train.client_fraction", self.client_fraction, 0, 1, low_open=True)
        check_int("train.clients_per_round", self.clients_per_round, 1, allow_none=True)
        check_choice("train.lr_schedule", self.lr_schedule, LR_SCHEDULES)
        check_choice("train.optimizer", self.optimizer, OPTIMIZERS)

    def settings(self, round_num: int) -> TrainSettings:
        """Local training settings of 1-based round ``round_num`` (lr decayed, floored at ``lr_min``)."""
        from fedaug.api import TrainSettings

        if self.lr_schedule == "official_flea":  # docs/methods/flea.md; their round r = our t - 1
            r = round_num - 1
            lr = self.lr * (1 - 0.018 * r if r < 50 else 0.1)
        else:
            lr = max(self.lr * self.lr_decay ** (round_num - 1), self.lr_min)
        return TrainSettings(
            local_epochs=self.local_epochs,
            batch_size=self.batch_size,
            lr=lr,
            optimizer=self.optimizer,
            momentum=self.momentum,
            weight_decay=self.weight_decay,
            reset_optimizer_every_step=self.reset_optimizer_every_step,
        )


@dataclass(frozen=True)
class EngineConfig:
    """How the run is executed (none of this changes the results, except ``num_threads`` in the last bits,
    ``precision`` and ``flush_denormals``).

    Attributes:
        name: ``simulation`` (in-process) for now.
        num_threads: torch intra-op threads (None: torch's default).
        eval_batch_size: test-set batch size (None, the default: on a CPU the model's measured batch,
            :data:`fedaug.runtime.device.CPU_EVAL_BATCH_SIZES`, else 1024; 8192 on a GPU, where a large
            batch costs little memory and one launch per layer instead of several).
        progress: show a progress bar / per-round log lines.
        precision: ``float32`` (default) or ``bf16``: local training and evaluation forward passes under
            bfloat16 autocast with float32 weights, optimizer and loss (faster on CPUs with AVX-512 BF16 /
            AMX; changes results slightly, see :mod:`fedaug.runtime.precision`).
        batched_clients: train all of a round's clients at once with stacked weights (torch.func.vmap; plain
            cross-entropy methods with adam/sgd in float32 only, see :mod:`fedaug.engine.batched.stacked`);
            equal to
            the sequential loop up to float rounding. ``padded``: the same with every client's batch padded to
            one shape and masked (:mod:`fedaug.engine.batched.padded`; every method that batches but FedMix's
            mafl
            mode and the AugMix variants), so that with ``cuda_graphs`` each step is recorded once and
            replayed; not yet measured on a GPU.
        cuda_graphs: on a GPU, record each local training step as a CUDA graph and replay it
            (:mod:`fedaug.training.step_graphs`): one launch per step instead of about a hundred (on an H100
            a FedAvg
            round of the default preset takes 0.10-0.15 s instead of 0.46). Every BatchableLoss hook is
            recorded; the rest train eagerly (logged once, with the reason). Results equal training without
            graphs to float rounding. ``auto`` (default): on for a CUDA device, except with
            ``batched_clients: true`` or ``deterministic``; ``true``: on wherever a GPU computes (a CPU run
            warns and trains without); ``false``: off.
        channels_last: channels-last memory format for conv models: ``auto`` (default: the evaluation model of
            HARNet and the BN CNNs, where it was measured faster, and on a CPU training too for
            ``bn_cnn_cifar``), ``none``, ``eval`` or ``all`` (training too; see
            :mod:`fedaug.runtime.memory_format`).
        keep_checkpoints: rounds whose checkpoint is also kept as ``ckpt/round_NNNN.pt`` (besides
            ``latest.pt``), e.g. ``[1, 30]`` for attacks on an early and a late global model (default: none).
        local_eval_every: evaluate the global model on every client's local test set (client-level
            fairness; needs ``partition.local_test_fraction`` > 0) every this many rounds and at the last
            round (default 1).
        flush_denormals: flush subnormal floats to zero during the run
            (:func:`fedaug.runtime.precision.flush_denormals`): 4-5x faster FedGen steps late in a run on x86
            CPUs, whose confident global model makes the backward pass subnormal; it changes results in those
            values, so it is off by default.
        branch_from_fedavg: a method that is FedAvg in its first rounds (Fed-ZDAC/ZDAS before
            ``start_round``, FedGen in its warm-up) starts from the checkpoint of the FedAvg run of the same
            setting and seed instead of repeating them (same results; :mod:`fedaug.runs.branch`).
            Other methods ignore it. Default off.
        device: where the run computes: ``auto`` (default: ``cuda`` when torch sees a GPU, else ``cpu``),
            ``cpu``, ``cuda`` or ``cuda:N`` (:mod:`fedaug.runtime.device`). Random numbers are drawn on the
            CPU on
            every device, so a GPU run samples the same clients, batches and mixing weights as a CPU run.
        deterministic: deterministic kernels only (``torch.use_deterministic_algorithms``): a CUDA run then
            repeats to the last bit, also when killed and resumed; CPU runs are deterministic already.
            Default off (some CUDA kernels are faster when they may sum in any order).
    """

    name: str = "simulation"
    num_threads: int | None = None
    eval_batch_size: int | None = None
    progress: bool = True
    precision: str = "float32"
    batched_clients: bool | str = False
    cuda_graphs: bool | str = "auto"
    channels_last: str = "auto"
    keep_checkpoints: list[int] = field(default_factory=list)
    local_eval_every: int = 1
    branch_from_fedavg: bool = False
    flush_denormals: bool = False
    device: str = "auto"
    deterministic: bool = False

    def __post_init__(self) -> None:
        if not is_device_name(self.device):  # the error names this machine's devices: torch is needed then
            from fedaug.runtime.device import check_device_name

            check_device_name(self.device)
        if self.name != "simulation":
            raise ConfigError(f"engine.name must be 'simulation', got {self.name!r}")
        if self.num_threads is not None:
            check_int("engine.num_threads", self.num_threads, 1, MAX_THREADS)
        check_int("engine.local_eval_every", self.local_eval_every, 1)
        check_int("engine.eval_batch_size", self.eval_batch_size, 1, allow_none=True)
        bad = [r for r in self.keep_checkpoints if isinstance(r, bool) or not isinstance(r, int) or r < 1]
        if bad:
            raise ConfigError(f"engine.keep_checkpoints must list rounds >= 1, got {self.keep_checkpoints!r}")
        check_choice("engine.channels_last", self.channels_last, CHANNELS_LAST_MODES)
        check_choice("engine.precision", self.precision, PRECISIONS)
        check_choice("engine.cuda_graphs", self.cuda_graphs, CUDA_GRAPHS_MODES)
        check_choice("engine.batched_clients", self.batched_clients, BATCHED_CLIENTS_MODES)


TRACKERS = ("tensorboard", "mlflow")
"""The values of ``tracking``: the experiment trackers a run can write for (:mod:`fedaug.runs.tracking`)."""


@dataclass(frozen=True)
class ExperimentConfig:
    """A whole experiment. ``out_dir/name/<dataset>-<partition>/<method>/seed<k>/`` is its run dir.

    ``compare`` (optional) lists methods to run one after the other on the same setting, printed side by side
    (the default preset compares FedAvg and FLea). The ``method`` section's options apply to the method of the
    same name; the others run with their defaults. ``plugins`` lists modules or ``.py`` files of the user's
    own datasets, models and methods, imported wherever the config is resolved (:mod:`fedaug.plugins`).
    ``tracking`` (optional, e.g. ``[tensorboard, mlflow]``) also writes each round's scalars, the config and
    the summary for experiment trackers under the run dir (:mod:`fedaug.runs.tracking`; ``pip install
    'fedaug[tracking]'``); it changes no result.
    """

    name: str = "default"
    seed: int = 0
    out_dir: str = "runs"
    data: DataConfig = field(default_factory=DataConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: MethodSpec = field(default_factory=MethodSpec)
    train: TrainConfig = field(default_factory=TrainConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    compare: list[str] = field(default_factory=list)
    plugins: list[str] = field(default_factory=list)
    tracking: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_run_name(self.name)
        for tracker in self.tracking:
            check_choice("tracking", tracker, TRACKERS)
        if not self.out_dir.strip() or "\0" in self.out_dir:
            raise ConfigError(f"out_dir must be a folder path, got {self.out_dir!r}")
        check_compared_method(self.method.name, self.compare)


def check_compared_method(method: str, compare: list[str]) -> None:
    """ConfigError if ``compare`` lists methods but not ``method``: its section (a ``--set method=...``)
    would be dropped without a word, and the listed methods run instead."""
    if not compare or method in compare:
        return
    listed = ", ".join(compare)
    raise ConfigError(
        f"method {method!r} is not among the methods this config compares (compare: [{listed}]), so it would "
        f"not run; run it alone with --set 'compare=[]' (fedaug run: --method {method}), or beside them with "
        f"--set 'compare=[{listed}, {method}]'"
    )
