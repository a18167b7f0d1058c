"""From an :class:`ExperimentConfig` to the one object a run is: :class:`ResolvedRun`.

A run is resolved once: its method instance (built once: :func:`build_method`), its data and partition, its
model, the facts every method reads (:class:`~fedaug.api.RunContext`), its settings (device, threads,
precision: :class:`RunSettings`) and the engine's :class:`~fedaug.engine.simulation.SimulationSpec`. The
engine runs the spec; the run dir's record, the resume checks and branching
(:mod:`fedaug.reproducibility`) read the same object. Resolving writes nothing and checks everything it can
(options against the model and data, ``clients_per_round`` against K), so a bad value never leaves a
half-made run dir.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from fedaug import registry
from fedaug.api import Method, RunContext
from fedaug.config.load import build_dataclass
from fedaug.config.schema import EngineConfig, ExperimentConfig
from fedaug.data.datasets import Dataset, load_dataset
from fedaug.data.partition import Partition, make_partition
from fedaug.data.partition.natural import train_groups
from fedaug.engine.batched.stacked import conv_model_note
from fedaug.engine.sampling import clients_per_round
from fedaug.engine.simulation import SimulationSpec
from fedaug.errors import ConfigError, IncompatibleModelError
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.plugins import import_plugins
from fedaug.runtime import startup
from fedaug.runtime.device import default_eval_batch_size, resolve_device, set_deterministic
from fedaug.runtime.lazy_dynamo import defer_dynamo_import
from fedaug.runtime.memory_format import resolve_channels_last
from fedaug.runtime.paths import cache_dir
from fedaug.runtime.precision import bf16_warning
from fedaug.training.loop import first_step_problem

logger = logging.getLogger(__name__)


def cuda_graphs_on(engine: EngineConfig, device: torch.device) -> bool:
    """Whether a run on ``device`` records its local steps as CUDA graphs (``engine.cuda_graphs``).

    ``auto`` turns them on for a CUDA device unless ``engine.batched_clients: true`` (vmap-batched rounds do
    not record; ``padded`` ones do, :mod:`fedaug.engine.batched.padded_graphs`) or ``engine.deterministic`` (a
    killed and resumed run records its steps again in the round it resumes, and repeating an uninterrupted
    run to the last bit that way is not tested on a GPU).
    """
    if device.type != "cuda" or engine.cuda_graphs is False:
        return False
    return engine.cuda_graphs is True or not (engine.batched_clients is True or engine.deterministic)


def build_method(config: ExperimentConfig) -> Method:
    """The registered method with its typed config built from ``method.*`` options."""
    import_plugins(config.plugins)
    cls = registry.get("method", config.method.name)
    _check_method_options(config.method.name, cls.config_cls, config.method.options)
    method_config = build_dataclass(cls.config_cls, config.method.options, path="method")
    method: Method = cls(method_config)
    return method


def method_option_names(method: str) -> set[str]:
    """The ``method.*`` options the registered ``method``'s typed config takes (RegistryError: unknown)."""
    return {f.name for f in dataclasses.fields(registry.get("method", method).config_cls)}


def _check_method_options(name: str, config_cls: type, options: Mapping[str, Any]) -> None:
    """ConfigError for an option ``name``'s config lacks, naming its options and the methods that have it
    (``--set method.decor_weight=0`` with the default preset's FedAvg: the option is FLea's)."""
    valid = {f.name for f in dataclasses.fields(config_cls)}
    unknown = next((key for key in options if key not in valid), None)
    if unknown is None:
        return
    owners = [other for other in registry.available("method") if unknown in method_option_names(other)]
    keys = ", ".join(sorted(valid)) if valid else f"none ({name} has no options)"
    where = f"; {unknown} is an option of {', '.join(owners)} (choose one: --method NAME)" if owners else ""
    raise ConfigError(f"unknown config key 'method.{unknown}'; valid keys: {keys}{where}")


_reused: dict[str, tuple[Dataset, Partition]] | None = None
"""Inside :func:`reusing_data`: the data and partitions loaded so far, by :func:`_data_key`; else None."""


