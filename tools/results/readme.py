"""The README's results section: the headline table (one :func:`headline_row` per study) and the
sentences whose verbs the wording rules of docs/results.md choose."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from fedaug.attacks.aggregate import load_reports, round_series
from fedaug.engine.checkpoint import logged_round_times
from fedaug.results.store import aggregate
from tools.results import privacy_dp_verdict
from tools.results.common import (
    AUGMIX,
    BASELINES,
    BEST,
    FINAL,
    FLEA_METHODS,
    FSDD,
    FSDD_SPLITS,
    GLOBAL_LAST10,
    GPU_GRIDS,
    HEADLINE_ROWS,
    K75,
    K150,
    LAST10,
    ROOT,
    STUDIES,
    UCI_CPU,
    ZDA,
    ZDA_CELLS,
    Archive,
    cell,
    fragment,
    gain_cell,
    gains_text,
    har,
    headline_row,
    json_cell,
    listing,
    means,
    paper_cell,
    paper_gap,
    papers,
    seeds_of,
    split_names,
    stat,
    try_gain,
)
from tools.results.flea import cpu_spread
from tools.results.fragments import (
    beats,
    fmt,
    in_every_seed,
    markdown_table,
    reproduces,
    trails,
)
from tools.results.privacy import HAR, HAR_SETTINGS, PRIVACY, har_cells
from tools.results.privacy_augmix import frontier
from tools.results.studies_fedzda import ZDA_CIFAR10, ZDA_CIFAR10_CELLS
from tools.results.studies_flea import STANDIN, STANDIN_SPLITS, standin_papers

# --- README: the headline table -----------------------------------------------------------------------------


def _flea_papers(archive: Archive, settings: Sequence[str]) -> str:
    return "; ".join(
        f"{n} {papers(archive, 'best_acc', m, UCI_CPU, settings)}"
        for n, m in (("FedAvg", "fedavg"), ("FLea", "flea"))
    )


@fragment("headline")
def headline(archive: Archive) -> str:
    """README's table: one row per study result, each stating its statistic, seeds and device."""
    rows = [row for function in HEADLINE_ROWS for row in function(archive)]
    return markdown_table(["study and setting", "statistic", "ours", "paper"], rows)


@headline_row
def flea_k75_rows(archive: Archive) -> list[list[str]]:
    grids = list(GPU_GRIDS.items())[:2]  # the H100's two full grids (the H200 has 2 seeds of flea)
    gpu = "; ".join(
        f"{name} {gains_text(archive, (study,), 'flea', 'fedavg', K75, LAST10, 'NVIDIA H100 80GB HBM3')}"
        for name, study in grids
    )
    return [
        [
            "[FLea Table 1, UCI-HAR](docs/results.md#flea-table-1-on-uci-har-k--75-cpu) "
            "Qua(2) / Dir(0.3) / Dir(0.1), K = 75",
            "best %, mean ± std over seeds 0-2, CPU (paper: mean of 5 seeds)",
            "; ".join(f"{name} {means(archive, UCI_CPU, row, K75, BEST)}" for name, row in FLEA_METHODS),
            _flea_papers(archive, K75),
        ],
        [
            "same",
            "`flea` - FedAvg, last-10, paired, seeds 0-2, per device",
            f"CPU {gains_text(archive, UCI_CPU, 'flea', 'fedavg', K75, LAST10)}; {gpu}",
            "-",
        ],
    ]


@headline_row
def flea_k150_rows(archive: Archive) -> list[list[str]]:
    return [
        [
            "[FLea, UCI-HAR](studies/flea_k150_har/README.md) Qua(2) / Dir(0.3) / Dir(0.1), K = 150",
            "best %, mean ± std over seeds 0-2, CPU; `flea` - FedAvg, last-10, paired",
            f"FedAvg {means(archive, UCI_CPU, 'fedavg', K150, BEST)}; "
            f"`flea` {means(archive, UCI_CPU, 'flea', K150, BEST)}; "
            f"gain {gains_text(archive, UCI_CPU, 'flea', 'fedavg', K150, LAST10)}",
            _flea_papers(archive, K150),
        ]
    ]


