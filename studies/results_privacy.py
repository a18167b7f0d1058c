"""The privacy blocks of docs/methods/flea.md: the Fashion-MNIST frontier's table and the FLea paper's claims
beside it, from ``studies/privacy/multiseed/frontier_{deep,conv4}/frontier.json``."""

from __future__ import annotations

import json
from typing import Any

from results_common import STUDIES, Archive, fragment

from fedaug.results.fragments import fmt, markdown_table
from fedaug.results.store import Stat

PRIVACY = STUDIES / "privacy" / "multiseed"


def _frontier_stat(entry: dict[str, Any] | None, digits: int) -> str:
    """``mean ± std`` (:func:`fmt`) of a frontier.json statistic; a dash where the setting has none."""
    return fmt(Stat(**entry), digits) if entry else "–"


def _frontier_context(point: dict[str, Any]) -> str:
    """Samples for 90% context detection: ``≤`` the fewest tried (every seed reached it there), ``≥`` a seed
    never reached it (the largest size tried counted, a lower bound)."""
    if not point.get("context"):
        return "–"
    if point.get("context_floor"):
        return f"≤{point['context']['mean']:.0f}"
    return ("≥" if point.get("context_censored") else "") + _frontier_stat(point["context"], 0)


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
            _frontier_stat(p.get("accuracy"), 2),
            _frontier_stat(p.get("mse"), 4),
            _frontier_stat(conv4_mse.get(p["setting"]), 4),
            _frontier_context(p),
            _frontier_stat(p.get("dcor"), 3),
        ]
        for p in deep["points"]
    ]
    lines = deep["lines"]["mse"]
    blank = "mean image (nothing recovered)"
    mean_image = lines.get(blank)
    references = "; ".join(f"{k} {_frontier_stat(v, 4)}" for k, v in lines.items() if k != blank)
    context = "; ".join(f"{k} {_frontier_stat(v, 0)}" for k, v in deep["lines"]["context"].items())
    fedavg = deep.get("references", {}).get("FedAvg")
    return (
        f"Fashion-MNIST, round {deep['round']}; mean ± sample std (ddof = 1) over the seeds each setting has "
        "(unpaired), generated from `studies/privacy/multiseed/frontier_*/frontier.json`. MSE: a decoder "
        "trained by the attacker on its own samples, scored on held-out shared features (lower leaks more; "
        f"the mean image scores {_frontier_stat(mean_image, 4)}).\n\n"
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
            f" FedAvg (shares nothing): last-10 {_frontier_stat(fedavg, 2)}% (n = {fedavg['n']})."
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
                + (f"; undefended features {_frontier_stat(undefended['mse'], 4)}" if undefended else ""),
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
            f"{shown}; FedMix {_frontier_stat(fedmix, 0)}",
        ]
    )
    return markdown_table(["claim", "paper (FLea, KDD 2024)", f"ours, round {deep['round']}"], rows)