@contextmanager
def reusing_data() -> Iterator[None]:
    """Inside, :func:`load_data_and_partition` loads a config's data and partition once and returns the same
    objects for every later config of the same data, partition, seed and plugins (a comparison's methods,
    checked before the first runs and then run: one load instead of two per method). Nothing changes the
    loaded tensors in place (the engine copies them to the device or uses them read-only), so a run on
    reused data logs the same metrics to the last bit (a test compares them). Outside, nothing is kept."""
    global _reused
    outer, _reused = _reused, {} if _reused is None else _reused
    try:
        yield
    finally:
        _reused = outer


def _data_key(config: ExperimentConfig) -> str:
    """What a config's loaded data and partition depend on, as a string."""
    seed = config.seed if config.partition.seed is None else config.partition.seed
    fields = [config.plugins, dataclasses.asdict(config.data), dataclasses.asdict(config.partition), seed]
    return json.dumps(fields, sort_keys=True, default=str)


def load_data_and_partition(config: ExperimentConfig) -> tuple[Dataset, Partition]:
    """Loads the dataset and makes (or loads the cached) partition of its train set (loaded once inside
    :func:`reusing_data`)."""
    key = _data_key(config) if _reused is not None else ""
    if _reused is not None and key in _reused:
        return _reused[key]
    loaded = _load_data_and_partition(config)
    if _reused is not None:
        _reused[key] = loaded
    return loaded


def _load_data_and_partition(config: ExperimentConfig) -> tuple[Dataset, Partition]:
    import_plugins(config.plugins)  # a sweep worker or a Flower node imports the run's plugins here
    data = config.data
    dataset = load_dataset(data.name, data_dir=data.data_dir, **data.options)
    startup.mark("data")
    part = config.partition
    partition = make_partition(
        dataset.y_train.numpy(),
        name=part.name,
        num_classes=dataset.num_classes,
        seed=config.seed if part.seed is None else part.seed,
        num_clients=part.num_clients,
        mean_local_size=part.mean_local_size,
        local_test_fraction=part.local_test_fraction,
        cache_dir=cache_dir() / "partitions",
        groups=train_groups(dataset.extras),  # the natural partitioner's group ids (subjects, speakers)
        **part.options,
    )
    startup.mark("partition")
    return dataset, partition


@dataclass(frozen=True)
class RunSettings:
    """How a run computes, resolved from ``engine.*``.

    Attributes:
        device: where it computes (``engine.device`` resolved on this machine).
        num_threads: torch intra-op threads (None: torch's default), set by
            :func:`fedaug.runtime.machine.use_threads` where a run starts.
        precision: ``float32`` or ``bf16``; the engine's ``SimulationSpec.precision``.
        deterministic: ``engine.deterministic``, applied to this process when the run is resolved.
        flush_denormals: ``engine.flush_denormals``, applied around the round loop.
    """

    device: torch.device
    num_threads: int | None
    precision: str
    deterministic: bool
    flush_denormals: bool

    @classmethod
    def resolve(cls, engine: EngineConfig) -> RunSettings:
        """The settings of ``engine`` (raises ConfigError for a device this machine lacks)."""
        return cls(
            device=resolve_device(engine.device),
            num_threads=engine.num_threads,
            precision=engine.precision,
            deterministic=engine.deterministic,
            flush_denormals=engine.flush_denormals,
        )


@dataclass(frozen=True)
class Components:
    """The checked pieces of a config, before a simulation is specified."""

    settings: RunSettings
    method: Method
    dataset: Dataset
    partition: Partition
    model_fn: Callable[[], SplitModel]
    run: RunContext
    per_round: int