@headline_row
def fsdd_rows(archive: Archive) -> list[list[str]]:
    cells = {k: [f"fsdd {x} K={k}" for x in FSDD_SPLITS] for k in (27, 54)}
    gains = (f"K = {k}: {gains_text(archive, FSDD, 'flea', 'fedavg', c, LAST10)}" for k, c in cells.items())
    return [
        [
            "[FLea, spoken digits (FSDD)](studies/flea_fsdd/README.md) Qua(3) / Dir(0.5) / Dir(0.1)",
            "`flea` - FedAvg, last-10, paired, seeds 0-2, CPU",
            "; ".join(gains),
            "no published FSDD numbers",
        ]
    ]


@headline_row
def standin_rows(archive: Archive) -> list[list[str]]:
    splits = list(STANDIN_SPLITS.values())
    paper = [standin_papers(archive, m) for m in ("fedavg", "flea")]
    return [
        [
            "[FLea, CIFAR-10 (JPEG q75 copy), stand-in model LeNet-5 for MobileNetV2]"
            "(studies/flea_cifar10_standin/README.md) Qua(3) / Dir(0.5) / Dir(0.1), K = 500",
            "best %, mean ± std over seeds 0-2, CPU; `flea` - FedAvg, last-10, paired",
            f"FedAvg {means(archive, STANDIN, 'fedavg', splits, BEST)}; "
            f"`flea` {means(archive, STANDIN, 'flea', splits, BEST)}; "
            f"gain {gains_text(archive, STANDIN, 'flea', 'fedavg', splits, LAST10)}",
            "MobileNetV2 (not our model): "
            + "; ".join(
                f"{name} {' / '.join(paper_cell(x) for x in stats)}"
                for name, stats in zip(("FedAvg", "FLea"), paper, strict=True)
            ),
        ]
    ]


FSDD_DRIFT_HEADLINE = (("SCAFFOLD", "scaffold"), ("FedDyn", "feddyn"), ("FedAvgM", "fedavgm"))
FSDD_DRIFT_HEADLINE += (("FedAdam", "fedadam"), ("`flea`", "flea"))
"""The drift-correction / server-optimizer rows of the headline, beside `flea` (the rest: the method page)."""


@headline_row
def fsdd_drift_rows(archive: Archive) -> list[list[str]]:
    cells = [f"fsdd {x} K=27" for x in FSDD_SPLITS]
    gains = (
        f"{name} {gains_text(archive, FSDD, row, 'fedavg', cells, LAST10)}"
        for name, row in FSDD_DRIFT_HEADLINE
    )
    return [
        [
            "[Drift-correction baselines, FSDD](docs/methods/baselines.md#the-drift-correction-and-server-"
            "optimizer-baselines-on-fsdd) Qua(3) / Dir(0.5) / Dir(0.1), K = 27",
            "method - FedAvg, last-10, paired, seeds 0-2, CPU, defaults untuned",
            "; ".join(gains),
            "no published FSDD numbers",
        ]
    ]


@headline_row
def baselines_rows(archive: Archive) -> list[list[str]]:
    qua2 = har("Qua(2)")
    base = archive.runs(BASELINES, "fedavg", qua2)
    ours, papers = [], []
    for name, row in (("FedLC", "fedlc"), ("FedMix", "fedmix"), ("FedGen", "fedgen")):
        runs = archive.runs(BASELINES, row, qua2)
        ours.append(f"{name} {gain_cell(try_gain(runs, base, BEST))}")
        papers.append(paper_gap(archive, "best_acc", row, "fedavg", runs))
    return [
        [
            "[Baselines, UCI-HAR](studies/baselines_har/README.md) Qua(2), K = 75",
            "best-round gain over FedAvg, paired by seed and CPU, seeds 0-2",
            ", ".join(ours),
            ", ".join(papers),
        ]
    ]


