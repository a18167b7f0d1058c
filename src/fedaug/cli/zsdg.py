"""``fedaug zsdg RUN_DIR[@ROUND]``: what ZSDG (Fed-ZDA's zero-shot data generation) makes of a run's model.

Loads the run's global model (``ckpt/latest.pt``, or ``ckpt/round_NNNN.pt`` kept with
``engine.keep_checkpoints``), generates ``--per-class`` samples of every class with
:func:`fedaug.methods.fedzda.zsdg.generate` (the run's own ZSDG settings for a Fed-ZDAC/ZDAS run, else ZSDG's
defaults; each overridable) and writes, under ``--out``:

* ``zsdg_samples.png``: one row per class, the samples in their natural scale (pixels in [0, 1];
  UCI-HAR windows as the time series of their first axis), each row labelled with the class, the model's test
  accuracy on that class and the fraction of its samples the model labels as that class;
* ``zsdg.json``: those numbers per class, ZSDG's final losses and the settings;
* ``zsdg_samples.pt`` (``--save-samples``): the samples (normalised, as the model takes them) and labels.

It computes on ``--device`` (default ``auto``), resolved before the run is read: the checkpoint is loaded onto
it (from whatever device the run trained on), and the model, the test set and the samples live there; the
Gaussian start is drawn on the CPU (``--seed``) and moved, so a GPU starts from the same noise as the CPU.

The model's test accuracy per class beside its samples shows the Fed-ZDA effect: a class the model never
predicts on real data can still give samples it labels as that class (its BN statistics kept the class).
For the paper's independent-oracle check see ``studies/fedzda/zsdg_quality.py``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedaug.validation import MAX_SEED, add_device_argument, check_int, flag_int

if TYPE_CHECKING:  # the command's modules import torch: imported when it runs, not with the CLI
    from fedaug.api import Method
    from fedaug.methods.fedzda.zsdg import ZSDGSettings


def add_zsdg_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``zsdg``."""
    parser = sub.add_parser(
        "zsdg",
        help="zero-shot samples of every class from a run's model (BN statistics), as a figure",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  fedaug zsdg runs/<name>/<setting>/fedavg/seed0 --per-class 8 --out zsdg",
    )
    parser.add_argument("target", metavar="RUN_DIR[@ROUND]", help="a run dir, optionally @ a kept round")
    parser.add_argument("--per-class", type=int, default=8, help="samples per class (default 8)")
    parser.add_argument("--iterations", type=int, help="Adam steps (default: the run's, else 500)")
    parser.add_argument("--lr", type=float, help="Adam learning rate (default: the run's, else 0.05)")
    parser.add_argument(
        "--seed", type=flag_int(0, MAX_SEED), default=0, help="seed of the Gaussian start (default 0)"
    )
    parser.add_argument("--data-dir", help="directory holding the datasets (default: the run's)")
    parser.add_argument("--out", type=Path, default=Path("zsdg"), help="output folder (default ./zsdg)")
    parser.add_argument("--save-samples", action="store_true", help="also write zsdg_samples.pt")
    add_device_argument(parser)
    parser.set_defaults(func=cmd_zsdg)


def zsdg_settings(method: Method, iterations: int | None, lr: float | None) -> ZSDGSettings:
    """The run's ZSDG settings (a Fed-ZDA method's ``zsdg()``), else the defaults, with the overrides."""
    from fedaug.methods.fedzda.zsdg import ZSDGSettings

    zsdg = getattr(method.config, "zsdg", None)
    settings = zsdg() if callable(zsdg) else ZSDGSettings()
    if iterations is not None:
        settings = replace(settings, iterations=iterations)
    if lr is not None:
        settings = replace(settings, lr=lr)
    return settings


def cmd_zsdg(args: argparse.Namespace) -> int:
    import torch

    from fedaug.attacks.figures import example_grid
    from fedaug.attacks.target import (
        attack_device,
        global_model,
        is_image,
        parse_spec,
        run_checkpoint,
        run_config,
        to_pixels,
    )
    from fedaug.data.datasets import load_dataset
    from fedaug.engine.evaluation import evaluate
    from fedaug.methods.fedzda.zsdg import class_accuracy, generate

    device = attack_device(args)
    check_int("--per-class", args.per_class, 1)
    _, run_dir, round_num = parse_spec(args.target)
    config = run_config(run_dir, device)
    ckpt = run_checkpoint(run_dir, round_num, device)
    dataset = load_dataset(
        config.data.name, data_dir=args.data_dir or config.data.data_dir, **config.data.options
    )
    model, method, round_done = global_model(ckpt, config, dataset, device)
    settings = zsdg_settings(method, args.iterations, args.lr)
    synthetic = generate(
        model,
        classes=range(dataset.num_classes),
        per_class=args.per_class,
        input_shape=dataset.input_shape,
        generator=torch.Generator().manual_seed(args.seed),
        settings=settings,
    )
    x_test, y_test = dataset.x_test.to(device), dataset.y_test.to(device)
    test = evaluate(model, x_test, y_test, num_classes=dataset.num_classes)
    on_samples = class_accuracy(model, synthetic.x, synthetic.y, num_classes=dataset.num_classes)
    per_class = [
        {
            "class": c,
            "name": dataset.class_names[c],
            "model_test_acc": test.get(f"class_acc/{c}"),
            "model_acc_on_samples": float(on_samples[c]),
        }
        for c in range(dataset.num_classes)
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    samples = [to_pixels(dataset, synthetic.x[synthetic.y == c]) for c in range(dataset.num_classes)]
    rows = [(_row_label(row), batch) for row, batch in zip(per_class, samples, strict=True)]
    figures = example_grid(rows, args.out / "zsdg_samples", image=is_image(dataset.input_shape))
    result = {
        "run_dir": str(run_dir),
        "round": round_done,
        "method": config.method.name,
        "device": str(device),
        "model_test_acc": test["acc"],
        "per_class": per_class,
        "zsdg_final_losses": synthetic.logs,
        "settings": asdict(settings) | {"per_class": args.per_class, "seed": args.seed},
    }
    (args.out / "zsdg.json").write_text(json.dumps(result, indent=1) + "\n")
    if args.save_samples:
        # on the CPU, so that the file loads on any machine
        torch.save({"x": synthetic.x.cpu(), "y": synthetic.y.cpu()}, args.out / "zsdg_samples.pt")
    print(f"{run_dir} round {round_done} ({config.method.name}): test accuracy {_percent(test['acc'])}")
    print(f"{'class':<22}{'model test acc':>16}{'labelled as class':>20}")
    for row in per_class:
        name = f"{row['name']} ({row['class']})"
        print(f"{name:<22}{_percent(row['model_test_acc']):>16}{_percent(row['model_acc_on_samples']):>20}")
    print("wrote " + ", ".join(str(p) for p in [*figures, args.out / "zsdg.json"]))
    return 0


def _row_label(row: dict[str, Any]) -> str:
    test, samples = _percent(row["model_test_acc"]), _percent(row["model_acc_on_samples"])
    return f"{row['name']} ({row['class']})\ntest {test}, samples {samples}"


def _percent(value: Any) -> str:
    """A fraction as ``76.7%`` (``-`` for None: a class absent from the test set)."""
    return "-" if value is None else f"{100 * float(value):.1f}%"
