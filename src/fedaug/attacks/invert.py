"""``fedaug attack invert``: Inverting Gradients against plain and Fed-AugMix client updates.

The Fed-AugMix paper's privacy evaluation (Sec. V, Table II), with the attack of
:mod:`fedaug.attacks.gradient_inversion`. For every stage (an ``untrained`` global model, initialised
as a run with ``--seed`` would be, and a ``converged`` one from ``--checkpoint``), every attacked batch
(``--batch-size`` training images drawn at random; the client holds exactly these and trains
``--local-epochs`` epochs of SGD on them) and every setting:

* severity 0: the client runs FedAvg (no protection), the attacker simulates cross-entropy;
* severity s > 0: the client runs ``fedaugmix`` (AugMix views + JS with loss scaling, ``--loss-scaling`` on
  and/or off) through the real method code; the attacker either models AugMix + JS with its own random draws
  (threat model ``aware``) or assumes plain cross-entropy (``ce``).

The reconstruction is compared with the client's images after de-normalising to [0, 1]: MSE, PSNR and SSIM
per image, averaged over the batch (images with the same label are interchangeable for the attacker and are
matched by lowest MSE). Results are appended to ``OUT/results.jsonl`` (one line per attack, so a grid can be
split over several invocations), ``OUT/table.md`` is rebuilt from all lines, and each invocation saves example
grids ``OUT/grid_<stage>_<tag>.png`` (needs matplotlib, the ``plots`` extra).

The client, the attacker's simulated client and the dummy images compute on ``--device``; the attacked
images, the untrained weights, AugMix's draws and the initialisations are drawn on the CPU and moved, so a GPU
attacks the same images from the same starts as the CPU.

Deviation from paper: the paper's client optimiser and learning rate are not given; the client runs SGD with
``--client-lr`` (default 1e-4, Geiping et al.'s FedAvg attack), which the attacker knows.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from fedaug.api import ClientContext, ClientData, Method, Payload, RunContext, TrainSettings
from fedaug.attacks.gradient_inversion import (
    ClientSimulation,
    InversionConfig,
    Params,
    reconstruct,
    simulated_update,
)
from fedaug.attacks.image_metrics import mse, psnr, ssim
from fedaug.attacks.invert_report import save_grid, write_table
from fedaug.attacks.target import CPU, attack_device
from fedaug.augment import AugMix
from fedaug.config.schema import MAX_THREADS
from fedaug.data.datasets import Dataset, load_dataset
from fedaug.engine.checkpoint import short_reason
from fedaug.errors import CheckpointError, ConfigError, path_error
from fedaug.methods.fedaugmix import FedAugMix, FedAugMixConfig
from fedaug.methods.fedavg import FedAvg
from fedaug.models import build_model
from fedaug.models.base import SplitModel
from fedaug.registry import register
from fedaug.runtime.device import to_device
from fedaug.runtime.seeding import seed_for, torch_generator
from fedaug.training.loop import snapshot_state
from fedaug.types import StateDict
from fedaug.validation import add_device_argument, flag_int, flag_number

logger = logging.getLogger(__name__)

STAGES = ("untrained", "converged")
THREATS = ("aware", "ce")


@dataclass(frozen=True)
class Setting:
    """One row of the table: what the client did and what the attacker assumes."""

    stage: str
    severity: float
    threat: str  # "none" (no protection), "aware" or "ce"
    loss_scaling: bool

    @property
    def label(self) -> str:
        if self.severity == 0:
            return "none"
        scaling = "LS" if self.loss_scaling else "no LS"
        return f"s={self.severity:g} {self.threat} {scaling}"


def settings_for(
    stage: str, severities: list[float], threats: list[str], scalings: list[bool]
) -> list[Setting]:
    rows = []
    for severity in severities:
        if severity == 0:
            rows.append(Setting(stage, 0.0, "none", False))
            continue
        rows += [Setting(stage, severity, t, s) for t in threats for s in scalings]
    return rows


def checkpoint_path(checkpoint: Path | None) -> Path:
    """``--checkpoint`` of the 'converged' stage, refused when missing (checked before any data loads)."""
    if checkpoint is None:
        raise ConfigError(
            "stage 'converged' needs --checkpoint (a run's ckpt/latest.pt or a state-dict file)"
        )
    if not checkpoint.exists():
        raise ConfigError(f"--checkpoint {checkpoint} does not exist")
    return checkpoint


def global_state(
    stage: str, model_fn: Any, seed: int, checkpoint: Path | None, device: torch.device = CPU
) -> StateDict:
    """The untrained model of a run with ``seed`` (the engine's init, on the CPU), or the checkpoint's global
    weights (from whatever device saved them), on ``device``."""
    if stage == "untrained":
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(seed, "init"))
            return to_device(snapshot_state(model_fn()), device)
    checkpoint = checkpoint_path(checkpoint)
    try:
        saved = torch.load(checkpoint, weights_only=True, map_location=device)
    except OSError as exc:
        raise path_error(exc, checkpoint, "read") from exc
    except Exception as exc:  # EOFError, UnpicklingError, RuntimeError (zip): a bad file
        raise CheckpointError(
            f"--checkpoint {checkpoint} is corrupt or not a checkpoint ({short_reason(exc)}); give a run's "
            "ckpt/latest.pt or a state-dict file"
        ) from exc
    if isinstance(saved, dict) and isinstance(saved.get("state"), dict):  # a run checkpoint
        saved = saved["state"].get("model_state")
    if not isinstance(saved, dict) or not all(isinstance(v, Tensor) for v in saved.values()):
        raise CheckpointError(
            f"--checkpoint {checkpoint} holds no model weights (give a run's ckpt/latest.pt or a state-dict "
            "file)"
        )
    with torch.random.fork_rng(devices=[]):  # a model to compare with, drawing nothing from the global RNG
        expected = {k: tuple(v.shape) for k, v in model_fn().state_dict().items()}
    found = {k: tuple(v.shape) for k, v in saved.items()}
    if found != expected:
        differing = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
        names = ", ".join(differing[:4]) + (", ..." if len(differing) > 4 else "")
        raise CheckpointError(
            f"--checkpoint {checkpoint} does not fit the attacked model (tensors differing: {names}); give "
            "the --data and --model of its run"
        )
    state: StateDict = saved
    return state


def victim_method(setting: Setting, js_options: dict[str, Any]) -> Method:
    if setting.severity == 0:
        return FedAvg()
    return FedAugMix(
        FedAugMixConfig(severity=setting.severity, loss_scaling=setting.loss_scaling, **js_options)
    )


def victim_update(
    method: Method, model: SplitModel, state: StateDict, x: Tensor, y: Tensor, run: RunContext, **kw: Any
) -> Params:
    """The client's real update (``w_client - w``) from the method's own ``client_update`` (SGD)."""
    ctx = ClientContext(
        client_id=0,
        round_num=1,
        data=ClientData(0, x, y, run.num_classes),
        model=model,
        generator=kw["generator"],
        run=run,
    )
    settings = TrainSettings(
        local_epochs=kw["local_epochs"], batch_size=x.shape[0], lr=kw["client_lr"], optimizer="sgd"
    )
    new_state = method.client_update(Payload(round_num=1, model_state=state, train=settings), ctx).model_state
    return {name: new_state[name] - state[name] for name, _ in model.named_parameters()}


def matched_metrics(original: Tensor, recovered: Tensor, labels: Tensor) -> tuple[dict[str, float], Tensor]:
    """Batch-mean MSE/PSNR/SSIM in [0, 1] after matching same-label images by lowest total MSE."""
    num = labels.shape[0]
    best, best_err = list(range(num)), float("inf")
    for perm in itertools.permutations(range(num)):
        if all(labels[p] == labels[i] for i, p in enumerate(perm)):
            err = float(mse(original, recovered[list(perm)]).sum())
            if err < best_err:
                best, best_err = list(perm), err
    matched = recovered[best]
    values = {
        "mse": float(mse(original, matched).mean()),
        "psnr": float(psnr(original, matched).mean()),
        "ssim": float(ssim(original, matched).mean()),
    }
    return values, matched


def floors(original: Tensor, generator: torch.Generator) -> dict[str, dict[str, float]]:
    """Reference rows: uniform noise (drawn on the CPU), a flat grey (0.5) image and a flat image of the
    batch's mean value."""
    guesses = {
        "uniform noise": torch.rand(original.shape, generator=generator).to(original.device),
        "flat grey 0.5": torch.full_like(original, 0.5),
        "flat mean": torch.full_like(original, float(original.mean())),
    }
    return {
        name: {
            "mse": float(mse(original, g).mean()),
            "psnr": float(psnr(original, g).mean()),
            "ssim": float(ssim(original, g).mean()),
        }
        for name, g in guesses.items()
    }


def pixel_bounds(dataset: Dataset, channels: int, device: torch.device = CPU) -> tuple[Tensor, Tensor]:
    """The normalised values of pixel 0 and pixel 1 per channel ``[1, C, 1, 1]``, on ``device``."""
    mean = torch.tensor(dataset.mean or (0.0,) * channels, device=device).view(1, -1, 1, 1)
    std = torch.tensor(dataset.std or (1.0,) * channels, device=device).view(1, -1, 1, 1)
    return (0 - mean) / std, (1 - mean) / std


def attack_one(setting: Setting, ctx: dict[str, Any], x: Tensor, y: Tensor, batch: int) -> dict[str, Any]:
    """Runs the client and the attacker for one setting and batch; returns the result row."""
    args, dataset, run, state = ctx["args"], ctx["dataset"], ctx["run"], ctx["state"]
    keys = (setting.stage, batch, setting.label)
    model = ctx["model_fn"]()
    target = victim_update(
        victim_method(setting, ctx["js_options"]),
        model,
        state,
        x,
        y,
        run,
        generator=torch_generator(args.seed, "victim", *keys),
        local_epochs=args.local_epochs,
        client_lr=args.client_lr,
    )
    model.load_state_dict(state)
    model.train()  # the client's BN mode
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = {k: v.detach() for k, v in model.named_buffers()}
    aware = setting.threat == "aware"
    augmix_config = FedAugMixConfig(
        severity=setting.severity, loss_scaling=setting.loss_scaling, **ctx["js_options"]
    )
    client = ClientSimulation(
        steps=args.local_epochs,
        lr=args.client_lr,
        augmix=augmix_config if aware else None,
        mean=dataset.mean,
        std=dataset.std,
    )
    draws = None
    if aware:
        augmix = AugMix(severity=setting.severity, mean=dataset.mean, std=dataset.std)
        gen = torch_generator(args.seed, "attacker-views", *keys)
        draws = [
            to_device(augmix.sample(2, x.shape[0], x.shape[2], x.shape[3], gen), x.device)
            for _ in range(args.local_epochs)
        ]
    update_fn = simulated_update(model, params, buffers, y, client, draws)
    tick = time.perf_counter()
    recovered, cost = reconstruct(
        update_fn,
        target,
        tuple(x.shape),
        pixel_bounds(dataset, x.shape[1], x.device),
        ctx["inversion"],
        torch_generator(args.seed, "attacker-init", *keys),
    )
    seconds = time.perf_counter() - tick
    original = dataset.denormalize(x).clamp(0, 1)
    values, matched = matched_metrics(original, dataset.denormalize(recovered).clamp(0, 1), y)
    ctx["grid"].setdefault(setting.stage, {})[setting.label] = (original, matched)
    row = {**asdict(setting), "label": setting.label, "batch": batch, **values, "cost": cost}
    row |= {"seconds": round(seconds, 1), **ctx["meta"]}
    logger.info(
        "%s batch %d %s: PSNR %.2f dB, SSIM %.3f, MSE %.4f (%.0f s)",
        setting.stage,
        batch,
        setting.label,
        values["psnr"],
        values["ssim"],
        values["mse"],
        seconds,
    )
    return row


def run(args: argparse.Namespace) -> int:
    device = attack_device(args)
    torch.set_num_threads(args.threads)
    stages = choices(args.stages, STAGES, "--stages")
    threats = choices(args.threat_models, THREATS, "--threat-models")
    try:
        severities = [float(s) for s in args.severities.split(",")]
    except ValueError:
        raise ConfigError(f"--severities takes comma-separated numbers, got {args.severities!r}") from None
    scalings = {"on": [True], "off": [False], "both": [True, False]}[args.loss_scaling]
    checkpoint = Path(args.checkpoint) if args.checkpoint else None
    if "converged" in stages:
        checkpoint_path(checkpoint)  # a missing checkpoint is refused before the dataset loads
    dataset = load_dataset(args.data, data_dir=args.data_dir)
    if len(dataset.input_shape) != 3 or min(dataset.input_shape[1:]) < 11:  # SSIM's 11x11 window
        raise ConfigError(
            f"attack invert needs an image dataset of at least 11x11 pixels, {args.data} has inputs "
            f"{dataset.input_shape}"
        )

    def model_fn() -> SplitModel:  # initialised on the CPU (the same weights on every device), then moved
        model = build_model(args.model, num_classes=dataset.num_classes, input_shape=dataset.input_shape)
        return model.to(device)

    run_ctx = RunContext(
        num_clients=1,
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape),
        seed=args.seed,
        num_rounds=1,
        input_mean=dataset.mean,
        input_std=dataset.std,
        input_modality=dataset.modality,
        device=device,
    )
    js_options = {
        "js_lambda": args.js_lambda,
        "scaled_lambda": args.scaled_lambda,
        "scaling_kappa": args.kappa,
    }
    inversion = InversionConfig(
        iterations=args.iterations, lr=args.attack_lr, tv_weight=args.tv, restarts=args.restarts
    )
    # every stage's weights read (a bad --checkpoint refused) before anything is written
    states = {stage: global_state(stage, model_fn, args.seed, checkpoint, device) for stage in stages}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {
        "data": args.data,
        "model": args.model,
        "iterations": args.iterations,
        "tv": args.tv,
        "batch_size": args.batch_size,
        "local_epochs": args.local_epochs,
        "client_lr": args.client_lr,
        "restarts": args.restarts,
        "seed": args.seed,
        "device": str(device),
        **js_options,
    }
    ctx: dict[str, Any] = {
        "args": args,
        "dataset": dataset,
        "run": run_ctx,
        "model_fn": model_fn,
        "grid": {},
        "js_options": js_options,
        "inversion": inversion,
        "meta": meta,
    }
    rows = []
    for stage in stages:
        ctx["state"] = states[stage]
        for batch in range(args.num_batches):
            gen = torch_generator(args.seed, "attack-images", batch)
            idx = torch.randperm(dataset.num_train, generator=gen)[: args.batch_size]
            x, y = dataset.x_train[idx].to(device), dataset.y_train[idx].to(device)
            floor = floors(dataset.denormalize(x).clamp(0, 1), gen)
            rows += [
                {"stage": stage, "label": name, "batch": batch, "floor": True, **v, **meta}
                for name, v in floor.items()
            ]
            for setting in settings_for(stage, severities, threats, scalings):
                row = attack_one(setting, ctx, x, y, batch)
                rows.append(row)
                with open(out / "results.jsonl", "a") as handle:
                    handle.write(json.dumps(row) + "\n")
    with open(out / "floors.jsonl", "a") as handle:
        handle.writelines(json.dumps(r) + "\n" for r in rows if r.get("floor"))
    write_table(out)
    tag = args.tag or "-".join(f"{s:g}" for s in severities)
    for stage, grid in ctx["grid"].items():
        save_grid(grid, out / f"grid_{stage}_{tag}.png", title=f"{args.data} {args.model}, {stage} model")
    logger.info("wrote %s", out / "table.md")
    return 0