@headline_row
def fedzda_rows(archive: Archive) -> list[list[str]]:
    rows = []
    for name in ("FMNIST multimodal", "MNIST multimodal"):
        setting = ZDA_CELLS[name]
        base = archive.runs((*ZDA, "fedzda/cpu_drift/runs"), "fedavg", setting)
        cells, papers = [], []
        for short, row in (("ZDAC", "fedzdac"), ("ZDAS", "fedzdas")):
            runs = archive.runs(ZDA, row, setting)
            final, last = (gain_cell(try_gain(runs, base, m)) for m in (FINAL, GLOBAL_LAST10))
            cells.append(f"{short} {final} (last-10 {last})")
            papers.append(paper_gap(archive, "global_acc", row, "fedavg", runs))
        rows.append(
            [
                f"[Fed-ZDA](studies/fedzda/README.md), {name}",
                "final-round gain over FedAvg (the paper's statistic), paired, seeds 0-2, CPU",
                ", ".join(cells),
                ", ".join(papers),
            ]
        )
    return rows


@headline_row
def fedzda_cifar10_rows(archive: Archive) -> list[list[str]]:
    """Fed-ZDA's CIFAR-10 cells on the JPEG copy with the paper's BN-CNN (issue #65 (b)): each method's
    final-round and last-10 gain over FedAvg, paired by seed, against the paper's Tables 1-2 gap."""
    cells, papers, seeds = [], [], set()
    for split, setting in ZDA_CIFAR10_CELLS.items():
        base = archive.runs(ZDA_CIFAR10, "fedavg", setting)
        mine, theirs = [], []
        for short, row in (("ZDAC", "fedzdac"), ("ZDAS", "fedzdas")):
            runs = archive.runs(ZDA_CIFAR10, row, setting)
            gains = [try_gain(runs, base, m) for m in (FINAL, GLOBAL_LAST10)]
            if gains[0] is not None:
                seeds.update(gains[0].values)
            mine.append(f"{short} {gain_cell(gains[0])} (last-10 {gain_cell(gains[1])})")
            theirs.append(f"{short} {paper_gap(archive, 'global_acc', row, 'fedavg', runs or base)}")
        cells.append(f"{split}: {', '.join(mine)}")
        papers.append(f"{split}: {', '.join(theirs)}")
    if not seeds:
        return []
    listed = ", ".join(str(s) for s in sorted(seeds))
    return [
        [
            "[Fed-ZDA, CIFAR-10 (JPEG q75 copy)](studies/fedzda_cifar10_jpeg/README.md), the paper's BN-CNN, "
            "Shards(2) / multimodal, K = 100",
            f"final-round gain over FedAvg (the paper's statistic), paired, seed{'s' * (len(seeds) > 1)} "
            f"{listed}, CPU",
            "; ".join(cells),
            "; ".join(papers),
        ]
    ]


@headline_row
def fedaugmix_rows(archive: Archive) -> list[list[str]]:
    mnist = "mnist Dir(0.5) K=100"
    avg, aug = (archive.runs(AUGMIX, m, mnist) for m in ("fedavg", "fedaugmix"))
    return [
        [
            "[Fed-AugMix](studies/fedaugmix/README.md), MNIST, LeNet-5",
            f"best %, {seeds_of(avg)} only (the one with archived metrics), CPU",
            f"FedAvg {cell(avg, BEST)} -> {cell(aug, BEST)} with Fed-AugMix",
            " -> ".join(paper_cell(archive.paper("best_acc", m, avg)) for m in ("fedavg", "fedaugmix")),
        ]
    ]


# --- README: sentences whose words are computed by the wording rules (docs/results.md) ------------------


