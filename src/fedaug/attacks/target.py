"""What an attacker observes of a finished (or running) federated run, rebuilt from its run directory.

A target is written ``[LABEL=]RUN_DIR[@ROUND]``: the run dir's ``config.yaml`` rebuilds the dataset, model and
method, and ``ckpt/latest.pt`` (or ``ckpt/round_NNNN.pt``, kept with ``engine.keep_checkpoints``) holds the
global model. What the run's clients share decides what the attacker gets (:data:`SHARED`):

* ``features`` (FLea): activations of single inputs at the method's split layer, through the global encoder;
* ``averages`` (FedMix): averages of ``mean_group_size`` inputs (pixel space), no model involved;
* ``raw`` (FedData): the inputs themselves (the ceiling: reconstruction MSE 0).

A run with ``method.share_dp`` on shared its rows clipped and noised (:mod:`fedaug.privacy.gaussian`); the
attacker knows the mechanism (it is in the run's config) and observes its own inputs through it too:
activations clipped to the clip plus noise of std sigma times it, FedMix averages of inputs clipped before
averaging plus noise of std sigma times clip / g (:meth:`Target.observe`, :meth:`Target.average`), the noise
from a CPU stream of the run's seed.

A method that shares nothing is attacked only when ``--layer`` says which activations to attack as if they
were shared (what its encoder would leak); without it the command stops, naming the methods that share. A
``--layer`` other than the one a FLea run shared stops it too. Every target is checked (config, checkpoint,
split layer) before any attack trains. Reconstruction targets are the inputs in
their natural scale (``Dataset.denormalize``: pixels in [0, 1] for images, the raw signal for UCI-HAR).

Every attack computes on ``--device`` (:func:`attack_device`, resolved before any data is loaded): the
checkpoints are loaded onto it (``map_location``, whatever device the run trained on), the models live there,
and the commands move the attacked inputs there; the datasets stay on the CPU and every random draw comes from
a CPU generator, so an attack on a GPU picks the same images, groups and batches as on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedaug.api import Method, ServerState
from fedaug.config.load import config_from_dict
from fedaug.config.schema import MAX_THREADS, ExperimentConfig
from fedaug.config.yamlio import read_yaml_file
from fedaug.data.datasets import Dataset, load_dataset
from fedaug.engine.checkpoint import RunStore, corrupt_file, read_jsonl, short_reason
from fedaug.errors import CheckpointError, ConfigError
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.privacy.gaussian import GaussianShare, clip_rows, gaussian_noise
from fedaug.runs.resolve import build_method
from fedaug.runtime.device import resolve_device
from fedaug.runtime.seeding import torch_generator
from fedaug.validation import add_device_argument, flag_int

SHARED = {
    "flea": "features",
    "flea_eq6": "features",
    "flea_official": "features",
    "fedmix": "averages",
    "feddata": "raw",
}
"""What each method's clients share with others (methods not listed share only model weights)."""
CPU = torch.device("cpu")


