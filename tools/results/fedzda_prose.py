"""Generated sentences of studies/fedzda/README.md (issue #64), read from the JSON the study committed beside
its README (the file named in each sentence)."""

from __future__ import annotations

import gzip
import json

from fedaug.engine.checkpoint import logged_round_times
from fedaug.results.store import Run
from tools.results.common import (
    BEST,
    CLASS_VAR,
    FINAL,
    LOCAL_MEAN,
    LOCAL_VAR,
    STUDIES,
    ZDA,
    ZDA_CELLS,
    Archive,
    fragment,
    list_item,
)
from tools.results.common import label as row_of
from tools.results.fragments import markdown_table
from tools.results.seeds import paper_text, seed_run

FEDZDA = STUDIES / "fedzda"


@fragment("fedzda-frozen-bn-probe")
def fedzda_frozen_bn_probe(archive: Archive) -> str:
    """Round 80 of Fed-ZDAS on MNIST unimodal, seed 0, with the server step's BatchNorm frozen against the
    default ``train`` (``zdas_server_probe/mnist_shards2_seed0_round80.json``)."""
    name = "mnist_shards2_seed0_round80.json"
    rows = {r["variant"]: r for r in json.loads((FEDZDA / "zdas_server_probe" / name).read_text())["rows"]}
    frozen, default = rows["server_batchnorm=frozen"], rows["run"]
    return list_item(
        f"Round 80 fell to **{frozen['acc']:.1f}%** (server loss {frozen['server_loss']:.2f}) instead of "
        f"{default['acc']:.1f}% ({default['server_loss']:.2f}) with the default `train` "
        f"(`zdas_server_probe/{name}`).\n"
    )


def _mean_step(run: Run) -> float | None:
    """The mean over rounds of q-FFL's logged ``qffl/step`` (the sum of the server's coefficients)."""
    with gzip.open(run.path / "metrics.jsonl.gz", "rt") as handle:
        steps = [row["qffl/step"] for row in map(json.loads, handle) if "qffl/step" in row]
    return sum(steps) / len(steps) if steps else None


@fragment("fedzda-qffl-steps")
def fedzda_qffl_steps(archive: Archive) -> str:
    """q-FFL (q = 1)'s mean step on three cells, seed 0 (the runs' ``metrics.jsonl.gz``)."""
    parts = []
    for name in ("FMNIST unimodal", "MNIST unimodal", "MNIST multimodal"):
        run = seed_run(archive, (ZDA, "qffl", ZDA_CELLS[name]), 0)
        step = None if run is None else _mean_step(run)
        parts.append(f"{'-' if step is None else f'{step:.3f}'} {name}")
    return (
        "Mean step over the rounds, q = 1, seed 0 (the runs' logged `qffl/step`): " + ", ".join(parts) + ".\n"
    )


@fragment("fedzda-qffl-mnist-multimodal")
def fedzda_qffl_mnist_multimodal(archive: Archive) -> str:
    """q-FFL at q = 1 and q = 0.01 and FedAvg on MNIST multimodal, seed 0, final round, the paper beside."""
    setting = ZDA_CELLS["MNIST multimodal"]
    rows = []
    metrics = (FINAL, CLASS_VAR, LOCAL_MEAN, LOCAL_VAR)
    for label, row in (("1", "qffl"), ("0.01", "qffl (q=0.01)"), ("FedAvg, ours", "fedavg")):
        run = seed_run(archive, (ZDA, row, setting), 0)
        if run is None:
            rows.append([label, "-", "-", "-", "-", "-"])
            continue
        step = _mean_step(run) if row != "fedavg" else None
        digits = (2, 0, 2, 0)
        rows.append(
            [
                label,
                "1" if row == "fedavg" else "-" if step is None else f"{step:.3f}",
                *(f"{m(run):.{d}f}" for m, d in zip(metrics, digits, strict=True)),
            ]
        )
    base = [r for r in (seed_run(archive, (ZDA, "qffl", setting), 0),) if r is not None]
    papers = ("global_acc", "class_acc_var", "local_acc_mean", "local_acc_var")
    rows.append(["paper (q not given)", "", *(paper_text(archive.paper(p, "qffl", base)) for p in papers)])
    header = ["q", "mean step", "global %", "class var %^2", "local mean %", "client var %^2"]
    return markdown_table(header, rows)


BALANCE = (
    ("global %", "global_acc", 100.0, 2),
    ("class var %^2", "class_acc_var", 1e4, 0),
    ("local mean %", "local_acc_mean", 100.0, 2),
    ("client var %^2", "local_acc_var", 1e4, 0),
)
"""The multimodal table's columns: header, summary key (``_final`` / ``_last10``), scale and digits."""