@fragment("verdicts")
def verdicts(archive: Archive) -> str:
    """README's sentences: each verb chosen by a rule of docs/results.md from the archived numbers."""
    gains = {
        m: {x: try_gain(archive.runs(UCI_CPU, "flea", x), archive.runs(UCI_CPU, "fedavg", x), m) for x in K75}
        for m in (LAST10, BEST)
    }
    by = {m: [x.split(" ")[1] for x, g in gains[m].items() if g is not None and beats(g)] for m in gains}
    every = [x.split(" ")[1] for x, g in gains[LAST10].items() if g is not None and in_every_seed(g)]
    not_best = [x for x in split_names(K75) if x not in by[BEST]]
    everywhere = "in every seed" if every == by[LAST10] else f"in every seed on {listing(every)}"
    first = (
        f"On UCI-HAR at K = 75 (CPU, seeds 0-2, paired by seed), `flea` beats FedAvg by the last-10 mean on "
        f"{listing(by[LAST10])} ({everywhere})"
        " and by best accuracy on "
        f"{listing(by[BEST])}"
        + (f"; by best accuracy on {listing(not_best)} the gain is within one std." if not_best else ".")
    )
    ours = {x: stat(archive.runs(UCI_CPU, "flea", x), BEST) for x in K75}
    same, other = [], []
    for x, st in ours.items():
        paper = archive.paper("best_acc", "flea", archive.runs(UCI_CPU, "flea", x))
        if st is not None and paper is not None:
            side = "higher" if st.mean > paper.mean else "lower"
            (
                same.append(x.split(" ")[1])
                if reproduces(st, paper.mean)
                else other.append(f"{x.split(' ')[1]} (ours {side})")
            )
    base_off = []
    for x in K75:
        st, paper = (
            stat(archive.runs(UCI_CPU, "fedavg", x), BEST),
            archive.paper("best_acc", "fedavg", archive.runs(UCI_CPU, "fedavg", x)),
        )
        if st is not None and paper is not None and not reproduces(st, paper.mean):
            base_off.append(f"{x.split(' ')[1]} (ours {'higher' if st.mean > paper.mean else 'lower'})")
    second = (
        f"On the paper's statistic (best accuracy), `flea` reproduces the paper's FLea on {listing(same)}"
        + (f" but not on {listing(other)}" if other else "")
        + f"; our FedAvg does not reproduce the paper's FedAvg on {listing(base_off)}, so we compare "
        "gains over FedAvg paired by seed, not absolute numbers."
    )
    eq6 = {
        x: try_gain(archive.runs(UCI_CPU, "flea_eq6", x), archive.runs(UCI_CPU, "fedavg", x), LAST10)
        for x in K75
    }
    below = [x.split(" ")[1] for x, g in eq6.items() if g is not None and trails(g)]
    level = [x.split(" ")[1] for x, g in eq6.items() if g is not None and not trails(g)]
    third = (
        f"FLea's Eq. 6 as printed (`flea_eq6`) is below FedAvg by the last-10 mean on {listing(below)}"
        + (f" and not distinguishable from it on {listing(level)}" if level else "")
        + " (seeds 0-2, paired); the default `flea` adds the authors' code's local cross-entropy, unsquared "
        "dCor and a lambda2 that decays from 3 to 1."
    )
    zda: list[str] = []
    zda_not: list[str] = []
    for name in ("FMNIST multimodal", "MNIST multimodal"):
        base = archive.runs((*ZDA, "fedzda/cpu_drift/runs"), "fedavg", ZDA_CELLS[name])
        for row, short in (("fedzdac", "ZDAC"), ("fedzdas", "ZDAS")):
            runs = archive.runs(ZDA, row, ZDA_CELLS[name])
            gain = try_gain(runs, base, FINAL)
            papers = [archive.paper("global_acc", m, runs) for m in (row, "fedavg")]
            if gain is None or papers[0] is None or papers[1] is None:
                continue
            (zda if reproduces(gain.stat, papers[0].mean - papers[1].mean) else zda_not).append(
                f"{short} on {name}"
            )
    fourth = (
        "On the paper's statistic (final round, paired, seeds 0-2), the Fed-ZDA gains over FedAvg reproduce "
        f"for {'both methods on both multimodal cells' if len(zda) == 4 else listing(zda)}"
        + (f" and not for {listing(zda_not)}" if zda_not else "")
        + "; Fed-AugMix's accuracy gain has one archived seed, too few for a claim."
    )
    return "\n".join((first, second, third, fourth, _standin_verdict(archive))) + "\n"