@dataclass
class Target:
    """One attacked model state.

    Attributes:
        label: name in tables and figures.
        run_dir: the run directory.
        round_num: the round whose global model is attacked.
        method: the run's method name.
        shared: ``features``, ``averages`` or ``raw`` (see the module docstring).
        dataset: the run's dataset (loaded once per distinct data config).
        model: the global model in eval mode (None for ``averages`` / ``raw``).
        layer: the split layer whose activations are observed (None unless ``features``).
        group_size: inputs per FedMix average (1 otherwise).
        metrics: the run's logged metrics of that round (``test/acc``, ``flea/dcor``, ...), if any.
        dp: the run's ``method.share_dp`` mechanism (None: off, the rows are observed as computed).
        noise: the CPU stream the mechanism's noise is drawn from (None without ``dp``).
    """

    label: str
    run_dir: Path
    round_num: int
    method: str
    shared: str
    dataset: Dataset
    model: SplitModel | None
    layer: int | None
    group_size: int
    metrics: dict[str, Any]
    dp: GaussianShare | None = None
    noise: torch.Generator | None = None

    @torch.no_grad()
    def observe(self, x: Tensor, batch_size: int = 512) -> Tensor:
        """What the attacker sees of each (normalised) input ``x``: its activation, or ``x`` itself (under
        ``method.share_dp``: clipped, plus the mechanism's noise)."""
        if self.shared == "averages":
            raise ConfigError(f"{self.label}: FedMix averages are observed per group, not per input")
        if self.model is None or self.layer is None:
            return x.clone()
        parts = [self.model.encode(x[i : i + batch_size], self.layer) for i in range(0, len(x), batch_size)]
        return self._noised(torch.cat(parts), 1)

    @torch.no_grad()
    def average(self, groups: Tensor, noise: torch.Generator | None = None) -> Tensor:
        """The shared average of each group of (normalised) inputs ``[G, g, ...]`` (under
        ``method.share_dp``: of the inputs clipped, plus the mechanism's noise, drawn from ``noise`` or, by
        default, from the target's stream)."""
        if self.dp is not None:
            groups = clip_rows(groups.flatten(0, 1), self.dp.clip).view(groups.shape)
        return self._noised(groups.mean(dim=1), groups.shape[1], noise)

    def _noised(self, rows: Tensor, group: int, noise: torch.Generator | None = None) -> Tensor:
        """``rows`` (averages of ``group`` clipped inputs, or rows to clip when 1) plus the noise."""
        stream = noise if noise is not None else self.noise
        if self.dp is None or stream is None:
            return rows
        if group == 1:
            rows = clip_rows(rows, self.dp.clip)
        std = self.dp.noise_multiplier * self.dp.clip / group
        return rows + gaussian_noise(tuple(rows.shape), std, stream, rows)

    def record(self) -> dict[str, Any]:
        """The target as attack reports list it (``fedaug attack summary`` / ``frontier`` read it back)."""
        return {
            "label": self.label,
            "run_dir": str(self.run_dir),
            "round": self.round_num,
            "shared": self.shared,
            "description": self.describe(),
        }

    def describe(self) -> str:
        """One line: label, method, round, what is shared, and the logged dCor / accuracy of that round."""
        what = {"features": f"activations at layer {self.layer}", "raw": "raw inputs"}.get(
            self.shared, f"averages of {self.group_size} inputs"
        )
        logged = ", ".join(
            f"{key.split('/')[-1]} {self.metrics[key]:.3f}"
            for key in ("test/acc", "flea/dcor", "flea/dcor_u")
            if isinstance(self.metrics.get(key), float)
        )
        return f"{self.label}: {self.method} round {self.round_num}, {what}" + (
            f" ({logged})" if logged else ""
        )


def parse_spec(spec: str) -> tuple[str | None, Path, int | None]:
    """``[LABEL=]RUN_DIR[@ROUND]`` -> (label, run dir, round or None for the latest checkpoint).

    Sweep run dirs contain ``=`` (``runs/t/method.q=0.01/...``): the text before the first ``=`` is a label
    only if it holds no ``/`` and the spec is not an existing path.
    """
    head, sep, tail = spec.partition("=")
    is_path = any(Path(text).exists() for text in (spec, spec.rpartition("@")[0]) if text)
    label, rest = (head, tail) if sep and "/" not in head and not is_path else ("", spec)
    path, _, round_text = rest.rpartition("@") if "@" in rest else (rest, "", "")
    if round_text and not round_text.isdigit():
        raise ConfigError(f"target {spec!r}: the round after '@' must be a number, got {round_text!r}")
    return (label or None), Path(path), (int(round_text) if round_text else None)


