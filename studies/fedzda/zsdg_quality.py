"""Quality of ZSDG samples as in Fed-ZDA Section 4.4: an independently trained oracle labels them per class.

Usage (one thread)::

    OMP_NUM_THREADS=1 python studies/fedzda/zsdg_quality.py RUN_DIR --data-dir ../shared/data \\
        --per-class 16 --iterations 200 --oracle-samples 20000 --out studies/fedzda/zsdg_quality.json

``--plot PATH`` draws the paper's Figure 3 for it: per class, the source model's test accuracy beside the
oracle's accuracy on the generated samples.

RUN_DIR is a finished run of the Fed-ZDA setting (``ckpt/latest.pt`` holds the global model to invert). The
oracle is the same architecture trained centrally (SGD lr 0.02, batch 10, the paper's optimiser;
``--oracle-epochs`` epochs on ``--oracle-samples`` random training images). Prints and writes, per class: the
source model's test accuracy (the paper's blue bars), the oracle's accuracy on the generated samples (red
bars) and the source model's own accuracy on them; as a control, the oracle's accuracy on Gaussian noise
(ZSDG's starting point) with the same target labels, and its predictions on that noise.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml

from fedaug.api import ClientData, TrainSettings
from fedaug.data.datasets import load_dataset
from fedaug.engine.evaluation import evaluate
from fedaug.training.loop import cross_entropy_loss, train_local
from fedaug.methods.fedzda.zsdg import ZSDGSettings, class_accuracy, generate
from fedaug.models import build_model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--per-class", type=int, default=64, help="samples per class (paper: 64)")
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--bn-norm", default="l2")
    parser.add_argument("--oracle-samples", type=int, default=60000)
    parser.add_argument("--oracle-epochs", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None, help="bar chart like the paper's Figure 3")
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = yaml.safe_load((args.run_dir / "config.yaml").read_text())
    data = load_dataset(config["data"]["name"], data_dir=args.data_dir)
    shape, classes = tuple(data.input_shape), data.num_classes

    def model() -> torch.nn.Module:
        return build_model(config["model"]["name"], num_classes=classes, input_shape=shape)

    source = model()
    ckpt = torch.load(args.run_dir / "ckpt" / "latest.pt", weights_only=True)
    source.load_state_dict(ckpt["state"]["model_state"])

    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed + 1)
    oracle = model()
    idx = torch.randperm(data.y_train.shape[0], generator=gen)[: args.oracle_samples]
    train_local(
        oracle,
        ClientData(-1, data.x_train[idx], data.y_train[idx], classes),
        loss_fn=cross_entropy_loss,
        settings=TrainSettings(local_epochs=args.oracle_epochs, batch_size=10, lr=0.02, optimizer="sgd"),
        generator=gen,
    )
    source_test = evaluate(source, data.x_test, data.y_test, num_classes=classes)
    oracle_test = evaluate(oracle, data.x_test, data.y_test, num_classes=classes)
    settings = ZSDGSettings(iterations=args.iterations, lr=args.lr, bn_norm=args.bn_norm)
    synthetic = generate(
        source,
        classes=range(classes),
        per_class=args.per_class,
        input_shape=shape,
        generator=gen,
        settings=settings,
    )
    # control: the same number of Gaussian inputs (ZSDG's starting point) with the same target labels
    noise = torch.randn(synthetic.x.shape, generator=gen)
    oracle_on_noise = class_accuracy(oracle, noise, synthetic.y, num_classes=classes)
    oracle_on_synthetic = class_accuracy(oracle, synthetic.x, synthetic.y, num_classes=classes)
    source_on_synthetic = class_accuracy(source, synthetic.x, synthetic.y, num_classes=classes)
    oracle.eval()
    with torch.no_grad():
        predictions = oracle(noise).argmax(dim=1)
    result = {
        "run_dir": str(args.run_dir),
        "settings": vars(args) | {k: str(getattr(args, k)) for k in ("run_dir", "out", "plot")},
        "source_test_acc": source_test["acc"],
        "oracle_test_acc": oracle_test["acc"],
        "zsdg_final_losses": synthetic.logs,
        "per_class": [
            {
                "class": c,
                "source_test_acc": source_test.get(f"class_acc/{c}"),
                "oracle_acc_on_synthetic": float(oracle_on_synthetic[c]),
                "source_acc_on_synthetic": float(source_on_synthetic[c]),
            }
            for c in range(classes)
        ],
        "oracle_acc_on_synthetic_mean": float(oracle_on_synthetic.mean()),
        "oracle_acc_on_noise_mean": float(oracle_on_noise.mean()),
        "oracle_pred_on_noise": torch.bincount(predictions, minlength=classes).tolist(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    if args.plot is not None:
        plot(result, config["data"]["name"], args.plot)


def plot(result: dict, dataset: str, path: Path) -> None:
    """Per class: the source model's test accuracy and the oracle's accuracy on ZSDG samples (Figure 3)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["per_class"]
    x = torch.arange(len(rows)).numpy()
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.bar(
        x - 0.2,
        [100 * r["source_test_acc"] for r in rows],
        0.4,
        color="tab:blue",
        label="source model, test set",
    )
    ax.bar(
        x + 0.2,
        [100 * r["oracle_acc_on_synthetic"] for r in rows],
        0.4,
        color="tab:red",
        label="oracle on ZSDG samples",
    )
    ax.set_xticks(x)
    ax.set_xlabel("class")
    ax.set_ylabel("accuracy (%)")
    ax.set_ylim(0, 105)
    ax.set_title(
        f"{dataset}: ZSDG samples from the source model ({100 * result['source_test_acc']:.1f}% test), "
        f"oracle {100 * result['oracle_test_acc']:.1f}%",
        fontsize=9,
    )
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2, fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