def _standin_verdict(archive: Archive) -> str:
    """The stand-in grid's sentence: where ``flea`` beats FedAvg by the last-10 mean (seeds 0-2, paired)."""
    gains = {
        split: try_gain(archive.runs(STANDIN, "flea", x), archive.runs(STANDIN, "fedavg", x), LAST10)
        for split, x in STANDIN_SPLITS.items()
    }
    by = [x for x, g in gains.items() if g is not None and beats(g)]
    every = [x for x in by if (g := gains[x]) is not None and in_every_seed(g)]
    within = [x for x, g in gains.items() if g is not None and x not in by]
    everywhere = "in every seed" if every == by else f"in every seed on {listing(every)}"
    paper = [standin_papers(archive, m) for m in ("fedavg", "flea")]
    smaller = []
    for (split, x), base, flea in zip(STANDIN_SPLITS.items(), *paper, strict=True):
        best = try_gain(archive.runs(STANDIN, "flea", x), archive.runs(STANDIN, "fedavg", x), BEST)
        if (
            best is not None
            and base is not None
            and flea is not None
            and best.stat.mean < flea.mean - base.mean
        ):
            smaller.append(split)
    return (
        "On CIFAR-10 (JPEG q75 copy) with LeNet-5 standing in for MobileNetV2 (K = 500, CPU, seeds 0-2, "
        f"paired), `flea` beats FedAvg by the last-10 mean on {listing(by)} ({everywhere})"
        + (f"; on {listing(within)} the gain is within one std" if within else "")
        + (
            f"; by best accuracy its gain is smaller than the paper's MobileNetV2 FLea - FedAvg on "
            f"{listing(smaller)} (another model on a lossy copy of the data: no test of the paper's number)."
            if smaller
            else "."
        )
    )


@fragment("cpu-claim")
def cpu_claim(archive: Archive) -> str:
    """The sentence under the CPU table: the largest move per dataset family."""
    text = cpu_spread(archive)
    moves: dict[str, float] = {}
    for line in text.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        family = "UCI-HAR" if cells[0].startswith("uci_har") else "MNIST / Fashion-MNIST"
        best = abs(float(cells[2].split("(")[1].rstrip(")")))
        moves[family] = max(moves.get(family, 0.0), best)
    parts = [f"up to {v:.2f} points of best accuracy on {k}" for k, v in sorted(moves.items(), reverse=True)]
    return (
        "Runs of the same config and seed on two CPU models differ by "
        + " and ".join(parts)
        + ": a rerun on another CPU model is another draw, not the same run.\n"
    )


# --- README: the privacy row, from the multi-seed attack study (studies/privacy/multiseed) -----------------

PRIVACY_RUNS = {"default `flea`": "privacy_fmnist", "undefended (lambda2 = 0)": "privacy_fmnist_decor0"}
PRIVACY_TARGETS = {"default `flea`": "flea r30", "undefended (lambda2 = 0)": "flea lambda2 0 r30"}


def _privacy_cell(archive: Archive, summary: dict[str, list[dict[str, Any]]], name: str) -> str:
    """One shared-feature setting at round 30: deep-decoder MSE, context samples for 90% (per seed) and the
    runs' last-10 accuracy, each ``mean ± sample std`` over the seeds it has."""
    target = PRIVACY_TARGETS[name]
    mse = [e["mse"] for e in summary["reconstruct"] if e["label"] == target and e["attacker"] == "deep"]
    context = [e for e in summary["context"] if e["label"] == target]
    needed = [
        f"≤{e['needed']}" if e["needed"] == min(int(size) for size in e["accuracy"]) else str(e["needed"])
        for e in context
    ]
    runs = [  # the study's folder also holds FedAvg, flea_eq6 and flea_official runs of the same name
        r
        for r in archive.study("privacy")
        if r.config.get("name") == PRIVACY_RUNS[name] and r.config.get("method.name") == "flea"
    ]
    accuracy = aggregate([100 * r.summary["last10_acc"] for r in runs])
    return (
        f"{name}: MSE {fmt(aggregate(mse), 4)} (n = {len(mse)}), "
        f"context {', '.join(needed)} samples (n = {len(needed)}), "
        f"last-10 {fmt(accuracy)}% (n = {accuracy.n})"
    )


