"""``fedaug attack reconstruct``: train decoders that invert what a run shares, report held-out MSE.

FLea (Xia et al., KDD 2024, arXiv:2312.02327) section 4.4 and appendix D: the attacker knows the frozen global
encoder, passes its own (public) images through it, trains a decoder on the (activation, image) pairs
(20 epochs, lr 1e-3 in the paper) and reconstructs held-out images from their activations; the paper reports
that with L_dec the MSE "can never be reduced to the value of 0.01 achieved with normal training without
L_dec" (CIFAR-10, MobileNetV2, pixels in [0, 1]). Decoders: :mod:`fedaug.attacks.decoders`.

Per target (:mod:`fedaug.attacks.target`):

* FLea (``features``): every decoder of ``--decoders`` is trained on the attacker's images and evaluated on
  held-out images: MSE in the inputs' natural scale (pixels in [0, 1]) of its outputs clamped to the inputs'
  range (:func:`fedaug.attacks.estimate.value_range`; the unclamped MSE is kept as ``plain_mse``), next to
  the trivial attacker that outputs the mean attacker image (``MSE / mean-image MSE`` near 1 means nothing
  was recovered).
* FedMix (``averages``): the attacker holds the averages themselves. Without noise no decoder can beat the
  average for squared error: the members of a group are exchangeable given their mean, so E[x_j | mean] =
  mean for every member j. The reported MSE is that of the average against each member, for random groups
  and for groups of one class (label-skewed clients make groups of few classes). Under ``method.share_dp``
  the noised average is not that mean: the score is the attacker's best estimate of a member, clamped and
  shrunk toward the members' mean by a per-feature fit on its own data through the same mechanism
  (:mod:`fedaug.attacks.estimate`), with the noised average's own MSE kept as ``plain_mse``.
* FedData (``raw``): the shared inputs are the images: MSE 0, the ceiling.

Deviation from paper: Adam instead of the official code's SGD (momentum 0.9, wd 5e-4), and the activations are
standardised per channel with the attacker's own statistics before decoding (an invertible affine map, so it
hides nothing; it only keeps an encoder that shrinks its outputs from starving the optimiser).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedaug.attacks import figures
from fedaug.attacks.decoders import DECODERS, build_decoder
from fedaug.attacks.estimate import AverageAttacker, clamp, fit_average_attacker, member_mse, value_range
from fedaug.attacks.partial import Partial
from fedaug.attacks.target import (
    Target,
    add_run_arguments,
    add_target_arguments,
    attack_device,
    attacker_split,
    is_image,
    load_targets,
    to_pixels,
)
from fedaug.errors import ConfigError
from fedaug.privacy.dcor import distance_correlation, u_distance_correlation_sqr
from fedaug.registry import register
from fedaug.runtime.seeding import seed_for, torch_generator
from fedaug.validation import flag_int, flag_number

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecoderSettings:
    """How the attacker trains a decoder (paper: 20 epochs at lr 1e-3; batch 128 as the official code)."""

    epochs: int = 20
    batch_size: int = 128
    lr: float = 1e-3
    width: int = 32


def standardize(train: Tensor, *others: Tensor) -> list[Tensor]:
    """Per-channel (axis 1; per entry for vectors) standardisation with ``train``'s mean and std."""
    axes = [0, *range(2, train.dim())]
    mean = train.mean(dim=axes, keepdim=True)
    std = train.std(dim=axes, keepdim=True).clamp_min(1e-6)
    return [(t - mean) / std for t in (train, *others)]


