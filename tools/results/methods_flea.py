"""The generated blocks of docs/methods/flea.md: why ``flea``'s default (the objective study's paired gains,
seed by seed) and how it fares beyond that study, each verb chosen by the wording rules of docs/results.md
(:func:`beats`, :func:`trails`, :func:`in_every_seed`)."""

from __future__ import annotations

from tools.results.common import (
    BASELINES,
    FLEA_ROWS,
    K150_SPLITS,
    LAST10,
    UCI_CPU,
    Archive,
    fragment,
    gain_cell,
    har,
    listing,
    try_gain,
)
from tools.results.fragments import Gain, beats, fmt, in_every_seed, markdown_table, seeds_text, trails

OBJECTIVE = ("flea_objective_har/runs",)
SPLITS = ("Qua(2)", "Dir(0.1)")


def verb(gain: Gain) -> str:
    """``gains over`` / ``is below`` / ``is not distinguishable from`` by the rules (one seed: no claim)."""
    if beats(gain):
        return "gains over"
    if trails(gain):
        return "is below"
    return "is not distinguishable from" if gain.stat.n >= 2 else "(one seed, no claim) differs from"


def every(gain: Gain) -> str:
    return f", in every seed ({seeds_text(gain.values)})" if beats(gain) and in_every_seed(gain) else ""


def per_seed(gain: Gain | None) -> str:
    if gain is None:
        return "-"
    seeds = " / ".join(f"{gain.values[s]:+.2f}" for s in sorted(gain.values))
    return f"{gain_cell(gain)} ({seeds})"


@fragment("flea-default-gains")
def flea_default_gains(archive: Archive) -> str:
    """The objective study's last-10 gains over FedAvg per objective, seed by seed, and which gains most."""
    gains: dict[str, dict[str, Gain | None]] = {}
    for name, row in FLEA_ROWS.items():
        if row == "fedavg":
            continue
        gains[name] = {
            s: try_gain(
                archive.runs(OBJECTIVE, row, har(s)), archive.runs(OBJECTIVE, "fedavg", har(s)), LAST10
            )
            for s in SPLITS
        }
    header = ["objective", *(f"{s} (seeds {' / '.join('012')})" for s in SPLITS)]
    table = markdown_table(header, [[name, *(per_seed(g[s]) for s in SPLITS)] for name, g in gains.items()])
    sentences = []
    for s in SPLITS:
        ranked = [(n, gain) for n, g in gains.items() if (gain := g[s]) is not None]
        top, gain = max(ranked, key=lambda item: item[1].stat.mean)
        short = top.split(" (")[0]
        sentences.append(f"on {s} {short} has the largest mean gain and {verb(gain)} FedAvg{every(gain)}")
    return table + "\n" + "By the last-10 mean, paired by seed: " + "; ".join(sentences) + ".\n"


@fragment("flea-beyond")
def flea_beyond(archive: Archive) -> str:
    """``flea`` against FedAvg outside the objective study (CPU, paired by seed), and FedMix against ``flea``
    on Dir(0.1)."""
    parts = []
    dir03 = har("Dir(0.3)")
    gain = try_gain(archive.runs(UCI_CPU, "flea", dir03), archive.runs(UCI_CPU, "fedavg", dir03), LAST10)
    if gain is not None:
        parts.append(
            "on Dir(0.3) with K = 75 (`studies/flea_table1_har/cpu_dir03`) "
            f"`flea` {verb(gain)} FedAvg by the "
            f"last-10 mean ({fmt(gain.stat, sign=True)}, {seeds_text(gain.values)}){every(gain)}"
        )
    k150 = []
    for split, setting in K150_SPLITS.items():
        gain = try_gain(
            archive.runs(UCI_CPU, "flea", setting), archive.runs(UCI_CPU, "fedavg", setting), LAST10
        )
        if gain is not None:
            k150.append(
                f"{verb(gain)} FedAvg on {split} ({fmt(gain.stat, sign=True)}, {seeds_text(gain.values)})"
            )
    if k150:
        parts.append("with K = 150 (`studies/flea_k150_har`) it " + listing(k150))
    text = "Beyond that study, by the last-10 mean paired by seed (CPU): " + "; ".join(parts) + ".\n"
    fedmix = []
    for clients, studies in ((75, BASELINES), (150, UCI_CPU)):
        setting = har("Dir(0.1)", clients)
        flea_runs = archive.runs(UCI_CPU, "flea", setting)
        gain = try_gain(archive.runs(studies, "fedmix", setting), flea_runs, LAST10)
        if gain is not None:
            fedmix.append(f"K = {clients}: FedMix {verb(gain)} `flea` ({gain_cell(gain)}){every(gain)}")
    if fedmix:
        text += (
            "Against FedMix on UCI-HAR Dir(0.1), by the last-10 mean paired by seed: "
            + "; ".join(fedmix)
            + ".\n"
        )
    return text