def resolve_components(config: ExperimentConfig, method_fn: Callable[[], Method] | None = None) -> Components:
    """Builds and checks every component of ``config``: settings (the device first, so ``engine.device=cuda``
    on a machine without one is refused before any data is loaded; ``engine.deterministic`` is applied to this
    process), the method (``method_fn()``, default :func:`build_method`), data, partition, model, the method's
    options against them (:meth:`Method.check`) and ``clients_per_round`` against K. Writes nothing."""
    settings = RunSettings.resolve(config.engine)
    set_deterministic(settings.deterministic)
    if settings.device.type == "cuda":  # the CUDA context, made here so that the start-up names its time
        torch.empty(0, device=settings.device)
    startup.mark("device")
    method = (method_fn or partial(build_method, config))()
    startup.mark("method")
    dataset, partition = load_data_and_partition(config)

    def model_fn() -> SplitModel:
        return build_model(
            config.model.name,
            num_classes=dataset.num_classes,
            input_shape=dataset.input_shape,
            **config.model.options,
        )

    model = model_fn()  # fail now, with the config's words, rather than inside round 1
    check_model_fits_data(model, config.model.name, dataset)
    check_first_step(model, config, dataset)
    num_clients = len(partition.train_indices)
    if config.train.clients_per_round is not None and config.train.clients_per_round > num_clients:
        raise ConfigError(
            f"train.clients_per_round must be in 1..{num_clients} (K, the partition's number of clients), "
            f"got {config.train.clients_per_round}"
        )
    per_round = config.train.clients_per_round or clients_per_round(num_clients, config.train.client_fraction)
    run = RunContext(
        num_clients=num_clients,
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape),
        seed=config.seed,
        num_rounds=config.train.rounds,
        client_sizes=tuple(len(i) for i in partition.train_indices),
        input_mean=dataset.mean,
        input_std=dataset.std,
        input_modality=dataset.modality,
        device=settings.device,
        clients_per_round=min(per_round, num_clients),
    )
    method.check(model, run)  # options that do not fit the model or the data (FLea's split layer), now
    startup.mark("model")
    return Components(settings, method, dataset, partition, model_fn, run, run.clients_per_round)


def check_model_fits_data(model: torch.nn.Module, name: str, dataset: Dataset) -> None:
    """One forward pass of two training samples, before the run dir is made: IncompatibleModelError naming the
    model, the data and the mismatch unless it gives one logit per class for each (rather than a raw torch
    error in round 1). In eval mode, without gradients, the random generator's state restored after."""
    from fedaug import registry
    from fedaug.plugins import origin, user_names

    where = f" ({origin(registry.get('model', name))})" if name in user_names("model") else ""
    what = (
        f"model {name!r}{where} does not fit dataset {dataset.name!r} (samples {list(dataset.input_shape)}, "
    )
    what += f"{dataset.num_classes} classes)"
    batch = dataset.x_train[:2]
    training = model.training
    model.eval()
    try:
        with (
            torch.no_grad(),
            torch.random.fork_rng(devices=[]),
        ):  # (a lazy layer initialises at its first call)
            out = model(batch)
    except (RuntimeError, ValueError, TypeError, IndexError) as exc:
        reason = (str(exc).strip().splitlines() or [""])[0]
        raise IncompatibleModelError(
            f"{what}: one batch forward failed: {type(exc).__name__}: {reason}"
        ) from None
    finally:
        model.train(training)
    expected = [len(batch), dataset.num_classes]
    if not isinstance(out, torch.Tensor) or list(out.shape) != expected:
        got = f"shape {list(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise IncompatibleModelError(
            f"{what}: a batch of {len(batch)} must give logits of shape {expected}, got {got}"
        )


