"""The privacy blocks of docs/methods/flea.md: the Fashion-MNIST frontier's table and the FLea paper's claims
beside it, from ``studies/privacy/multiseed/frontier_{deep,conv4}/frontier.json``, and the UCI-HAR attacks'
table (``studies/privacy_har/attacks``), also in that study's README."""

from __future__ import annotations

import json
from typing import Any

from fedaug.attacks.aggregate import ContextRecord, Reports, load_reports, round_series
from fedaug.attacks.rounds_plot import Series
from fedaug.results.store import aggregate
from tools.results.common import STUDIES, Archive, fragment, json_cell
from tools.results.fragments import fmt, markdown_table

PRIVACY = STUDIES / "privacy" / "multiseed"


def _frontier_context(point: dict[str, Any]) -> str:
    """Samples for 90% context detection: ``≤`` the fewest tried (every seed reached it there), ``≥`` a seed
    never reached it (the largest size tried counted, a lower bound)."""
    if not point.get("context"):
        return "–"
    if point.get("context_floor"):
        return f"≤{point['context']['mean']:.0f}"
    return ("≥" if point.get("context_censored") else "") + json_cell(point["context"], 0)


def _frontiers() -> dict[str, dict[str, Any]]:
    """``frontier.json`` of each decoder's frontier, by decoder (deep, then conv4)."""
    return {
        d: json.loads((PRIVACY / f"frontier_{d}" / "frontier.json").read_text()) for d in ("deep", "conv4")
    }


@fragment("privacy_frontier")
def privacy_frontier(archive: Archive) -> str:
    """The frontier's table: per setting, accuracy, both decoders' MSE and the context attack at round 30."""
    frontiers = _frontiers()
    deep, conv4 = frontiers["deep"], frontiers["conv4"]
    conv4_mse = {p["setting"]: p.get("mse") for p in conv4["points"]}
    rows = [
        [
            p["setting"],
            str(p["accuracy"]["n"] if p.get("accuracy") else 0),
            json_cell(p.get("accuracy"), 2),
            json_cell(p.get("mse"), 4),
            json_cell(conv4_mse.get(p["setting"]), 4),
            _frontier_context(p),
            json_cell(p.get("dcor"), 3),
        ]
        for p in deep["points"]
    ]
    lines = deep["lines"]["mse"]
    blank = "mean input (nothing recovered)"
    mean_image = lines.get(blank)
    references = "; ".join(f"{k} {json_cell(v, 4)}" for k, v in lines.items() if k != blank)
    context = "; ".join(f"{k} {json_cell(v, 0)}" for k, v in deep["lines"]["context"].items())
    fedavg = deep.get("references", {}).get("FedAvg")
    return (
        f"Fashion-MNIST, round {deep['round']}; mean ± sample std (ddof = 1) over the seeds each setting has "
        "(unpaired), generated from `studies/privacy/multiseed/frontier_*/frontier.json`. MSE: a decoder "
        "trained by the attacker on its own samples, scored on held-out shared features (lower leaks more; "
        f"the mean image scores {json_cell(mean_image, 4)}).\n\n"
        + markdown_table(
            [
                "setting",
                "seeds",
                "last-10 acc. (%)",
                "MSE, deep decoder",
                "MSE, paper's conv4 decoder",
                "samples for 90% context detection",
                "logged dCor",
            ],
            rows,
        )
        + f"\nReference lines (deep decoder MSE): {references}. "
        f"Context attack on what FedMix and FedData share: {context}."
        + (
            f" FedAvg (shares nothing): last-10 {json_cell(fedavg, 2, unit='%', count=True)}."
            if fedavg
            else ""
        )
        + "\n"
    )


