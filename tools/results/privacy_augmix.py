"""The Fed-AugMix severity study's blocks (docs/methods/fedaugmix.md and ``studies/fedaugmix/severity``):
severity against Inverting Gradients and accuracy, from ``fedaug attack invert-frontier``'s
``severity_frontier.json`` (``frontier_ssim/``, ``frontier_mse/``), and the paper's privacy claims beside
it."""

from __future__ import annotations

import json
from typing import Any

from tools.results.common import STUDIES, Archive, fragment, json_cell
from tools.results.fragments import markdown_table

SEVERITY = STUDIES / "fedaugmix" / "severity"
PAPER_MSE = {"converged": (2.092, 2.414), "untrained": (1.387, 2.909)}
"""The Fed-AugMix paper's MSE at severity 0 and 10 (Sec. V, Fig. 4), by stage."""


def frontier(metric: str) -> dict[str, Any] | None:
    """``severity_frontier.json`` of ``metric`` (ssim or mse); None before the study archived anything."""
    path = SEVERITY / f"frontier_{metric}" / "severity_frontier.json"
    return json.loads(path.read_text()) if path.is_file() else None


NOT_YET = "No seed of the severity study is archived yet (`studies/fedaugmix/severity/`).\n"


@fragment("augmix_severity")
def augmix_severity(archive: Archive) -> str:
    """Per severity: last-10 accuracy of the runs and the attack's SSIM per stage and threat model."""
    del archive
    ssim = frontier("ssim")
    if ssim is None:
        return NOT_YET
    lines = list(ssim["attack"])
    severities = sorted(
        {float(s) for s in ssim["accuracy"]} | {float(s) for p in ssim["attack"].values() for s in p}
    )
    rows = [
        [
            f"{s:g}",
            json_cell(ssim["accuracy"].get(f"{s:g}"), 2, count=True),
            *(json_cell(ssim["attack"][line].get(f"{s:g}"), 1, scale=100.0, count=True) for line in lines),
        ]
        for s in severities
    ]
    return (
        "MNIST, LeNet-5, 100 clients, Dir(0.5), 100 rounds; generated from "
        "`studies/fedaugmix/severity/frontier_ssim/severity_frontier.json`. Mean ± sample std (ddof = 1) "
        "over seeds (n each). Severity 0 is FedAvg (accuracy) and an unprotected client (attack). "
        "SSIM (%) of what Inverting Gradients recovers from one client's update on that seed's FedAvg "
        "model, untrained or converged, by an attacker who models AugMix + JS (`aware`) or assumes plain "
        "cross-entropy (`ce`); lower is more private.\n\n"
        + markdown_table(["severity", "last-10 acc. (%)", *(f"SSIM: {line}" for line in lines)], rows)
    )


def _extremes(points: dict[str, Any]) -> str:
    """``value at the lowest severity -> value at the highest`` of one line's MSE points."""
    ordered = sorted(points.items(), key=lambda kv: float(kv[0]))
    (low, first), (high, last) = ordered[0], ordered[-1]
    return f"{first['mean']:.3f} (s = {low}) -> {last['mean']:.3f} (s = {high})"


@fragment("augmix-claims")
def augmix_claims(archive: Archive) -> str:
    """The Fed-AugMix paper's privacy claims beside the severity study's means."""
    del archive
    ssim, mse = frontier("ssim"), frontier("mse")
    if ssim is None or mse is None:
        return NOT_YET
    protected = [
        (line, s, p["mean"])
        for line, points in ssim["attack"].items()
        for s, p in points.items()
        if float(s) > 0
    ]
    below = [f"{line} s = {s}" for line, s, value in protected if value < 0.05]
    lowest = min(protected, key=lambda x: x[2])
    rows = [
        [
            "SSIM of the reconstructions",
            "below 5% at every stage and severity",
            f"{len(below)} of {len(protected)} protected (line, severity) means below 5%; lowest "
            f"{100 * lowest[2]:.1f}% ({lowest[0]}, s = {lowest[1]})",
        ]
    ]
    for stage, (low, high) in PAPER_MSE.items():
        ours = "; ".join(
            f"{line}: {_extremes(points)}" for line, points in mse["attack"].items() if line.startswith(stage)
        )
        rows.append([f"MSE, {stage} model, severity 0 -> 10", f"{low} -> {high} (rises)", ours or "–"])
    accuracy = sorted(ssim["accuracy"].items(), key=lambda kv: float(kv[0]))
    rows.append(
        [
            "accuracy against severity",
            "declines as severity rises; low severities improve on FedAvg",
            "; ".join(f"s = {s}: {p['mean']:.2f}%" for s, p in accuracy),
        ]
    )
    counts = sorted(
        {p["n"] for p in ssim["accuracy"].values()}
        | {p["n"] for x in ssim["attack"].values() for p in x.values()}
    )
    seeds = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
    ours = f"ours (mean over {seeds} seed{'' if counts == [1] else 's'})"
    return markdown_table(["claim", "paper (Fed-AugMix)", ours], rows) + (
        "\nOur MSE is on images in [0, 1] (PSNR's range 1); the paper's values above 1 suggest normalised "
        "images, a scale its text does not give, so compare the direction, not the values.\n"
    )