def check_first_step(model: torch.nn.Module, config: ExperimentConfig, dataset: Dataset) -> None:
    """One local step of plain cross-entropy on two training samples (a copy of ``model``, round 1's
    optimizer settings, on the CPU, the random generator's state restored after), before the run dir is made:
    a ConfigError naming ``train.lr`` (and the optimizer and weight decay) when it overflows, rather than a
    run dir left behind by a failure at the first client's second step. An lr that trains is never refused
    by this: it only finds a loss or parameter that is already NaN or infinite after one step."""
    settings = config.train.settings(1)
    defer_dynamo_import()  # as a run does: this step's optimizer would import torch._dynamo (seconds)
    with torch.random.fork_rng(devices=[]):
        problem = first_step_problem(copy.deepcopy(model), dataset.x_train[:2], dataset.y_train[:2], settings)
    if problem is not None:
        decay = f", train.weight_decay={config.train.weight_decay:g}" if config.train.weight_decay else ""
        raise ConfigError(
            f"train.lr={settings.lr:g} (train.optimizer={settings.optimizer}{decay}) overflows model "
            f"{config.model.name!r} on dataset {dataset.name!r} in one step: {problem}; lower train.lr"
        )


@dataclass(frozen=True)
class ResolvedRun:
    """One run, resolved once: what the engine runs (``spec``) and what its record, resume checks and branch
    read.

    Attributes:
        config: the experiment config.
        run_dir: where it runs.
        settings: device, threads, precision and the other process settings.
        method: the method instance (the spec's).
        dataset: the loaded dataset (``source`` goes to ``env.json``).
        partition: the clients' index lists.
        spec: the engine's spec (data, partition, model, :class:`~fedaug.api.RunContext`, schedule).
    """

    config: ExperimentConfig
    run_dir: Path
    settings: RunSettings
    method: Method
    dataset: Dataset
    partition: Partition
    spec: SimulationSpec

    @property
    def run(self) -> RunContext:
        """The facts every method reads (the spec's)."""
        return self.spec.run


def resolve_run(
    config: ExperimentConfig, run_dir: Path, *, method_fn: Callable[[], Method] | None = None
) -> ResolvedRun:
    """Resolves every component of ``config`` (raising a FedaugError for any bad value) into a run in
    ``run_dir`` (:func:`resolve_components`; ``method_fn`` builds the method, default :func:`build_method`).

    Warns about settings that will be slow here (bf16 without native bfloat16, batched clients of a conv
    model on a CPU).
    """
    parts = resolve_components(config, method_fn)
    settings, dataset, partition, run = parts.settings, parts.dataset, parts.partition, parts.run
    if (warning := bf16_warning(settings.precision, settings.device)) is not None:
        logger.warning(warning)
    engine, on_cpu = config.engine, settings.device.type == "cpu"
    if engine.batched_clients and on_cpu and (note := conv_model_note(parts.model_fn())):
        logger.warning(note)
    if engine.cuda_graphs is True and on_cpu:
        logger.warning("engine.cuda_graphs needs a CUDA device; this run trains on the CPU without graphs")
    elif engine.cuda_graphs is True and engine.batched_clients is True:
        logger.warning(
            "engine.cuda_graphs and engine.batched_clients: vmap-batched rounds do not record graphs "
            "(engine.batched_clients=padded ones do); "
            "rounds the batched engine refuses train client by client with graphs"
        )
    spec = SimulationSpec(
        method=parts.method,
        model_fn=parts.model_fn,
        train_x=dataset.x_train,
        train_y=dataset.y_train,
        test_x=dataset.x_test,
        test_y=dataset.y_test,
        client_indices=[torch.as_tensor(i, dtype=torch.long) for i in partition.train_indices],
        run=run,
        train_settings=config.train.settings,
        clients_per_round=parts.per_round,
        run_dir=run_dir,
        eval_batch_size=engine.eval_batch_size or default_eval_batch_size(settings.device, config.model.name),
        progress=engine.progress,
        precision=settings.precision,
        batched_clients=engine.batched_clients,
        cuda_graphs=cuda_graphs_on(engine, settings.device),
        channels_last=resolve_channels_last(engine.channels_last, config.model.name, settings.device.type),
        keep_checkpoints=tuple(engine.keep_checkpoints),
        local_test_indices=None
        if partition.test_indices is None
        else [torch.as_tensor(i, dtype=torch.long) for i in partition.test_indices],
        local_eval_every=engine.local_eval_every,
    )
    return ResolvedRun(config, run_dir, settings, parts.method, dataset, partition, spec)