@fragment("privacy-claims")
def privacy_claims(archive: Archive) -> str:
    """The FLea paper's two privacy claims beside what the frontier measured (means over seeds)."""
    frontiers = _frontiers()
    rows = []
    for decoder, data in frontiers.items():
        points = {p["setting"]: p for p in data["points"] if p.get("mse")}
        undefended = next((p for s, p in points.items() if s.startswith("lambda2 0 (")), None)
        defended = {s: p["mse"]["mean"] for s, p in points.items() if p is not undefended}
        below = sorted(s for s, mse in defended.items() if mse < 0.01)
        rows.append(
            [
                f"reconstruction MSE, {decoder} decoder",
                "never below 0.01 with L_dec",
                f"{len(below)} of {len(defended)} defended settings below 0.01"
                + (f" ({', '.join(below)})" if below else "")
                + (f"; undefended features {json_cell(undefended['mse'], 4)}" if undefended else ""),
            ]
        )
    deep = frontiers["deep"]
    context = {p["setting"]: _frontier_context(p) for p in deep["points"]}
    shown = "; ".join(f"{s} {c}" for s, c in context.items())
    fedmix = deep["lines"]["context"].get("FedMix")
    rows.append(
        [
            "attacker samples for 90% context detection",
            "FLea 10,000; FedMix 300",
            f"{shown}; FedMix {json_cell(fedmix, 0)}",
        ]
    )
    return markdown_table(["claim", "paper (FLea, KDD 2024)", f"ours, round {deep['round']}"], rows)


HAR = STUDIES / "privacy_har"
HAR_SETTINGS = {"flea": "default `flea` (lambda2 3 -> 1)", "flea lambda2 0": "undefended (lambda2 = 0)"}
"""Attack label prefix (before `` r<round>``) -> the setting's name in the UCI-HAR table."""


def _needed(record: ContextRecord) -> str:
    """Samples for 90%: ``≤N`` when reached at the smallest size tried, ``>N`` when never reached."""
    if record.needed is None:
        return f">{max(record.accuracy)}"
    return f"≤{record.needed}" if record.needed == min(record.accuracy) else str(record.needed)


def har_cells(reports: Reports, ratios: Series, prefix: str, round_: int) -> list[str]:
    """Deep-decoder MSE / mean-window MSE (``ratios``: the reconstruction series of :func:`round_series`)
    and context samples (per seed) of one setting and round."""
    ratio = ratios.get((prefix, "deep"), {}).get(round_)
    label = f"{prefix} r{round_}"
    context = sorted((r for r in reports.context if r.label == label), key=lambda r: r.run)
    each = ", ".join(_needed(r) for r in context)
    return [f"{fmt(ratio, 2)} (n = {ratio.n})" if ratio else "–", each or "–"]


@fragment("privacy_har")
def privacy_har(archive: Archive) -> str:
    """UCI-HAR: per attacked round, both settings' reconstruction (deep decoder) and context attack."""
    reports = load_reports([HAR / "attacks"])
    ratios, _ = round_series(reports)
    rounds = sorted({r.round for r in reports.reconstruct} | {r.round for r in reports.context if r.round})
    rows = [
        [str(round_), *(c for prefix in HAR_SETTINGS for c in har_cells(reports, ratios, prefix, round_))]
        for round_ in rounds
    ]
    header = ["round"]
    for name in HAR_SETTINGS.values():
        header += [f"{name}: MSE / mean-window MSE", f"{name}: samples for 90% context (per seed)"]
    frontier = json.loads((HAR / "frontier_deep" / "frontier.json").read_text())
    accuracy = "; ".join(
        f"{p['setting']} {json_cell(p.get('accuracy'), 2, unit='%', count=True)}"
        for p in frontier["points"]
        if p.get("accuracy")
    )
    fedavg = frontier.get("references", {}).get("FedAvg")
    if fedavg:
        accuracy += f"; FedAvg (shares nothing) {json_cell(fedavg, 2, unit='%', count=True)}"
    baseline = aggregate([r.baseline_mse for r in reports.reconstruct])
    return (
        "UCI-HAR, HARNet shared at split layer 1, Qua(2), K = 75; generated from "
        "`studies/privacy_har/attacks/`. "
        "MSE: the deep decoder's held-out reconstruction error divided by the mean-window baseline's "
        f"({baseline.mean:.4f}; 1 = nothing recovered, lower leaks more), mean ± sample std (ddof = 1) over "
        "seeds. Context: training samples the attacker needed for 90% detection of the stuck-sensor marker "
        "(`≤N`: reached with the fewest tried; `>N`: not reached with the most tried).\n\n"
        + markdown_table(header, rows)
        + f"\nLast-10 accuracy at round 100: {accuracy}.\n"
    )