def run_config(run_dir: Path, device: torch.device | None = None) -> ExperimentConfig:
    """The run's resolved config (``config.yaml``); with ``device``, its ``engine.device`` is that device (the
    one this command computes on wins over the one the run recorded)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml)")
    try:
        raw = read_yaml_file(path, "run config")
        if not isinstance(raw, dict):
            raise ConfigError(f"a {type(raw).__name__}, not a mapping of config keys")
        config = config_from_dict(raw)
    except ConfigError as exc:
        raise corrupt_file(path, str(exc), "run config") from exc
    if device is None:
        return config
    return dataclasses.replace(config, engine=dataclasses.replace(config.engine, device=str(device)))


def load_targets(
    specs: Sequence[str],
    *,
    data_dir: str | None = None,
    layer: int | None = None,
    device: torch.device = CPU,
) -> list[Target]:
    """Targets for ``specs`` with their models on ``device``, all on one dataset (raises ConfigError when
    they differ)."""
    datasets: dict[str, Dataset] = {}
    targets = []
    for spec in specs:
        label, run_dir, round_num = parse_spec(spec)
        config = run_config(run_dir, device)
        if config.method.name not in SHARED and layer is None:
            raise ConfigError(
                f"{run_dir}: {config.method.name} shares only model weights (methods that share what these "
                f"attacks read: {', '.join(sorted(SHARED))}); pass --layer N to attack its encoder anyway"
            )
        ckpt = run_checkpoint(run_dir, round_num, device)
        key = repr((config.data.name, sorted(config.data.options.items())))
        if key not in datasets:
            if datasets:
                raise ConfigError(
                    f"target {spec!r} uses another dataset than {specs[0]!r}; attack one at a time"
                )
            datasets[key] = load_dataset(
                config.data.name, data_dir=data_dir or config.data.data_dir, **config.data.options
            )
        targets.append(_target(label, run_dir, ckpt, config, datasets[key], layer, device))
    return targets


def run_checkpoint(run_dir: Path, round_num: int | None, device: torch.device = CPU) -> dict[str, Any]:
    """The run's checkpoint after ``round_num`` (None: the latest) with its tensors on ``device`` (from
    whatever device the run saved it on), read before any dataset is loaded.

    Raises:
        ConfigError: no checkpoint for that round (naming the kept rounds).
    """
    store = RunStore(run_dir)
    ckpt = store.load_checkpoint(round_num, map_location=device)
    if ckpt is None:
        kept = ", ".join(map(str, store.kept_rounds())) or "none"
        raise ConfigError(
            f"{run_dir} has no checkpoint for round {round_num if round_num is not None else 'latest'} "
            f"(kept rounds: {kept}; keep more with --set engine.keep_checkpoints=[...])"
        )
    return ckpt


def global_model(
    ckpt: dict[str, Any],
    config: ExperimentConfig,
    dataset: Dataset,
    device: torch.device = CPU,
) -> tuple[SplitModel, Method, int]:
    """The global model of ``ckpt`` (from :func:`run_checkpoint`) on ``device`` in eval mode, its method and
    the round it is from."""
    method = build_method(config)
    model = build_model(
        config.model.name,
        num_classes=dataset.num_classes,
        input_shape=dataset.input_shape,
        **config.model.options,
    ).to(device)
    try:
        model.load_state_dict(method.eval_state(ServerState(**ckpt["state"])))
    except (RuntimeError, KeyError, TypeError) as exc:  # a checkpoint of another model, or crafted
        raise CheckpointError(
            f"the checkpoint does not fit the run's model {config.model.name!r} ({short_reason(exc)}); "
            "restore the run's own ckpt/latest.pt"
        ) from exc
    model.eval()
    return model, method, int(ckpt["round_num"])


def _target(
    label: str | None,
    run_dir: Path,
    ckpt: dict[str, Any],
    config: ExperimentConfig,
    dataset: Dataset,
    layer: int | None,
    device: torch.device,
) -> Target:
    model, method, done = global_model(ckpt, config, dataset, device)
    name = config.method.name
    shared = SHARED.get(name, "features")
    split = None
    if shared == "features":
        split = _split_layer(run_dir, name, model, method, layer)
    group_size = int(getattr(method.config, "mean_group_size", 1)) if shared == "averages" else 1
    metrics = next((r for r in read_jsonl(run_dir / "metrics.jsonl") if r["round"] == done), {})
    default_label = f"{name}" + (f" ({config.name})" if config.name else "") + f" r{done}"
    dp = getattr(method, "dp", None) if shared in ("features", "averages") else None
    return Target(
        label=label or default_label,
        run_dir=run_dir,
        round_num=done,
        method=name,
        shared=shared,
        dataset=dataset,
        model=model if shared == "features" else None,
        layer=split,
        group_size=group_size,
        metrics=metrics,
        dp=dp,
        noise=None if dp is None else torch_generator(config.seed, "attack-share-dp", done),
    )


def _split_layer(run_dir: Path, name: str, model: SplitModel, method: Method, layer: int | None) -> int:
    """The layer whose activations are attacked: the one the run shared, or ``--layer`` for a method that
    shares nothing (raises ConfigError naming the run dir for a layer the model lacks or the run did not
    share)."""
    method_layer = getattr(method, "layer", None)
    shared = int(method_layer(model)) if callable(method_layer) else None
    if layer is None:
        return shared if shared is not None else model.default_split
    valid = f"{model.split_layers.start}..{model.split_layers.stop - 1}"
    if layer not in model.split_layers:
        raise ConfigError(
            f"{run_dir}: --layer {layer} does not exist in its {type(model).__name__} (valid: {valid})"
        )
    if shared is not None and layer != shared:
        raise ConfigError(
            f"{run_dir}: {name} shared the activations of split layer {shared}, not --layer {layer}; "
            "leave --layer out to attack what it shared"
        )
    return layer


def to_pixels(dataset: Dataset, x: Tensor) -> Tensor:
    """Normalised inputs -> natural scale (pixels in [0, 1] for images)."""
    return dataset.denormalize(x)


def from_pixels(dataset: Dataset, pixels: Tensor) -> Tensor:
    """Natural scale -> the normalised inputs the models take (inverse of :func:`to_pixels`)."""
    if dataset.mean is None or dataset.std is None:
        return pixels
    view = [1] * pixels.dim()
    view[dataset.norm_axis + 1] = -1
    mean = torch.tensor(dataset.mean, dtype=pixels.dtype, device=pixels.device).view(view)
    std = torch.tensor(dataset.std, dtype=pixels.dtype, device=pixels.device).view(view)
    return (pixels - mean) / std


def attacker_split(
    dataset: Dataset, source: str, generator: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(attacker x, attacker y, evaluation x, evaluation y), normalised, on the CPU (as the dataset).

    ``source = "test"``: a random half of the test set is the attacker's public data, the other half is
    evaluated (the attacker never saw clients' data). ``source = "train"``: the paper's setting (appendix D):
    the attacker trains on the whole train set and is evaluated on the test set.
    """
    if source == "train":
        return dataset.x_train, dataset.y_train, dataset.x_test, dataset.y_test
    if source != "test":
        raise ConfigError(f"--attacker-data must be one of test, train; got {source!r}")
    order = torch.randperm(dataset.num_test, generator=generator)
    half = math.ceil(dataset.num_test / 2)
    a, e = order[:half], order[half:]
    return dataset.x_test[a], dataset.y_test[a], dataset.x_test[e], dataset.y_test[e]