def train_decoder(
    name: str, features: Tensor, images: Tensor, settings: DecoderSettings, *, seed: int
) -> tuple[nn.Module, list[float]]:
    """Trains decoder ``name`` (MSE, Adam) on (standardised feature, image) pairs; returns it, on the
    features' device, and the mean training MSE of every epoch.

    The decoder is initialised and the batches are drawn on the CPU (the same on every device).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, "decoder-init", name))
        decoder = build_decoder(name, features.shape[1:], images.shape[1:], width=settings.width)
    decoder = decoder.to(features.device)
    optimizer = torch.optim.Adam(decoder.parameters(), lr=settings.lr)
    generator = torch_generator(seed, "decoder-batches", name)
    curve = []
    decoder.train()
    for _ in range(settings.epochs):
        order = torch.randperm(len(features), generator=generator)
        total = 0.0
        for start in range(0, len(order), settings.batch_size):
            idx = order[start : start + settings.batch_size].to(features.device)
            loss = nn.functional.mse_loss(decoder(features[idx]), images[idx])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
            total += loss.item() * len(idx)
        curve.append(total / len(order))
    decoder.eval()
    return decoder, curve


@torch.no_grad()
def decode(decoder: nn.Module, features: Tensor, batch_size: int = 512) -> Tensor:
    """The decoder's reconstructions of ``features`` (eval mode, batched)."""
    return torch.cat([decoder(features[i : i + batch_size]) for i in range(0, len(features), batch_size)])


def mse(a: Tensor, b: Tensor) -> float:
    """Mean squared error over every entry."""
    return float(((a - b) ** 2).mean())


def groups(labels: Tensor, size: int, generator: torch.Generator, *, same_class: bool) -> Tensor:
    """Indices ``[G, size]`` of disjoint groups: random (FedMix's shuffle and cut) or of one class each."""
    if not same_class:
        order = torch.randperm(len(labels), generator=generator)
        count = len(labels) // size
        return order[: count * size].view(count, size)
    classes = torch.unique(labels)
    counts = [int((labels == c).sum()) for c in classes]
    parts = [groups(torch.zeros(n), size, generator, same_class=False) for n in counts]
    members = [torch.nonzero(labels == c).flatten()[p] for c, p in zip(classes, parts, strict=True)]
    return torch.cat(members)


@dataclass
class Row:
    """One line of the report.

    Attributes:
        mse: the attack's score: the MSE of its reconstructions (natural scale) after the attacker's
            post-processing (:mod:`fedaug.attacks.estimate`).
        baseline_mse: the MSE of the mean attacker input (nothing recovered).
        train_mse: the decoder's last training epoch's MSE (decoders only).
        curve: the decoder's training MSE per epoch (decoders only).
        plain_mse: the MSE before the post-processing: the decoder's raw outputs, or the noised average
            itself under ``method.share_dp`` (what records written before it was added report as ``mse``);
            None where nothing is post-processed (FedMix without DP, FedData).
        estimate: what ``mse`` scores: ``clamped`` (decoders), or the attacker's pick of
            :data:`fedaug.attacks.estimate.ESTIMATES` (noised averages).
        estimates: the MSE of every estimate of a noised average (the pick is the attacker's, made on its
            own data, not on these).
    """

    target: str
    shared: str
    round: int
    attacker: str
    mse: float
    baseline_mse: float
    train_mse: float | None = None
    curve: list[float] | None = None
    plain_mse: float | None = None
    estimate: str | None = None
    estimates: dict[str, float] | None = None


def attack_features(
    target: Target,
    data: tuple[Tensor, Tensor, Tensor],
    decoders: list[str],
    settings: DecoderSettings,
    seed: int,
) -> tuple[list[Row], dict[str, Tensor], dict[str, float]]:
    """Trains each decoder on the attacker's activations; rows, example reconstructions and eval dCor."""
    x_att, x_eval, pix_att = data
    pix_eval = to_pixels(target.dataset, x_eval)
    raw_eval = target.observe(x_eval)
    f_att, f_eval = standardize(target.observe(x_att), raw_eval)
    baseline = mse(pix_att.mean(dim=0, keepdim=True).expand_as(pix_eval), pix_eval)
    sub = min(512, len(x_eval))  # dCor of the inputs and the activations as shared (not standardised)
    stats = {
        "eval_dcor_n": float(sub),
        "eval_dcor": distance_correlation(x_eval[:sub], raw_eval[:sub]),
        "eval_dcor_u": u_distance_correlation_sqr(x_eval[:sub], raw_eval[:sub]),
    }
    bounds = value_range(target.dataset, pix_att)  # the decoders' outputs are unbounded: clamped to it
    rows, examples = [], {}
    for name in decoders:
        decoder, curve = train_decoder(name, f_att, pix_att, settings, seed=seed_for(seed, target.label))
        raw = decode(decoder, f_eval)
        recon = clamp(raw, bounds)
        row = Row(target.label, target.shared, target.round_num, name, mse(recon, pix_eval), baseline)
        rows.append(
            dataclasses.replace(
                row, train_mse=curve[-1], curve=curve, plain_mse=mse(raw, pix_eval), estimate="clamped"
            )
        )
        examples[name] = recon
        logger.info("%s / %s: eval MSE %.5f (mean input %.5f)", target.label, name, rows[-1].mse, baseline)
    return rows, examples, stats


