"""The generated blocks of the baselines, Fed-AugMix and feature-analysis study READMEs: the same archives,
helpers and statistics as docs/results.md, in the shape each study's page reports them. The Fed-ZDA, FLea and
benchmark studies' blocks are in ``results_studies_*.py``."""

from __future__ import annotations

import json
import math
import statistics

from fedaug.cli.analyze import feature_table
from fedaug.results.store import aggregate
from tools.results.common import (
    BASELINES,
    BEST,
    HAR_SPLITS,
    LAST10,
    ROOT,
    STUDIES,
    UCI_CPU,
    Archive,
    fragment,
    har,
    paper_gap,
)
from tools.results.fragments import fmt, markdown_table, seeds_text
from tools.results.seeds import (
    RowSpec,
    best_at,
    pair_table,
    paper_text,
    round_minutes,
    runs_table,
    seed_run,
    seeds_gain_table,
    signed,
)

# --- studies/baselines_har ----------------------------------------------------------------------------------

BASELINE_NAMES = {
    "fedavg": "FedAvg",
    "fedprox": "FedProx (mu 0.01)",
    "feddecorr": "FedDecorr (beta 0.1)",
    "fedlc": "FedLC (tau 1.0)",
    "fedntd": "FedNTD (beta 1, T 1)",
    "fedrs": "FedRS (alpha 0.5; not in the paper's table)",
    "fedbr": "FedBR",
    "ccvr (variant=shared_features)": "CCVR (shared features)",
    "fedmix": "FedMix (naive, Beta(2,2))",
    "fedgen": "FedGen (branched off FedAvg's round 29)",
    "feddata": "FedData",
}


def _baselines_seed0(archive: Archive, split: str) -> str:
    """Seed 0 of every baseline in one K = 75 cell: best (round), last-10, the paper's best, and the gaps to
    the paper and to FedAvg (seed 0, paired) beside the paper's gap to its FedAvg."""
    rows = []
    setting = har(split)
    base = seed_run(archive, (BASELINES, "fedavg", setting), 0)
    for row, name in BASELINE_NAMES.items():
        run = seed_run(archive, (BASELINES, row, setting), 0)
        if run is None or base is None:
            continue
        method = row
        paper = archive.paper("best_acc", method, [run])
        rows.append(
            [
                name,
                best_at(run),
                f"{LAST10(run):.2f}",
                paper_text(paper),
                "-" if paper is None else signed(BEST(run) - paper.mean),
                signed(BEST(run) - BEST(base)),
                paper_gap(archive, "best_acc", method, "fedavg", [run], "+.1f"),
                round_minutes(run),
            ]
        )
    header = ["method", "ours best (round)", "ours last-10", "paper (best, 5 seeds)", "ours - paper"]
    header += ["ours - our FedAvg", "paper - paper's FedAvg", "round times summed"]
    return markdown_table(header, rows)


for _split, _name in (("Qua(2)", "qua2"), ("Dir(0.3)", "dir03"), ("Dir(0.1)", "dir01")):
    fragment(f"baselines-seed0-{_name}")(lambda archive, split=_split: _baselines_seed0(archive, split))


QUA2_ROWS = {
    "FedAvg": "fedavg",
    "FedProx": "fedprox",
    "FedBR": "fedbr",
    "CCVR (shared features)": "ccvr (variant=shared_features)",
    "FedDecorr": "feddecorr",
    "FedLC": "fedlc",
    "FedNTD": "fedntd",
    "FedMix": "fedmix",
}
"""The Qua(2) rows run on seeds 1 and 2 alongside seed 0."""


def _qua2(row: str) -> RowSpec:
    return (BASELINES, row, har("Qua(2)"))


@fragment("baselines-qua2-seeds01")
def baselines_qua2_seeds01(archive: Archive) -> str:
    rows = {name: _qua2(row) for name, row in QUA2_ROWS.items()}
    return seeds_gain_table(archive, rows, _qua2("fedavg"), (0, 1))


@fragment("baselines-qua2-seeds012")
def baselines_qua2_seeds012(archive: Archive) -> str:
    rows = {name: _qua2(row) for name, row in QUA2_ROWS.items()}
    return seeds_gain_table(archive, rows, _qua2("fedavg"), (0, 1, 2))


@fragment("baselines-fedgen-qua2")
def baselines_fedgen(archive: Archive) -> str:
    """FedAvg's column is its canonical run per seed over every UCI-HAR CPU archive (seed 0: the AMD EPYC run
    of ``flea_objective_har``); FedGen's gain pairs each seed with FedAvg's run on FedGen's CPU model."""
    fedavg = (UCI_CPU, "fedavg", har("Qua(2)"))
    return pair_table(archive, ("FedGen", "FedAvg"), _qua2("fedgen"), fedavg, (0, 1, 2))


@fragment("baselines-fedmix-flea-dir01")
def baselines_fedmix_flea(archive: Archive) -> str:
    setting = har("Dir(0.1)")
    flea = (("flea_objective_har/runs",), "flea", setting)
    return pair_table(archive, ("FedMix", "`flea`"), (BASELINES, "fedmix", setting), flea, (0, 1, 2))


@fragment("baselines-fedavg-fedrs")
def baselines_fedavg_fedrs(archive: Archive) -> str:
    # FedAvg's canonical run per seed over every UCI-HAR CPU archive (seed 0: the AMD EPYC runs of
    # flea_table1_har/cpu_dir03 and flea_objective_har, not this study's unrecorded-CPU run)
    rows = {f"FedAvg, {s}": (UCI_CPU, "fedavg", har(s)) for s in ("Dir(0.3)", "Dir(0.1)")}
    rows |= {f"FedRS, {s}": (BASELINES, "fedrs", har(s)) for s in ("Qua(2)", "Dir(0.3)", "Dir(0.1)")}
    return runs_table(archive, rows, (0, 1, 2))