@headline_row
def privacy_rows(archive: Archive) -> list[list[str]]:
    summary = json.loads((PRIVACY / "summary" / "summary.json").read_text())
    baseline = aggregate([e["baseline_mse"] for e in summary["reconstruct"] if e["attacker"] == "deep"])
    return [
        [
            "[Privacy](studies/privacy/README.md), FLea's shared features, FMNIST, round 30",
            f"deep-decoder reconstruction MSE (the mean image: {baseline.mean:.3f}), samples for 90% context "
            "detection per seed (≤: the fewest tried), last-10 accuracy; mean ± sample std over n seeds, CPU",
            "; ".join(_privacy_cell(archive, summary, name) for name in PRIVACY_RUNS),
            "with L_dec MSE never below 0.01; context 10,000 samples (FedMix 300)",
        ]
    ]


HAR_ACCURACY = {"flea": "flea default (lambda2 3 -> 1)", "flea lambda2 0": "lambda2 0 (undefended)"}
"""Attack label prefix -> the setting's name in the UCI-HAR frontier (its accuracy)."""


@headline_row
def privacy_har_rows(archive: Archive) -> list[list[str]]:
    """UCI-HAR's shared activations at round 100: both settings' reconstruction, context attack, accuracy."""
    del archive
    reports = load_reports([HAR / "attacks"])
    ratios, _ = round_series(reports)
    points = json.loads((HAR / "frontier_deep" / "frontier.json").read_text())["points"]
    accuracy = {p["setting"]: p["accuracy"] for p in points if p.get("accuracy")}
    cells = []
    for prefix, name in HAR_SETTINGS.items():
        mse, context = har_cells(reports, ratios, prefix, 100)
        cells.append(
            f"{name}: MSE ratio {mse}, context {context} samples, "
            f"last-10 {json_cell(accuracy.get(HAR_ACCURACY[prefix]), 2, unit='%', count=True)}"
        )
    return [
        [
            "[Privacy](studies/privacy_har/README.md), FLea's shared activations, UCI-HAR Qua(2), K = 75, "
            "round 100",
            "deep-decoder MSE over the mean window's (1 = nothing recovered), samples for 90% context "
            "detection per seed (≤: the fewest tried), last-10 accuracy; mean ± sample std over n seeds, CPU",
            "; ".join(cells),
            "no UCI-HAR privacy numbers (the paper attacks CIFAR-10)",
        ]
    ]


@headline_row
def privacy_dp_rows(archive: Archive) -> list[list[str]]:
    """The DP frontier on Fashion-MNIST (three seeds): FLea without DP, its most accurate DP setting, and
    the verdict (``tools.results.privacy_dp_verdict``)."""
    fmnist = privacy_dp_verdict.DATASETS[0]
    found = [
        r
        for r in privacy_dp_verdict.rows(archive.root, fmnist)
        if r.accuracy is not None and r.mse is not None
    ]
    if not found:
        return []

    def gain(row: privacy_dp_verdict.Row) -> float:
        return row.accuracy.stat.mean if row.accuracy else float("-inf")

    def described(row: privacy_dp_verdict.Row) -> str:
        assert row.accuracy is not None and row.mse is not None
        seeds = len(row.accuracy.values)
        return (
            f"{row.setting}: {fmt(row.accuracy.stat, 2, sign=True)} last-10, MSE "
            f"{fmt(row.mse.stat, 4, sign=True)} vs FedMix's (n = {seeds})"
        )

    plain = [r for r in found if r.setting.endswith("epsilon inf")]
    noised = [r for r in found if not r.setting.endswith("epsilon inf")]
    cells = [described(r) for r in plain[:1]]
    if noised:
        best = max(noised, key=gain)
        cells.append(f"most accurate with DP: {described(best)}")
    best_private = privacy_dp_verdict.recommended(found)
    total = len(privacy_dp_verdict.LAYERS) * len(privacy_dp_verdict.EPSILONS)
    if best_private is not None:
        cells.append(f"recommended (`flea_private`): {best_private.setting}")
    elif privacy_dp_verdict.decided(found) == total:
        cells.append("none both more accurate than FedAvg and more private than FedMix: no `flea_private`")
    else:
        cells.append(f"not decided yet ({privacy_dp_verdict.decided(found)} of {total} settings decided)")
    return [
        [
            "[Privacy with DP](studies/privacy_dp/README.md) (`method.share_dp`), FLea's activations against "
            "FedMix's averages at the same epsilon, FMNIST",
            "last-10 gain over FedAvg and best-decoder MSE minus FedMix's, both paired by seed; mean ± "
            "sample std over n seeds, CPU",
            "; ".join(cells),
            "no DP in the papers",
        ]
    ]


