"""``fedaug attack context``: detect a "broken camera" marker from what a run shares.

FLea (Xia et al., KDD 2024, arXiv:2312.02327) section 2.4, section 4.4 and appendix D: a client's camera has a
defect, a coloured square in every photo. FedMix's averages keep the square (averaging images that all carry
it keeps it), FLea's activations are meant to hide it. The attacker knows the marker, adds it to half of its
images, and trains a binary classifier of four linear layers on what would be shared: single activations
(FLea), averages of ``mean_group_size`` images that all carry the marker or all do not (FedMix), or raw
images (FedData). The paper reports the test accuracy against the attacker's number of training samples: "to
attain a 90% accuracy rate, FedMix needs approximately 300 training samples, whereas FLea (rho = 0.4) demands
10,000".

Protocol here: training samples come from the attacker's pool (``--attacker-data``, default ``train``: the
paper marks half of the training set), the evaluation samples (half marked) from held-out images; each
training size is repeated with fresh samples and a fresh classifier; a sample is marked with probability 1/2
exactly (balanced). Group members are drawn with replacement from the pool (a repeat inside a group of 10
from 60,000 images is rare and harmless).

Deviation from paper: the paper does not say what sits between the four linear layers, nor how the
classifier is trained: we use ReLU, standardise the inputs with the training samples' statistics, and train
with Adam (lr 1e-3, batch 64) for max(``--min-steps``, ``--epochs`` passes) steps.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from fedaug.attacks import figures
from fedaug.attacks.partial import Partial
from fedaug.attacks.target import (
    Target,
    add_run_arguments,
    add_target_arguments,
    attack_device,
    attacker_split,
    from_pixels,
    is_image,
    load_targets,
    to_pixels,
)
from fedaug.errors import ConfigError
from fedaug.registry import register
from fedaug.runtime.seeding import seed_for, torch_generator
from fedaug.validation import flag_int, flag_number

logger = logging.getLogger(__name__)


def default_colour(channels: int) -> tuple[float, ...]:
    """Red for RGB inputs (the paper's figure), full intensity (white) on every channel otherwise."""
    return (1.0, 0.0, 0.0) if channels == 3 else (1.0,) * channels


def add_marker(
    pixels: Tensor,
    *,
    size: int = 5,
    top: int = 2,
    left: int = 2,
    colour: tuple[float, ...] | None = None,
    width: int | None = None,
) -> Tensor:
    """A copy of ``pixels [B, C, H, W]`` (natural scale) with a ``size x width`` rectangle (a square when
    ``width`` is None) of ``colour`` at (``top``, ``left``) on every image (the official code's figure: 5x5
    at rows/cols 2-6 of a 32x32 image). On sensor windows (UCI-HAR: ``[1, 128, 3]``, time x channel) a
    ``16 x 1`` rectangle is one channel stuck at a constant for 16 samples.

    Raises:
        ConfigError: if the rectangle does not fit or the colour does not have one value per channel.
    """
    if pixels.dim() != 4:
        raise ConfigError(f"the marker needs [B, C, H, W] inputs, got shape {list(pixels.shape)}")
    _, channels, height, columns = pixels.shape
    wide = size if width is None else width
    colour = default_colour(channels) if colour is None else tuple(colour)
    if len(colour) != channels:
        raise ConfigError(f"--marker-colour needs {channels} values (one per channel), got {list(colour)}")
    if min(size, wide) < 1 or top < 0 or left < 0 or top + size > height or left + wide > columns:
        raise ConfigError(
            f"a {size}x{wide} marker at ({top}, {left}) does not fit in {height}x{columns} inputs"
        )
    marked = pixels.clone()
    square = torch.tensor(colour, dtype=pixels.dtype, device=pixels.device).view(-1, 1, 1)
    marked[:, :, top : top + size, left : left + wide] = square
    return marked


@dataclass(frozen=True)
class Marker:
    """Where and how the marker is drawn (see :func:`add_marker`)."""

    size: int = 5
    top: int = 2
    left: int = 2
    colour: tuple[float, ...] | None = None
    width: int | None = None

    def apply(self, pixels: Tensor) -> Tensor:
        return add_marker(
            pixels, size=self.size, top=self.top, left=self.left, colour=self.colour, width=self.width
        )


def make_samples(
    target: Target, pool: Tensor, count: int, marker: Marker, generator: torch.Generator, group_size: int
) -> tuple[Tensor, Tensor]:
    """``count`` shared items (flattened), exactly half of them marked, and their labels (1 = marked), on
    ``pool``'s device.

    ``pool`` holds normalised inputs; the marker is drawn in natural scale and the inputs normalised again.
    FedMix items average ``group_size`` inputs that are all marked or all clean. The labels and members are
    drawn from ``generator`` on the CPU (the same on every device).
    """
    labels = (torch.randperm(count, generator=generator) < count // 2).long().to(pool.device)
    size = group_size if target.shared == "averages" else 1
    if count * size <= len(pool) and size == 1:
        idx = torch.randperm(len(pool), generator=generator)[:count].view(count, 1)
    else:
        idx = torch.randint(len(pool), (count, size), generator=generator)
    pixels = to_pixels(target.dataset, pool[idx.flatten().to(pool.device)])
    marked_rows = labels.repeat_interleave(size).bool()
    pixels[marked_rows] = marker.apply(pixels[marked_rows])
    inputs = from_pixels(target.dataset, pixels)
    if target.shared == "averages":
        items = target.average(inputs.view(count, size, *inputs.shape[1:]))
    else:
        items = target.observe(inputs)
    return items.flatten(1), labels


class MarkerClassifier(nn.Module):
    """Four linear layers with ReLU between them, on standardised inputs (stats of the training samples)."""

    mean: Tensor
    std: Tensor

    def __init__(self, train_x: Tensor, hidden: tuple[int, int, int] = (256, 128, 64)) -> None:
        super().__init__()
        self.register_buffer("mean", train_x.mean(dim=0))
        self.register_buffer("std", train_x.std(dim=0).nan_to_num(1.0).clamp_min(1e-6))
        sizes = (train_x.shape[1], *hidden)
        layers: list[nn.Module] = []
        for cin, cout in itertools.pairwise(sizes):
            layers += [nn.Linear(cin, cout), nn.ReLU()]
        self.net = nn.Sequential(*layers, nn.Linear(sizes[-1], 2))

    def forward(self, x: Tensor) -> Tensor:
        logits: Tensor = self.net((x - self.mean) / self.std)
        return logits


@dataclass(frozen=True)
class ClassifierSettings:
    """Training of the marker classifier (see the module docstring)."""

    epochs: int = 10
    min_steps: int = 500
    batch_size: int = 64
    lr: float = 1e-3


def train_classifier(x: Tensor, y: Tensor, settings: ClassifierSettings, *, seed: int) -> MarkerClassifier:
    """Trains a :class:`MarkerClassifier` on ``(x, y)`` with cross-entropy and Adam, on ``x``'s device (its
    weights initialised and its batches drawn on the CPU, the same on every device)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed_for(seed, "classifier-init"))
        model = MarkerClassifier(x)
    model = model.to(x.device)
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    generator = torch_generator(seed, "classifier-batches")
    batch = min(settings.batch_size, len(x))
    steps = max(settings.min_steps, settings.epochs * math.ceil(len(x) / batch))
    order, pos = torch.randperm(len(x), generator=generator), 0
    model.train()
    for _ in range(steps):
        if pos + batch > len(order):
            order, pos = torch.randperm(len(x), generator=generator), 0
        idx = order[pos : pos + batch].to(x.device)
        pos += batch
        loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
    model.eval()
    return model


@torch.no_grad()
def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Fraction of ``x`` classified as ``y``."""
    return float((model(x).argmax(dim=1) == y).float().mean())


def accuracy_curve(
    target: Target,
    pools: tuple[Tensor, Tensor],
    sizes: list[int],
    *,
    repeats: int,
    eval_size: int,
    marker: Marker,
    settings: ClassifierSettings,
    seed: int,
) -> dict[int, list[float]]:
    """Test accuracy of each repeat for each training size (evaluation samples fixed per target)."""
    group = target.group_size
    eval_x, eval_y = make_samples(
        target, pools[1], eval_size, marker, torch_generator(seed, "context-eval"), group
    )
    curve = {}
    for size in sizes:
        accs = []
        for rep in range(repeats):
            gen = torch_generator(seed, "context-train", size, rep)
            x, y = make_samples(target, pools[0], size, marker, gen, group)
            model = train_classifier(x, y, settings, seed=seed_for(seed, size, rep))
            accs.append(accuracy(model, eval_x, eval_y))
        curve[size] = accs
        logger.info("%s: %d samples -> accuracy %.3f", target.label, size, sum(accs) / len(accs))
    return curve


def _stats(values: list[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return mean, std


def needed(curve: dict[int, list[float]], level: float = 0.9) -> int | None:
    """The smallest training size whose mean accuracy reaches ``level`` (None if none does)."""
    return next((s for s in sorted(curve) if _stats(curve[s])[0] >= level), None)


def _parse_floats(text: str, what: str) -> tuple[float, ...]:
    try:
        return tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError as error:
        raise ConfigError(f"{what} must be comma-separated numbers, got {text!r}") from error


def run_attack(args: argparse.Namespace) -> dict[str, Any]:
    """Everything ``fedaug attack context`` does; returns the JSON report."""
    device = attack_device(args)
    sizes = [int(v) for v in _parse_floats(args.sizes, "--sizes")]
    if not sizes or min(sizes) < 2 or args.repeats < 1:
        raise ConfigError(f"--sizes needs training sizes >= 2 and --repeats >= 1, got {args.sizes!r}")
    top, left = (int(v) for v in _parse_floats(args.marker_at, "--marker-at")[:2])
    colour = _parse_floats(args.marker_colour, "--marker-colour") if args.marker_colour else None
    marker = Marker(size=args.marker_size, top=top, left=left, colour=colour, width=args.marker_width)
    settings = ClassifierSettings(args.epochs, args.min_steps, args.batch_size, args.lr)
    targets = load_targets(args.targets, data_dir=args.data_dir, layer=args.layer, device=device)
    dataset = targets[0].dataset
    x_att, _, x_eval, _ = attacker_split(
        dataset, args.attacker_data, torch_generator(args.seed, "attacker-split")
    )
    x_att, x_eval = x_att.to(device), x_eval.to(device)
    for target in targets:
        target.group_size = args.group_size or target.group_size
    marker.apply(to_pixels(dataset, x_att[:1]))  # a bad marker fails before any training
    out = Path(args.out)
    partial = Partial(out, "context", args)
    curves = {}
    for target in targets:
        saved = partial.load(target)
        if saved is None:
            logger.info("attacking %s", target.describe())
            curve = accuracy_curve(
                target,
                (x_att, x_eval),
                sizes,
                repeats=args.repeats,
                eval_size=args.eval_size,
                marker=marker,
                settings=settings,
                seed=args.seed,
            )
            saved = {"curve": curve}
            partial.save(target, saved)
        curves[target.label] = saved["curve"]
    out.mkdir(parents=True, exist_ok=True)
    series = {
        label: (sizes, [_stats(c[s])[0] for s in sizes], [_stats(c[s])[1] for s in sizes])
        for label, c in curves.items()
    }
    files = figures.line_plot(
        series,
        out / "context_accuracy",
        xlabel="attacker's training samples",
        ylabel="marker detection accuracy (held out)",
        title=f"context identification on {dataset.name}",
        logx=True,
        hline=0.9,
    )
    if is_image(dataset.input_shape):
        files += _marker_figure(targets, x_eval, marker, out, args.seed)
    report = {
        "command": "fedaug " + " ".join(sys.argv[1:]) if sys.argv and "fedaug" in sys.argv[0] else None,
        "dataset": dataset.name,
        "device": str(device),
        "attacker_data": args.attacker_data,
        "eval_size": args.eval_size,
        "repeats": args.repeats,
        "marker": asdict(marker),
        "settings": asdict(settings),
        "targets": [t.record() for t in targets],
        "accuracy": {label: {str(s): accs for s, accs in c.items()} for label, c in curves.items()},
        "needed_for_90": {label: needed(c) for label, c in curves.items()},
        "files": [str(p) for p in files],
    }
    (out / "context.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "context.md").write_text(markdown(report, sizes))
    partial.clear()
    return report


def _marker_figure(targets: list[Target], x_eval: Tensor, marker: Marker, out: Path, seed: int) -> list[Path]:
    """Clean and marked examples, and (for FedMix) clean and marked averages."""
    dataset = targets[0].dataset
    pixels = to_pixels(dataset, x_eval[:8])
    rows = [("clean", pixels), ("marked", marker.apply(pixels))]
    group = next((t.group_size for t in targets if t.shared == "averages"), 0)
    if group:
        gen = torch_generator(seed, "context-figure")
        idx = torch.randint(len(x_eval), (8, group), generator=gen)
        members = to_pixels(dataset, x_eval[idx.flatten().to(x_eval.device)])
        rows.append((f"average of {group}, clean", members.view(8, group, *pixels.shape[1:]).mean(dim=1)))
        marked = marker.apply(members).view(8, group, *pixels.shape[1:]).mean(dim=1)
        rows.append((f"average of {group}, marked", marked))
    return figures.example_grid(rows, out / "context_examples", image=True)


def markdown(report: dict[str, Any], sizes: list[int]) -> str:
    """The report as Markdown: accuracy (mean ± std over repeats) per target and training size."""
    lines = [f"# Context identification on {report['dataset']}", ""]
    if report["command"]:
        lines += ["```bash", report["command"], "```", ""]
    lines += [
        f"Marker {report['marker']}; attacker data: {report['attacker_data']}; "
        f"{report['eval_size']} held-out evaluation samples (half marked); {report['repeats']} repeats per "
        f"size; classifier training {report['settings']}.",
        "",
        *(f"* {t['description']}" for t in report["targets"]),
        "",
        "| target | " + " | ".join(str(s) for s in sizes) + " | samples for 90% |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for label, accs in report["accuracy"].items():
        cells = []
        for s in sizes:
            mean, std = _stats(accs[str(s)])
            cells.append(f"{100 * mean:.1f} ± {100 * std:.1f}")
        reach = report["needed_for_90"][label]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {reach if reach else f'> {max(sizes)}'} |")
    lines += ["", "Accuracy in % (mean ± std over repeats).", ""]
    lines += figures.markdown_links(report["files"])
    return "\n".join(lines) + "\n"


@register("attack", "context", paper="Xia et al., KDD 2024, Sec. 4.4")
class Context:
    """``fedaug attack context TARGET ...`` (see the module docstring)."""

    help = "detect a coloured-square marker from shared features / averages vs attacker training size"

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        add_target_arguments(parser, "context")
        parser.add_argument("--sizes", default="100,300,1000,3000,10000", help="attacker training sizes")
        parser.add_argument(
            "--repeats", type=flag_int(1), default=3, help="repeats per size (fresh samples and init)"
        )
        parser.add_argument("--eval-size", type=flag_int(1), default=2000, help="held-out evaluation samples")
        parser.add_argument(
            "--marker-size", type=flag_int(1), default=5, help="side of the square (official: 5)"
        )
        parser.add_argument(
            "--marker-width",
            type=flag_int(1),
            help="columns of the marker (default: --marker-size, a square); 1 on UCI-HAR: one channel",
        )
        parser.add_argument(
            "--marker-at", default="2,2", help="row,col of its top-left corner (official: 2,2)"
        )
        parser.add_argument(
            "--marker-colour", help="one value per channel, natural scale (default: red / white)"
        )
        parser.add_argument(
            "--group-size", type=flag_int(1), help="inputs per FedMix average (default: the run's)"
        )
        parser.add_argument(
            "--attacker-data",
            choices=("train", "test"),
            default="train",
            help="train: train set -> test set (paper); test: one half of the test set -> the other half",
        )
        parser.add_argument(
            "--epochs", type=flag_int(0), default=10, help="classifier passes over its samples"
        )
        parser.add_argument(
            "--min-steps", type=flag_int(0), default=500, help="at least this many Adam steps"
        )
        parser.add_argument("--batch-size", type=flag_int(1), default=64)
        parser.add_argument("--lr", type=flag_number(0, low_open=True), default=1e-3)
        parser.add_argument("--layer", type=int, help="split layer for methods that share no features")
        add_run_arguments(parser)

    @staticmethod
    def run(args: argparse.Namespace) -> int:
        torch.set_num_threads(args.threads)
        report = run_attack(args)
        for label, reach in report["needed_for_90"].items():
            print(f"{label:<36} samples for 90% accuracy: {reach if reach else 'not reached'}")
        print(f"report: {Path(args.out) / 'context.md'}")
        return 0