@fragment("baselines-paper-gap")
def baselines_paper_gap(archive: Archive) -> str:
    """Seed 0 against the paper's best (5-seed mean) in every K = 75 cell with a paper number: how many cells
    lie within 3 points by best and by last-10, and the mean (absolute) gaps."""
    gaps: dict[str, list[tuple[str, float, float]]] = {}
    for split in HAR_SPLITS:
        for row, name in BASELINE_NAMES.items():
            run = seed_run(archive, (BASELINES, row, har(split)), 0)
            paper = archive.paper("best_acc", row, [run]) if run is not None else None
            if run is not None and paper is not None:
                short = name.split(" (")[0]
                gaps.setdefault(split, []).append((short, BEST(run) - paper.mean, LAST10(run) - paper.mean))
    every = [g for cells in gaps.values() for g in cells]
    close = [
        f"{name} {split} {signed(best)}"
        for split, cells in gaps.items()
        for name, best, _ in cells
        if abs(best) <= 3
    ]
    within = sum(abs(last) <= 3 for _, _, last in every)
    mean = [statistics.fmean(g[i] for g in every) for i in (1, 2)]
    absolute = [statistics.fmean(abs(g[i]) for g in every) for i in (1, 2)]
    dir03 = gaps.get("Dir(0.3)", [])
    listed = ", ".join(f"{name} {signed(last)}" for name, _, last in dir03)
    return (
        f"Seed 0 against the paper's best (mean of its 5 seeds), over the {len(every)} cells with a paper "
        f"number: within 3 points by best in {len(close)} ({', '.join(close)}), by last-10 mean in {within}; "
        f"ours minus the paper is {signed(mean[0])} on average by best and {signed(mean[1])} by last-10 "
        f"(mean absolute gap {absolute[0]:.1f} and {absolute[1]:.1f}). On Dir(0.3), last-10 minus the "
        f"paper's best: {listed}.\n"
    )


# --- studies/fedaugmix: accuracy.json (seeds 0-1's run dirs are gone), attack/table.md, the cost benchmark --

AUGMIX_STUDY = STUDIES / "fedaugmix"
AUGMIX_NAMES = {
    "fedavg": "FedAvg",
    "fedaugmix": "FedAvg + Fed-AugMix",
    "fedprox": "FedProx",
    "fedprox_augmix": "FedProx + Fed-AugMix",
}


@fragment("fedaugmix-accuracy")
def fedaugmix_accuracy(archive: Archive) -> str:
    """Best, last-10 and final accuracy, mean ± sample std over the finished seeds of ``accuracy.json``
    (written by ``make_tables.py`` from the run dirs), the paper's number beside; then the last seed alone."""
    runs = [r for r in json.loads((AUGMIX_STUDY / "accuracy.json").read_text()) if r["finished"]]
    rows, last = [], []
    for method, name in AUGMIX_NAMES.items():
        mine = [r for r in runs if r["method"] == method]
        stats = [fmt(aggregate([r[k] for r in mine])) for k in ("best_acc", "last10_acc", "final_acc")]
        rows.append([name, f"{mine[0]['paper']:.2f}", seeds_text(r["seed"] for r in mine), *stats])
        final = max(mine, key=lambda r: r["seed"])
        last.append(f"{name} {final['best_acc']:.2f} / {final['last10_acc']:.2f}")
    seed = max(r["seed"] for r in runs)
    header = ["method", "paper (100 rounds, 3 seeds)", "seeds", "ours best", "ours last-10", "ours final"]
    return markdown_table(header, rows) + f"\nSeed {seed} alone (best / last-10): {', '.join(last)}.\n"


@fragment("fedaugmix-attack")
def fedaugmix_attack(archive: Archive) -> str:
    """``attack/table.md`` as ``make_tables.py attack`` writes it (the attacks' result lines, merged)."""
    return (AUGMIX_STUDY / "attack" / "table.md").read_text()


@fragment("fedaugmix-cost")
def fedaugmix_cost(archive: Archive) -> str:
    """The medians of ``benchmarks/augmix_cost.py``'s committed JSON."""
    cost = json.loads((ROOT / "benchmarks" / "results" / "augmix_cost_mnist_lenet5.json").read_text())
    ms = cost["median_ms"]
    return (
        f"A FedAvg step {ms['fedavg_step']:.1f} ms, drawing and applying AugMix for two views "
        f"{ms['augmix_views']:.1f} ms, a Fed-AugMix step {ms['fedaugmix_step']:.1f} ms "
        f"({cost['fedaugmix_over_fedavg']:.1f}x FedAvg); AugMix is "
        f"{100 * cost['augmix_share_of_fedaugmix_step']:.0f}% of a Fed-AugMix step (medians of "
        f"{cost['repeats']} interleaved repeats, batch {cost['batch']}, {cost['threads']} thread).\n"
    )


# --- studies/feature_analysis_har: features.json, through the CLI's own table


@fragment("feature-analysis")
def feature_analysis(archive: Archive) -> str:
    """``fedaug analyze features``'s table of ``features.json``."""
    result = json.loads((STUDIES / "feature_analysis_har" / "features.json").read_text())
    for row in result["groups"]:  # the JSON's std is over the clients with n in the denominator
        n = row["clients"]
        for key in ("local_db_train", "local_db_test"):
            row[key]["std"] = row[key]["std"] * math.sqrt(n / (n - 1)) if n > 1 else 0.0
    note = "(local DB: mean ± sample std over the round's clients; `features.json` holds the population std)"
    return feature_table(result) + f"\n\n{note}\n"
