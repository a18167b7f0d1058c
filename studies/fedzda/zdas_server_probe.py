"""How Fed-ZDAS's server step moves the global model: one round, many server settings, one synthetic set.

Usage (one thread)::

    OMP_NUM_THREADS=1 python studies/fedzda/zdas_server_probe.py \\
        runs/fedzda_tables/mnist-shards2-K100/fedzdas/seed0 --out zdas_server_probe.json \\
        --variant server_lr=0.005 --variant server_batchnorm=frozen --variant keep_bn_stats=true

RUN_DIR is a Fed-ZDAS run that branched from a FedAvg run (``branch.json`` names the FedAvg run and the round
it started after, R - 1). The script loads that FedAvg checkpoint, trains round R's clients exactly as the run
did (same seeds), aggregates them (FedAvg), generates the synthetic union once from the ten client models
(the run's ZSDG settings and seeds) and then applies every server variant to a copy of the aggregate,
printing the global test accuracy and the variance of the per-class accuracies for each, and how often the
aggregate labels each client's synthetic samples as their target, for the classes that client holds and for
the others. Two rows are
controls: ``fedavg`` (no server step; equals the FedAvg run's round R) and ``run`` (the run's own server
settings; equals the Fed-ZDAS run's round R).

A variant is ``key=value[,key=value...]`` over the method's ``server_*`` options (``server_lr``,
``server_epochs``, ``server_batch_size``, ``server_optimizer``, ``server_batchnorm``) plus
``keep_bn_stats=true``: train with BatchNorm in training mode, then put back the aggregated running
statistics (the synthetic batches' statistics normalise during the step but do not replace the ones the
clients' real data gave).
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import torch
import yaml

from fedaug.api import ClientUpdate, ServerState
from fedaug.engine.checkpoint import RunStore
from fedaug.engine.evaluation import evaluate
from fedaug.engine.sampling import sample_clients
from fedaug.engine.simulation import Simulation, round_train_settings
from fedaug.config.load import config_from_dict
from fedaug.runs.runner import prepare
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.fedzda.method import FedZDAS
from fedaug.methods.fedzda.zsdg import Synthetic
from fedaug.runs.branch import fedavg_start_state


def parse_variant(text: str) -> dict[str, Any]:
    """``server_lr=0.005,server_epochs=2`` -> ``{"server_lr": 0.005, "server_epochs": 2}``."""
    out: dict[str, Any] = {}
    for item in text.split(","):
        key, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"variant {text!r}: expected key=value, got {item!r}")
        out[key.strip()] = yaml.safe_load(value)
    return out


def bn_buffers(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The BatchNorm running statistics in a state dict."""
    suffixes = ("running_mean", "running_var", "num_batches_tracked")
    return {k: v.clone() for k, v in state.items() if k.endswith(suffixes)}


def scores(model: torch.nn.Module, sim: Simulation) -> dict[str, float]:
    spec = sim.spec
    test = evaluate(model, spec.test_x, spec.test_y, num_classes=spec.run.num_classes)
    return {"acc": 100 * test["acc"], "class_var": 1e4 * test["class_acc_var"]}  # % and %^2


@torch.no_grad()
def synthetic_agreement(
    model: torch.nn.Module, parts: list[Synthetic], updates: list[ClientUpdate], sim: Simulation
) -> dict[str, float]:
    """How often ``model`` (the aggregate) labels each client's synthetic samples as their target, split into
    the classes that client holds training data of (``own``) and the others (``foreign``)."""
    model.eval()
    hits = {"own": 0.0, "foreign": 0.0}
    counts = {"own": 0, "foreign": 0}
    for part, update in zip(parts, updates, strict=True):
        held = torch.unique(sim.spec.train_y[sim.spec.client_indices[update.client_id]])
        own = torch.isin(part.y, held)
        correct = model(part.x).argmax(dim=1) == part.y
        for key, mask in (("own", own), ("foreign", ~own)):
            hits[key] += float(correct[mask].sum())
            counts[key] += int(mask.sum())
    return {k: hits[k] / counts[k] if counts[k] else math.nan for k in hits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a Fed-ZDAS run dir with branch.json")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--variant", action="append", default=[], help="key=value[,key=value] (repeatable)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    tree = yaml.safe_load((args.run_dir / "config.yaml").read_text())
    if args.data_dir is not None:
        tree["data"]["data_dir"] = args.data_dir
    tree["engine"]["progress"] = False
    config = config_from_dict(tree)
    branch = json.loads((args.run_dir / "branch.json").read_text())
    round_num = int(branch["round"]) + 1
    ckpt = RunStore(Path(branch["from"])).load_checkpoint(round_num - 1)
    if ckpt is None:
        raise SystemExit(f"{branch['from']} keeps no checkpoint of round {round_num - 1}")

    prepared = prepare(config, Path(tempfile.gettempdir()) / "zdas_server_probe")
    sim = Simulation(prepared.spec)
    method, run, spec = prepared.method, sim.spec.run, sim.spec
    if not isinstance(method, FedZDAS):
        raise SystemExit(f"{args.run_dir} is a {method.name} run, not fedzdas")
    state = fedavg_start_state(method, ServerState(**ckpt["state"]), run)
    sim.client_states = ckpt["client_states"]

    tick = time.perf_counter()
    participants = sample_clients(run.seed, round_num, run.num_clients, spec.clients_per_round)
    train = round_train_settings(spec.train_settings, spec.precision, round_num)
    payload = method.payload(state, round_num, train)
    updates = sim.run_client_updates(payload, participants, round_num)
    aggregated = FedAvg.server_update(method, state, updates, run)
    model = sim.workspace("server/fedzdas")
    parts = method.synthesize(model, updates, run, round_num)
    print(f"round {round_num}: clients and ZSDG took {time.perf_counter() - tick:.0f} s")

    rows: list[dict[str, Any]] = []
    model.load_state_dict(aggregated.model_state)
    agreement = synthetic_agreement(model, parts, updates, sim)
    print(
        "the aggregate labels as their target {own:.1%} of the synthetic samples of the classes their "
        "client holds and {foreign:.1%} of the others".format(**agreement)
    )
    rows.append({"variant": "fedavg", **scores(model, sim)})
    for text in ["run", *args.variant]:
        options = {} if text == "run" else parse_variant(text)
        keep_stats = bool(options.pop("keep_bn_stats", False))
        unknown = sorted(set(options) - {f.name for f in fields(method.config)})
        if unknown:
            valid = ", ".join(f.name for f in fields(method.config) if f.name.startswith("server_"))
            raise SystemExit(
                f"variant {text!r}: unknown option(s) {', '.join(unknown)}; valid: {valid}, keep_bn_stats"
            )
        probe = type(method)(replace(method.config, **options))
        model.load_state_dict(aggregated.model_state)
        train = probe.train_server(model, parts, run, round_num)
        if keep_stats:
            model.load_state_dict({**model.state_dict(), **bn_buffers(aggregated.model_state)})
        row = {"variant": text, **scores(model, sim), "server_loss": train["zdas/server_loss"]}
        rows.append(row)
    width = max(len(r["variant"]) for r in rows)
    print(f"{'variant':<{width}}  global %  class var  server loss")
    for r in rows:
        loss = r.get("server_loss", math.nan)
        print(f"{r['variant']:<{width}}  {r['acc']:8.2f}  {r['class_var']:9.1f}  {loss:11.4f}")
    if args.out is not None:
        result = {"run_dir": str(args.run_dir), "round": round_num, "agreement": agreement, "rows": rows}
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