@fragment("fedzda-balance-clients")
def fedzda_balance_clients(archive: Archive) -> str:
    """FedAvg on Fashion-MNIST multimodal (``balance: clients``), seed 0: final round (last-10 mean), the
    paper beside, and its best round."""
    run = seed_run(archive, (ZDA, "fedavg", ZDA_CELLS["FMNIST multimodal"]), 0)
    assert run is not None
    cells = [
        f"{scale * run.summary[f'{key}_final']:.{d}f} ({scale * run.summary[f'{key}_last10']:.{d}f})"
        for _, key, scale, d in BALANCE
    ]
    paper = [paper_text(archive.paper(key, "fedavg", [run])) for _, key, _, _ in BALANCE]
    table = markdown_table(
        ["split", *(h for h, *_ in BALANCE)],
        [["`balance: clients`", *cells], ["paper (mean ± std)", *paper]],
    )
    return table + f"\nIts best round: {BEST(run):.2f}.\n"


@fragment("fedzda-agreement")
def fedzda_agreement(archive: Archive) -> str:
    """How often the aggregate labels a client model's synthetic samples as their target, for the classes
    the client holds no data of and for its own (``zdas_server_probe/agreement/``)."""
    folder = FEDZDA / "zdas_server_probe" / "agreement"
    cells = {
        "MNIST unimodal": "mnist_shards2_seed0_round80.json",
        "FMNIST multimodal": "fashion_mnist_multimodal2_clients_seed0_round80.json",
    }
    agree = {name: json.loads((folder / file).read_text())["agreement"] for name, file in cells.items()}
    foreign = " / ".join(f"{100 * a['foreign']:.1f}%" for a in agree.values())
    own = " / ".join(f"{100 * a['own']:.1f}%" for a in agree.values())
    return list_item(
        f"Classes a client holds no data of: {foreign}; the classes it holds: {own} ("
        + " / ".join(cells)
        + ", seed 0, round 80).\n"
    )


# --- the sessions' run times: each run's logged round times (``timings.jsonl.gz``) -------------------------

ZDA_START = 80
"""The round from which Fed-ZDAC/ZDAS augment (the preset's ``start_round``)."""


def _run_times(archive: Archive, name: str, row: str, cell: str, seed: int) -> str:
    run = seed_run(archive, (ZDA, row, ZDA_CELLS[cell]), seed)
    times = [] if run is None else logged_round_times(run.path)
    if not times:
        return f"{name} -"
    total = sum(s for _, s in times)
    early = [s for r, s in times if r < ZDA_START]
    late = [s for r, s in times if r >= ZDA_START]
    if not row.startswith("fedzda") or not late:
        return f"{name} {total:.0f} s"
    parts = [f"rounds {ZDA_START}-100 {sum(late):.0f} s at {min(late):.0f}-{max(late):.0f} s a round"]
    if early:
        parts.insert(0, f"rounds 1-{ZDA_START - 1} {sum(early):.0f} s")
    return f"{name} {total:.0f} s (" + ", ".join(parts) + ")"


def _times(archive: Archive, specs: tuple[tuple[str, str, str, int], ...]) -> str:
    return (
        "The rounds' logged times summed (each run's `timings.jsonl.gz`): "
        + "; ".join(_run_times(archive, *spec) for spec in specs)
        + ".\n"
    )


ZDAS = "fedzdas"
QFFL = "qffl (q=0.01)"


@fragment("fedzda-times-ninth")
def fedzda_times_ninth(archive: Archive) -> str:
    return _times(
        archive,
        (
            ("Fed-ZDAS FMNIST unimodal", ZDAS, "FMNIST unimodal", 1),
            ("Fed-ZDAS MNIST unimodal", ZDAS, "MNIST unimodal", 1),
        ),
    )


@fragment("fedzda-times-tenth")
def fedzda_times_tenth(archive: Archive) -> str:
    fmnist = "FMNIST unimodal"
    return _times(
        archive,
        (
            ("FedAvg", "fedavg", fmnist, 2),
            ("FedProx", "fedprox", fmnist, 2),
            ("q-FFL", QFFL, fmnist, 2),
            ("q-FFL MNIST", QFFL, "MNIST unimodal", 2),
            ("FedProx MNIST", "fedprox", "MNIST unimodal", 2),
            ("Fed-ZDAC", "fedzdac", fmnist, 2),
            ("Fed-ZDAS", ZDAS, fmnist, 2),
        ),
    )