def attack_direct(
    target: Target,
    x_eval: Tensor,
    y_eval: Tensor,
    pix_att: Tensor,
    seed: int,
    *,
    attacker: tuple[Tensor, Tensor] | None = None,
) -> tuple[list[Row], dict[str, Tensor]]:
    """FedMix averages (random and same-class groups) or FedData raw inputs: the observation is the guess;
    under ``method.share_dp`` the attacker's best estimate from the noised average, fitted on its own
    (normalised) ``attacker`` inputs and labels (:mod:`fedaug.attacks.estimate`)."""
    pix_eval = to_pixels(target.dataset, x_eval)
    baseline = mse(pix_att.mean(dim=0, keepdim=True).expand_as(pix_eval), pix_eval)
    if target.shared == "raw":
        row = Row(target.label, "raw", target.round_num, "shared inputs", mse(pix_eval, pix_eval), baseline)
        return [row], {"shared inputs": pix_eval}
    if target.dp is not None and attacker is None:
        raise ValueError(f"{target.label}: noised averages are scored with the attacker's data")
    rows, examples = [], {}
    for same_class in (False, True):
        group_fn = functools.partial(_groups_of, size=target.group_size, same_class=same_class)
        # indices on the CPU, where ``where`` below is built
        members = group_fn(y_eval.cpu(), torch_generator(seed, "fedmix-groups", int(same_class)))
        if len(members) == 0:
            logger.warning("%s: too few evaluation images for groups of %d", target.label, target.group_size)
            continue
        on_device = members.to(pix_eval.device)
        averages = pix_eval[on_device].mean(dim=1)
        if target.dp is not None:  # the shared averages are of clipped normalised inputs, plus noise
            averages = to_pixels(target.dataset, target.average(x_eval[on_device]))
        guess = averages[:, None].expand(-1, target.group_size, *averages.shape[1:])
        name = f"average ({'one class' if same_class else 'random'} groups of {target.group_size})"
        row = Row(target.label, "averages", target.round_num, name, mse(guess, pix_eval[on_device]), baseline)
        if attacker is not None and target.dp is not None:
            fitted = fit_average_attacker(target, attacker, group_fn, seed=seed, key=str(int(same_class)))
            row, averages = _estimated(row, fitted, averages, pix_eval[on_device])
        rows.append(row)
        examples[name] = _group_examples(averages, members, len(pix_eval))
    return rows, examples


def _group_examples(averages: Tensor, members: Tensor, count: int, shown: int = 16) -> Tensor:
    """Example k: the average (its estimate) of the group that holds evaluation input k (zeros if none)."""
    where = torch.full((count,), -1, dtype=torch.long)
    where[members.flatten()] = torch.arange(len(members)).repeat_interleave(members.shape[1])
    return torch.stack([averages[w] if w >= 0 else torch.zeros_like(averages[0]) for w in where[:shown]])


def _groups_of(labels: Tensor, generator: torch.Generator, *, size: int, same_class: bool) -> Tensor:
    return groups(labels, size, generator, same_class=same_class)


def _estimated(row: Row, fitted: AverageAttacker, averages: Tensor, members: Tensor) -> tuple[Row, Tensor]:
    """``row`` scored at the attacker's pick of its estimates (the plain average's MSE kept as
    ``plain_mse``), and the picked estimate of every group."""
    guesses = fitted.guesses(averages)
    scores = {name: member_mse(guess, members) for name, guess in guesses.items()}
    scored = dataclasses.replace(
        row, mse=scores[fitted.choice], plain_mse=row.mse, estimate=fitted.choice, estimates=scores
    )
    return scored, guesses[fitted.choice]


