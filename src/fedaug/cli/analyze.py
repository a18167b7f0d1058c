"""``fedaug analyze features RUN_DIR@ROUND``: the FLea papers' feature analysis
(:mod:`fedaug.results.features`) from one checkpoint of a run, as a table, a JSON file and a bar chart."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from fedaug import registry
from fedaug.errors import ConfigError
from fedaug.runtime.figure_files import shrink_png
from fedaug.validation import MAX_SEED, flag_int

logger = logging.getLogger(__name__)
EXAMPLE = "fedaug analyze features runs/f/uci_har-quantity2-K75/fedavg/seed0@12 --out features"


def add_analyze_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``analyze`` and its ``features`` sub-command."""
    raw = argparse.RawDescriptionHelpFormatter
    analyze = sub.add_parser(
        "analyze",
        help="analyses of a trained run (feature separation after one round)",
        formatter_class=raw,
        epilog=f"example:\n  {EXAMPLE}",
    )
    kinds = analyze.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    features = kinds.add_parser(
        "features",
        help="Davies-Bouldin score of penultimate features after one round: plentiful vs scarce data",
        formatter_class=raw,
        epilog=f"example (a FedAvg run that kept round 12, at about 40% accuracy):\n  {EXAMPLE}",
    )
    features.add_argument("target", help="RUN_DIR@ROUND: the starting global model (a kept checkpoint)")
    features.add_argument("--out", required=True, help="folder for features.json and features.png")
    features.add_argument(
        "--plentiful", type=flag_int(1), default=500, help="samples per plentiful client (500)"
    )
    features.add_argument("--plentiful-clients", type=flag_int(1), default=10, help="plentiful clients (10)")
    features.add_argument("--scarce", type=flag_int(1), default=100, help="samples per scarce client (100)")
    features.add_argument("--scarce-clients", type=flag_int(1), default=50, help="scarce clients (50)")
    features.add_argument(
        "--methods", default="fedavg,flea", help="methods trained on the scarce clients (fedavg,flea)"
    )
    features.add_argument(
        "--seed", type=flag_int(0, MAX_SEED), default=0, help="seed of the client split and training"
    )
    features.add_argument("--data-dir", help="directory holding the datasets (default: the run's)")
    features.add_argument("--device", default="auto", help="auto (default), cpu, cuda or cuda:N")
    features.set_defaults(func=cmd_analyze_features)