AUGMIX_SEVERITIES = {"0": "no augmentation", "3": "severity 3 (default)", "10": "severity 10"}


@headline_row
def augmix_privacy_rows(archive: Archive) -> list[list[str]]:
    """Fed-AugMix against Inverting Gradients: SSIM on the converged and untrained model (the attacker who
    models AugMix + JS) and accuracy, at no augmentation, the default severity and the highest."""
    del archive
    ssim = frontier("ssim")
    if ssim is None:
        return []
    lines = ("converged, attacker aware", "untrained, attacker aware")
    cells = []
    for s, name in AUGMIX_SEVERITIES.items():
        pair = " / ".join(json_cell(ssim["attack"][x].get(s), 1, scale=100.0) for x in lines)
        seeds = ssim["attack"][lines[0]].get(s, {}).get("n", 0)
        accuracy = json_cell(ssim["accuracy"].get(s), 2, unit="%", count=True)
        cells.append(f"{name}: SSIM {pair} (n = {seeds}), last-10 {accuracy}")
    return [
        [
            "[Privacy, Fed-AugMix](studies/fedaugmix/severity/README.md), Inverting Gradients, MNIST, "
            "LeNet-5",
            "SSIM (%) of the recovered batch, converged / untrained model, attacker aware of AugMix + JS; "
            "last-10 accuracy; mean ± sample std over n seeds, CPU",
            "; ".join(cells),
            "SSIM below 5% with Fed-AugMix; accuracy declines as severity rises",
        ]
    ]


# --- docs/methods/flea.md: the privacy-utility frontier (studies/privacy/multiseed/frontier_*) -------------


# --- README: what to expect over seeds, beside the main job's seed-0 table ---------------------------------


@fragment("main-job-expect")
def main_job_expect(archive: Archive) -> str:
    """The main job's setting over seeds 0-2 (``flea_objective_har``): last-10 means, paired gains, and
    ``flea_eq6``'s gap, as the sentences under the README's first table."""
    study = ("flea_objective_har/runs",)

    def runs(row: str, split: str) -> list[Any]:
        return archive.runs(study, row, har(split))

    def gain(row: str, split: str, metric: Any = LAST10) -> str:
        return gain_cell(try_gain(runs(row, split), runs("fedavg", split), metric))

    q, d = "Qua(2)", "Dir(0.1)"
    return (
        f"On the main job's setting (Qua(2)) FLea's last-10 mean is {cell(runs('flea', q), LAST10)} against "
        f"FedAvg's {cell(runs('fedavg', q), LAST10)}, a gain of **{gain('flea', q)} points** paired by seed "
        f"({seeds_of(runs('flea', q))}), and on Dir(0.1) {cell(runs('flea', d), LAST10)} against "
        f"{cell(runs('fedavg', d), LAST10)}, **{gain('flea', d)}**. By the best round the gain is "
        f"{gain('flea', q, BEST)} on Qua(2) and {gain('flea', d, BEST)} on Dir(0.1). The paper's Eq. 6 as "
        f"printed, `flea_eq6`, ends below FedAvg here by the last-10 mean ({gain('flea_eq6', q)} on Qua(2), "
        f"{gain('flea_eq6', d)} on Dir(0.1)).\n"
    )


# --- README: how long the main job takes -------------------------------------------------------------------


def _job_minutes(archive: Archive, method: str) -> tuple[float, str]:
    """Minutes of rounds of the main job's ``method`` run (seed 0, Qua(2)) and the CPU it ran on."""
    runs = [r for r in archive.runs(("flea_objective_har/runs",), method, har("Qua(2)")) if r.seed == 0]
    if not runs:
        raise ValueError(f"no archived seed-0 {method} run of the main job")
    return sum(t for _, t in logged_round_times(runs[0].path)) / 60, runs[0].cpu or "an unrecorded CPU"