def run_attack(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``fedaug attack reconstruct`` does; returns the JSON report."""
    device = attack_device(args)
    decoders = [d.strip() for d in args.decoders.split(",") if d.strip()]
    unknown = [d for d in decoders if d not in DECODERS]
    if unknown or not decoders:
        raise ConfigError(f"--decoders {args.decoders!r}: valid choices are {', '.join(DECODERS)}")
    settings = DecoderSettings(epochs=args.epochs, batch_size=args.batch_size, lr=args.lr, width=args.width)
    targets = load_targets(args.targets, data_dir=args.data_dir, layer=args.layer, device=device)
    dataset = targets[0].dataset
    x_att, y_att, x_eval, y_eval = attacker_split(
        dataset, args.attacker_data, torch_generator(args.seed, "attacker-split")
    )
    size = args.attack_size or len(x_att)
    x_att, y_att = x_att[:size].to(device), y_att[:size].to(device)
    x_eval, y_eval = x_eval[: args.eval_size].to(device), y_eval[: args.eval_size].to(device)
    pix_att = to_pixels(dataset, x_att)
    rows: list[Row] = []
    grid = [("original", to_pixels(dataset, x_eval[: args.examples]))]
    stats = {}
    out = Path(args.out)
    partial = Partial(out, "reconstruct", args)
    for target in targets:
        saved = partial.load(target)
        if saved is None:
            logger.info("attacking %s", target.describe())
            if target.shared == "features":
                found, examples, found_stats = attack_features(
                    target, (x_att, x_eval, pix_att), decoders, settings, args.seed
                )
            else:
                direct = attack_direct(target, x_eval, y_eval, pix_att, args.seed, attacker=(x_att, y_att))
                (found, examples), found_stats = direct, {}
            saved = {
                "rows": [asdict(r) for r in found],
                "examples": {name: batch[: args.examples].cpu() for name, batch in examples.items()},
                "stats": found_stats,
            }
            partial.save(target, saved)
        rows += [Row(**r) for r in saved["rows"]]
        if saved["stats"]:
            stats[target.label] = saved["stats"]
        grid += [(f"{target.label}\n{name}", batch) for name, batch in saved["examples"].items()]
    out.mkdir(parents=True, exist_ok=True)
    files = figures.example_grid(grid, out / "reconstruct_examples", image=is_image(dataset.input_shape))
    curves = {
        f"{r.target} / {r.attacker}": (list(range(1, len(r.curve) + 1)), r.curve, None)
        for r in rows
        if r.curve
    }
    if curves:
        files += figures.line_plot(
            curves,
            out / "reconstruct_training",
            xlabel="epoch",
            ylabel="training MSE",
            title="decoder training MSE",
        )
    if args.plots:
        files += flea_curves([t for t in targets], out)
    report = {
        "command": "fedaug " + " ".join(sys.argv[1:]) if sys.argv and "fedaug" in sys.argv[0] else None,
        "dataset": dataset.name,
        "device": str(device),
        "attacker_data": args.attacker_data,
        "attack_images": len(x_att),
        "eval_images": len(x_eval),
        "settings": asdict(settings),
        "targets": [{**t.record(), **stats.get(t.label, {})} for t in targets],
        "rows": [asdict(r) for r in rows],
        "files": [str(p) for p in files],
    }
    (out / "reconstruct.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "reconstruct.md").write_text(markdown(report, targets, rows))
    partial.clear()
    return report


def flea_curves(targets: list[Target], out: Path) -> list[Path]:
    """The dCor (plain, bias-corrected) and exposure curves of the targets' FLea runs (``fedaug report``)."""
    from fedaug.results.plots import plot_flea_curves
    from fedaug.results.store import group_runs, load_run

    runs = [
        load_run(d, include_unfinished=True)
        for d in dict.fromkeys(t.run_dir for t in targets if t.method.startswith("flea"))
    ]
    found = [r for r in runs if r is not None]
    return plot_flea_curves(group_runs(found), out) if found else []


def markdown(report: dict[str, Any], targets: list[Target], rows: list[Row]) -> str:
    """The report as Markdown: targets, one table row per (target, attacker), figure links."""
    lines = [f"# Reconstruction attack on {report['dataset']}", ""]
    if report["command"]:
        lines += ["```bash", report["command"], "```", ""]
    lines += [
        f"Attacker data: {report['attacker_data']} split, {report['attack_images']} images; evaluated on "
        f"{report['eval_images']} held-out images. Decoder training: {report['settings']}.",
        "",
    ]
    for info in report["targets"]:
        extra = ""
        if "eval_dcor" in info:
            extra = (
                f"; on {int(info['eval_dcor_n'])} evaluation images dCor {info['eval_dcor']:.3f}, "
                f"bias-corrected dCor^2 {info['eval_dcor_u']:.3f}"
            )
        lines.append(f"* {info['description']}{extra}")
    lines += [
        "",
        "| target | shared | round | attacker | train MSE | eval MSE | mean-image MSE | eval / mean-image "
        "| scored as | unprocessed MSE |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        train = f"{r.train_mse:.5f}" if r.train_mse is not None else "-"
        ratio = r.mse / r.baseline_mse if r.baseline_mse > 0 else float("nan")
        plain = f"{r.plain_mse:.5f}" if r.plain_mse is not None else "-"
        lines.append(
            f"| {r.target} | {r.shared} | {r.round} | {r.attacker} | {train} | {r.mse:.5f} "
            f"| {r.baseline_mse:.5f} | {ratio:.3f} | {r.estimate or 'as observed'} | {plain} |"
        )
    lines.append(
        "\nScored as: the post-processing before scoring (clamped to the inputs' range; for a noised "
        "average, the estimate the attacker picked on its own data); unprocessed MSE: before it."
    )
    lines += ["", *figures.markdown_links(report["files"])]
    del targets
    return "\n".join(lines) + "\n"


@register("attack", "reconstruct", paper="Xia et al., KDD 2024, Sec. 4.4")
class Reconstruct:
    """``fedaug attack reconstruct TARGET ...`` (see the module docstring)."""

    help = "train decoders that invert shared features / averages; report held-out MSE and example grids"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_target_arguments(parser, "reconstruct")
        parser.add_argument(
            "--decoders", default="linear,conv4,deep", help=f"comma-separated, from {', '.join(DECODERS)}"
        )
        parser.add_argument(
            "--epochs", type=flag_int(1), default=20, help="decoder training epochs (paper: 20)"
        )
        parser.add_argument("--batch-size", type=flag_int(1), default=128)
        parser.add_argument(
            "--lr", type=flag_number(0, low_open=True), default=1e-3, help="Adam learning rate (paper: 1e-3)"
        )
        parser.add_argument("--width", type=flag_int(1), default=32, help="decoder channels (paper: 32)")
        parser.add_argument(
            "--attacker-data",
            choices=("test", "train"),
            default="test",
            help="test: half of the test set is public, the other half is attacked; "
            "train: the paper's setting (train set -> test set)",
        )
        parser.add_argument(
            "--attack-size",
            type=flag_int(0),
            default=0,
            help="use at most this many attacker images (0: all)",
        )
        parser.add_argument("--eval-size", type=flag_int(1), default=2000, help="held-out images evaluated")
        parser.add_argument(
            "--layer", type=int, help="split layer for methods that share no features (default: the model's)"
        )
        parser.add_argument("--examples", type=flag_int(1), default=8, help="examples per row of the grid")
        parser.add_argument(
            "--plots", action="store_true", help="also plot the FLea runs' dCor and exposure curves"
        )
        add_run_arguments(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        torch.set_num_threads(args.threads)
        report = run_attack(args)
        for row in report["rows"]:
            print(
                f"{row['target']:<36} {row['attacker']:<34} eval MSE {row['mse']:.5f} "
                f"(mean input {row['baseline_mse']:.5f})"
            )
        print(f"report: {Path(args.out) / 'reconstruct.md'}")
        return 0