def cmd_analyze_features(args: argparse.Namespace) -> int:
    from fedaug.api import RunContext, ServerState
    from fedaug.attacks.target import global_model, parse_spec, run_checkpoint, run_config
    from fedaug.data.datasets import load_dataset
    from fedaug.methods.fedavg import FedAvg
    from fedaug.models import build_model
    from fedaug.results.features import Group, global_scores, one_round
    from fedaug.runs.runner import round_settings
    from fedaug.runtime.device import resolve_device
    from fedaug.runtime.paths import check_folder_target
    from fedaug.training.loop import snapshot_state

    device = resolve_device(args.device, key="--device")
    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    methods = [registry.get("method", name)() for name in names]
    _, run_dir, round_num = parse_spec(args.target)
    config = run_config(run_dir, device)
    ckpt = run_checkpoint(run_dir, round_num, device)
    out = Path(args.out)
    check_folder_target(out, "--out")
    dataset = load_dataset(
        config.data.name, data_dir=args.data_dir or config.data.data_dir, **config.data.options
    )
    for kind in ("plentiful", "scarce"):  # before any training: the second arm would fail after the first
        clients, size = getattr(args, f"{kind}_clients"), getattr(args, kind)
        if clients * size > len(dataset.y_train):
            raise ConfigError(
                f"--{kind}-clients {clients} x --{kind} {size} = {clients * size} training samples, but "
                f"{config.data.name} has {len(dataset.y_train)}; lower either"
            )
    model, _, start_round = global_model(ckpt, config, dataset, device)

    def model_fn() -> Any:
        return build_model(
            config.model.name,
            num_classes=dataset.num_classes,
            input_shape=dataset.input_shape,
            **config.model.options,
        )

    x_test, y_test = dataset.x_test.to(device), dataset.y_test.to(device)
    start_acc, start_db = global_scores(model, x_test, y_test)
    start = {"round": start_round, "acc": start_acc, "db_test": start_db}
    logger.info(
        "start: %s round %d, test accuracy %.4f, DB %.3f",
        run_dir,
        start_round,
        start["acc"],
        start["db_test"],
    )
    run = RunContext(
        num_clients=1,
        num_classes=dataset.num_classes,
        input_shape=tuple(dataset.input_shape),
        seed=args.seed,
        num_rounds=start_round + 1,
        input_mean=dataset.mean,
        input_std=dataset.std,
        input_modality=dataset.modality,
        device=device,
    )
    groups = [Group(f"plentiful ({args.plentiful})", FedAvg(), args.plentiful_clients, args.plentiful)]
    groups += [Group(f"scarce ({args.scarce})", m, args.scarce_clients, args.scarce) for m in methods]
    data = (dataset.x_train.to(device), dataset.y_train.to(device), x_test, y_test)
    state = ServerState(start_round, snapshot_state(model))
    train = round_settings(config, start_round + 1, device)
    rows = []
    for group in groups:
        logger.info("one round: %s, %s", group.name, group.method.name)
        rows.append(one_round(group, state, model_fn, data, run, train))
    result = {
        "target": args.target,
        "dataset": config.data.name,
        "device": str(device),
        "start": start,
        "groups": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "features.json").write_text(json.dumps(result, indent=2) + "\n")
    print(feature_table(result))
    plot = _plot(result, out / "features.png")
    print(
        f"wrote {out / 'features.json'}"
        + (f" and {plot}" if plot else " (no figure: pip install fedaug[plots])")
    )
    return 0


def feature_table(result: dict[str, Any]) -> str:
    """The analysis as a Markdown table (DB: lower = classes better separated)."""
    start = result["start"]
    lines = [
        f"start: round {start['round']}, test accuracy {100 * start['acc']:.2f} %, "
        f"DB (test) {start['db_test']:.3f}",
        "",
        "| group | method | clients | local DB (train) | local DB (test) | global DB (test) | global acc % |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["groups"]:
        train, test = row["local_db_train"], row["local_db_test"]
        lines.append(
            f"| {row['group']} | {row['method']} | {row['clients']} "
            f"| {train['mean']:.3f} ± {train['std']:.3f} | {test['mean']:.3f} ± {test['std']:.3f} "
            f"| {row['global_db_test']:.3f} | {100 * row['global_acc']:.2f} |"
        )
    return "\n".join(lines)


def _plot(result: dict[str, Any], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rows = result["groups"]
    labels = [f"{r['group']}\n{r['method']}" for r in rows]
    series = {
        "local, train": [r["local_db_train"]["mean"] for r in rows],
        "local, test": [r["local_db_test"]["mean"] for r in rows],
        "global, test": [r["global_db_test"] for r in rows],
    }
    fig, ax = plt.subplots(figsize=(1.8 + 2.2 * len(rows), 3.6))
    width = 0.8 / len(series)
    for i, (name, values) in enumerate(series.items()):
        ax.bar([x + (i - 1) * width for x in range(len(rows))], values, width, label=name)
    ax.axhline(result["start"]["db_test"], color="grey", linestyle="--", label="start, test")
    ax.set_xticks(range(len(rows)), labels)
    ax.set_ylabel("Davies-Bouldin score (lower: classes apart)")
    ax.set_title(f"{result['dataset']}: one round from round {result['start']['round']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    if path.suffix.lower() == ".png":
        shrink_png(path)
    plt.close(fig)
    return path