def is_image(shape: Sequence[int]) -> bool:
    """Whether samples of ``shape`` can be shown as images (``[1 or 3, H, W]`` with H, W >= 8)."""
    return len(shape) == 3 and shape[0] in (1, 3) and min(shape[1:]) >= 8


def add_target_arguments(parser: argparse.ArgumentParser, report: str) -> None:
    """The run dirs to attack and ``--out``: the first arguments of every ``fedaug attack`` command."""
    parser.add_argument(
        "targets",
        nargs="+",
        metavar="[LABEL=]RUN_DIR[@ROUND]",
        help="run dirs to attack (@ROUND: a kept checkpoint)",
    )
    parser.add_argument("--out", required=True, help=f"folder for {report}.md/.json and the figures")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """``--seed``, ``--threads``, ``--data-dir`` and ``--device``: the last arguments of every
    ``fedaug attack`` command."""
    parser.add_argument("--seed", type=flag_int(0), default=0)
    parser.add_argument("--threads", type=flag_int(1, MAX_THREADS), default=1, help="torch threads")
    parser.add_argument("--data-dir", help="dataset folder (default: the run's, then $FEDAUG_DATA)")
    add_device_argument(parser)


def attack_device(args: argparse.Namespace) -> torch.device:
    """``--device`` resolved on this machine; raises DeviceError (exit 2) naming the devices it has.

    Called first, before any data is loaded or any output written.
    """
    return resolve_device(args.device, key="--device")