def choices(value: str, valid: tuple[str, ...], flag: str) -> list[str]:
    """Comma-separated names, each one of ``valid`` (ConfigError naming the choices otherwise)."""
    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in valid]
    if bad or not names:
        raise ConfigError(f"{flag} got {value!r}; valid choices: {', '.join(valid)}")
    return names


@register("attack", "invert", paper="Geiping et al., NeurIPS 2020; Fed-AugMix, Sec. V")
class Invert:
    """Inverting Gradients against FedAvg and Fed-AugMix client updates (MSE, PSNR, SSIM, example grids)."""

    help = "Inverting Gradients on a client's multi-step update, with and without Fed-AugMix"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add = parser.add_argument
        add("--data", default="mnist", help="image dataset (default mnist)")
        add("--data-dir", help="directory holding the datasets (default: $FEDAUG_DATA)")
        add("--model", default="lenet5", help="model (default lenet5; the paper uses convnet for CIFAR)")
        add("--checkpoint", help="global weights of the 'converged' stage: a run's ckpt/latest.pt")
        add("--stages", default="untrained,converged", help="untrained and/or converged")
        add("--severities", default="0,1,3,5,10", help="AugMix severities; 0 = no protection")
        add("--threat-models", default="aware,ce", help="aware (attacker models AugMix + JS) and/or ce")
        add("--loss-scaling", choices=("on", "off", "both"), default="on", help="the client's loss scaling")
        add(
            "--num-batches",
            type=flag_int(1),
            default=1,
            help="attacked batches (each a client of --batch-size images)",
        )
        add("--batch-size", type=flag_int(1), default=4, help="images per client (paper: 4)")
        add("--local-epochs", type=flag_int(1), default=5, help="client epochs = SGD steps (paper: 5)")
        add(
            "--client-lr",
            type=flag_number(0, low_open=True),
            default=1e-4,
            help="client SGD learning rate (default 1e-4)",
        )
        add("--iterations", type=flag_int(1), default=2500, help="attack iterations (paper: 2500)")
        add(
            "--attack-lr",
            type=flag_number(0, low_open=True),
            default=0.1,
            help="signed-Adam step size (paper: 0.1)",
        )
        add(
            "--tv",
            type=flag_number(0),
            default=1e-2,
            help="total-variation weight (paper's value lost; default 1e-2)",
        )
        add("--restarts", type=flag_int(1), default=1, help="random restarts, best final cost kept")
        add("--js-lambda", type=flag_number(0), default=FedAugMixConfig.js_lambda, help="Fed-AugMix lambda")
        add(
            "--scaled-lambda",
            type=flag_number(0),
            default=FedAugMixConfig.scaled_lambda,
            help="Fed-AugMix Lambda",
        )
        add("--kappa", type=flag_number(0), default=FedAugMixConfig.scaling_kappa, help="Fed-AugMix kappa")
        add(
            "--seed",
            type=flag_int(0),
            default=0,
            help="seed of the images, the untrained model and all draws",
        )
        add("--threads", type=flag_int(1, MAX_THREADS), default=1, help="torch threads (default 1)")
        add_device_argument(parser)
        add("--tag", help="name part of the grid files (default: the severities)")
        add("--out", default="runs/attack_invert", help="output directory (results.jsonl, table.md, grids)")

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        return run(args)