@fragment("how-long")
def how_long(archive: Archive) -> str:
    """The main job's CPU minutes (its archived seed-0 runs), the H100's 100-round runs and eager probe, and
    FLea Table 1's one-call sweep time (``h100_one_call/sweep.log``)."""
    (fedavg, cpu), (flea, _) = (_job_minutes(archive, m) for m in ("fedavg", "flea"))
    results = ROOT / "benchmarks" / "results"
    graphs = {
        r["method"]: r for r in json.loads((results / "device_runs_h100_graphs.json").read_text())["runs"]
    }
    probe = json.loads((results / "gpu_h100_probe_5rounds.json").read_text())["methods"]
    eager = {m: next(r for r in rows if r["mode"] == "sequential") for m, rows in probe.items()}
    log = (STUDIES / "flea_table1_har" / "h100_one_call" / "sweep.log").read_text()
    sweep = re.search(r"sweep exit 0 after (\d+) s", log)
    fed, fl = graphs["fedavg"], graphs["flea"]
    return (
        f"**How long.** On a CPU, the main job's seed-0 runs took {fedavg:.0f} minutes of rounds for FedAvg "
        f"and {flea:.0f} for FLea on a 2-core {cpu} machine, one thread each. On a GPU (install a CUDA build "
        "of PyTorch instead of the CPU wheel; the runs then use the GPU by default, and replay each local "
        "step as one CUDA graph) the job takes under a minute on an NVIDIA H100: "
        f"{fed['wall_s']:.1f} s for FedAvg ({100 * fed['mean_round_s']:.1f} s of rounds, the rest the "
        f"process's start-up) and {fl['wall_s']:.1f} s for FLea (mean rounds of "
        f"{fed['mean_round_s']:.2f} and {fl['mean_round_s']:.2f} s, against "
        f"{eager['fedavg']['median_round_s']:.2f} and {eager['flea']['median_round_s']:.2f} s without "
        "graphs, medians of a 5-round probe; `benchmarks/results/device_runs_h100_graphs.json`, "
        "`gpu_h100_probe_5rounds.json`). A sweep packs runs on one GPU with `--workers`: FLea Table 1's 36 "
        "FedAvg/FLea runs on UCI-HAR (two values of K, three splits, three seeds) finished in "
        f"{sweep.group(1) if sweep else '?'} s of sweep time, 16 at once in one command "
        "([studies/flea_table1_har](studies/flea_table1_har/README.md)).\n"
    )


@fragment("test-time")
def test_time(archive: Archive) -> str:
    """The README's test command on a fresh clone: time, outcomes, CPU, load (benchmarks/test_suite.py)."""
    del archive
    path = ROOT / "benchmarks" / "results" / "test_suite.json"
    if not path.is_file():
        return "its time is not measured yet (`python benchmarks/test_suite.py`).\n"
    suite = json.loads(path.read_text())
    minutes, seconds = divmod(round(suite["seconds"]), 60)
    shown = ("passed", "failed", "errors", "skipped")  # deselected (slow) tests and warnings are not outcomes
    counts = ", ".join(f"{suite['outcomes'][k]} {k}" for k in shown if suite["outcomes"].get(k))
    load = suite["loadavg_before"][0]
    busy = (
        f"with a load average of {load:.1f} as it started (other work ran beside it), so expect less on idle "
        "cores"
        if load >= 0.5
        else "otherwise idle"
    )
    top = suite["slowest"][0] if suite["slowest"] else None
    extras = suite.get("extras_installed")  # recorded since issue 69: which install the figures are of
    install = "" if extras is None else f" with `.[{','.join(['test', *extras])}]` installed"
    return (
        f"on a fresh clone{install} it took {minutes} min {seconds} s ({counts}) on a "
        f"{suite['cpu_count']}-core "
        f"{suite['cpu_model']} "
        f"{busy}; the slowest test took {top['seconds']:.0f} s (`{top['test'].split('::')[-1]}`)"
        if top
        else ""
    ) + " (`benchmarks/results/test_suite.json`, from `python benchmarks/test_suite.py`).\n"