@fragment("fedzda-times-eleventh")
def fedzda_times_eleventh(archive: Archive) -> str:
    return _times(
        archive,
        (
            ("Fed-ZDAC MNIST", "fedzdac", "MNIST unimodal", 2),
            ("Fed-ZDAS MNIST", ZDAS, "MNIST unimodal", 2),
            ("Fed-ZDAS FMNIST multimodal", ZDAS, "FMNIST multimodal", 2),
        ),
    )


@fragment("fedzda-times-twelfth")
def fedzda_times_twelfth(archive: Archive) -> str:
    return _times(
        archive,
        (
            ("Fed-ZDAC MNIST", "fedzdac", "MNIST multimodal", 1),
            ("Fed-ZDAS MNIST", ZDAS, "MNIST multimodal", 1),
            ("Fed-ZDAC FMNIST", "fedzdac", "FMNIST multimodal", 2),
        ),
    )


def _first_loss(run: Run) -> float:
    with gzip.open(run.path / "metrics.jsonl.gz", "rt") as handle:
        return float(json.loads(handle.readline())["train/loss"])


@fragment("fedzda-burnin-loss")
def fedzda_burnin_loss(archive: Archive) -> str:
    """Round 1's train loss of the EPYC Fed-ZDAS run against the archived (Xeon) FedAvg run, MNIST unimodal,
    seed 1 (both runs' ``metrics.jsonl.gz``)."""
    cell = ZDA_CELLS["MNIST unimodal"]
    runs = [seed_run(archive, (ZDA, row, cell), 1) for row in (ZDAS, "fedavg")]
    if any(r is None for r in runs):
        return "-\n"
    losses = [_first_loss(r) for r in runs if r is not None]
    return list_item(
        f"Round 1's train loss, MNIST unimodal, seed 1: {losses[0]:.8f} (Fed-ZDAS's own rounds) vs "
        f"{losses[1]:.8f} (the archived FedAvg run).\n",
        "",
    )


@fragment("fedzda-times-seed2-multimodal")
def fedzda_times_seed2_multimodal(archive: Archive) -> str:
    return _times(
        archive,
        tuple(
            (f"{name} {cell.split()[0]}", row, cell, 2)
            for cell in ("MNIST multimodal", "FMNIST multimodal")
            for name, row in (("FedAvg", "fedavg"), ("FedProx", "fedprox"), ("q-FFL", QFFL))
        ),
    )


@fragment("fedzda-times-thirteenth")
def fedzda_times_thirteenth(archive: Archive) -> str:
    return _times(
        archive,
        (
            ("Fed-ZDAC FMNIST", "fedzdac", "FMNIST multimodal", 1),
            ("Fed-ZDAS FMNIST", ZDAS, "FMNIST multimodal", 1),
            ("Fed-ZDAC MNIST", "fedzdac", "MNIST multimodal", 2),
        ),
    )


@fragment("fedzda-times-fourteenth")
def fedzda_times_fourteenth(archive: Archive) -> str:
    return _times(archive, (("Fed-ZDAS MNIST multimodal, seed 2", ZDAS, "MNIST multimodal", 2),))


@fragment("fedzda-times-cpu-drift")
def fedzda_times_cpu_drift(archive: Archive) -> str:
    """The three FedAvg reruns on the Xeon (``cpu_drift/runs``): their rounds' logged times summed."""
    totals = [sum(s for _, s in logged_round_times(r.path)) for r in archive.study("fedzda/cpu_drift/runs")]
    return f"{min(totals):.0f}-{max(totals):.0f} s each, the rounds' logged times summed\n"


PRESET_ROWS = ("fedavg", "fedprox", QFFL, "fedzdac", ZDAS)
"""The preset's five methods as report rows (q-FFL at q = 0.01, Fed-ZDAS with the batch-100 server step)."""


@fragment("fedzda-grid-hours")
def fedzda_grid_hours(archive: Archive) -> str:
    """The preset runs' logged round times summed: all of them, Fed-ZDAC/ZDAS per run, the others per run."""
    runs = [r for r in archive.study("fedzda/runs") if row_of(r) in PRESET_ROWS]
    totals = {id(r): sum(s for _, s in logged_round_times(r.path)) for r in runs}
    zda = [totals[id(r)] / 3600 for r in runs if row_of(r) in ("fedzdac", ZDAS)]
    other = [totals[id(r)] / 60 for r in runs if row_of(r) not in ("fedzdac", ZDAS)]
    return (
        f"The recorded round times of the {len(runs)} preset runs (their `timings.jsonl.gz`) add up to "
        f"{sum(totals.values()) / 3600:.0f} h (Fed-ZDAC/ZDAS {min(zda):.1f}-{max(zda):.1f} h each, the "
        "others "
        f"{min(other):.0f}-{max(other):.0f} min).\n"
    )
