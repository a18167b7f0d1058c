"""The DP frontier study's "How long" blocks (``studies/privacy_dp/README.md``): each step kind's measured
seconds and the projection of what is left, from the accounting ``studies/privacy_dp/step_costs.py --json``
wrote (``studies/privacy_dp/step_costs.json``)."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tools.results.common import STUDIES, Archive, fragment
from tools.results.fragments import markdown_table

COSTS = STUDIES / "privacy_dp" / "step_costs.json"
DATASETS = {"fmnist": "Fashion-MNIST (30 rounds, K = 100)", "har": "UCI-HAR (100 rounds, K = 75)"}
"""The study's data sets: the JSON's name and the table's column."""
STEPS = {
    ("flea l1", "run"): "FLea run, split layer 1",
    ("flea l2", "run"): "FLea run, split layer 2",
    ("fedmix", "run"): "FedMix run (no split layer)",
    ("flea l1", "reconstruct"): "reconstruct, FLea layer 1 (conv4 + deep decoders)",
    ("flea l2", "reconstruct"): "reconstruct, FLea layer 2",
    ("fedmix", "reconstruct"): "reconstruct, FedMix (the attacker's estimate, no decoder)",
    ("flea l1", "context"): "context, FLea layer 1",
    ("flea l2", "context"): "context, FLea layer 2",
    ("fedmix", "context"): "context, FedMix",
}
"""The table's rows: (method, kind) of the JSON and the row's name."""


@cache
def costs() -> dict[str, Any]:
    return dict(json.loads(COSTS.read_text()))


def _seconds(value: float) -> str:
    return f"{value:,.0f}"


def _cell(data: dict[str, Any], dataset: str, method: str, kind: str) -> str:
    """``min-max CPU s (n steps)`` of a measured kind, ``S s assumed`` of an assumed one, else a dash."""
    for row in data["measured"]:
        if (row["dataset"], row["method"], row["kind"]) == (dataset, method, kind):
            spread = _seconds(row["min_s"])
            if round(row["max_s"]) != round(row["min_s"]):
                spread += f"-{_seconds(row['max_s'])}"
            return f"{spread} {row['seconds']} s (n = {row['steps']})"
    for key in (f"{dataset}:{method}:{kind}", f"{dataset}:{kind}", kind):
        if key in data["assumed_s"]:
            return f"{_seconds(data['assumed_s'][key])} s, assumed"
    return "-"


def _startup(data: dict[str, Any], dataset: str) -> str:
    """The range of the kinds' median start-ups (imports, data, dp-accounting) on ``dataset``."""
    found = [
        r["startup_median_s"]
        for r in data["measured"]
        if r["dataset"] == dataset and r["startup_median_s"] is not None
    ]
    if not found:
        return "-"
    low, high = round(min(found)), round(max(found))
    return f"{low}-{high} wall s (medians)" if low != high else f"{low} wall s (medians)"


@fragment("privacy_dp_step_costs")
def privacy_dp_step_costs(archive: Archive) -> str:
    """Per step kind and data set: the finished steps' seconds, or the assumed ones."""
    del archive
    data = costs()
    rows = [
        [name, *(_cell(data, dataset, method, kind) for dataset in DATASETS)]
        for (method, kind), name in STEPS.items()
    ]
    rows.append(["start-up of a step", *(_startup(data, dataset) for dataset in DATASETS)])
    when = data["measured_from"]
    if data["measured_to"] != when:
        when += f" to {data['measured_to']}"
    return (
        f"Generated from `studies/privacy_dp/step_costs.json` (finished steps of {when}, {data['machine']}). "
        "Seconds on one core: a run's CPU seconds over its logged rounds, an attack's wall seconds (an upper "
        "bound of its CPU seconds); min-max over the finished steps of the kind; `assumed`: an `--assume` "
        "value of the command above, for a kind no finished step of the log measured yet.\n\n"
        + markdown_table(["step (seconds on one core)", *DATASETS.values()], rows)
    )


@fragment("privacy_dp_left")
def privacy_dp_left(archive: Archive) -> str:
    """One line: steps done and left, and the core-hours left in all, per data set and in training."""
    del archive
    data = costs()
    hours = data["core_hours"]
    if hours["left"] is None:
        return f"{data['steps_left']} steps left; a kind left has no seconds (measured or `--assume`).\n"
    by_dataset = ", ".join(
        f"{DATASETS[name].split(' (')[0]} {value:.1f}" for name, value in hours["left_by_dataset"].items()
    )
    training = hours["left_by_kind"].get("run", 0.0) / hours["left"] if hours["left"] else 0.0
    return (
        f"With {data['steps_done']} of {data['steps_done'] + data['steps_left']} steps done "
        f"({hours['done']:.1f} core-hours as measured), the {data['steps_left']} left cost about "
        f"{hours['left']:.1f} core-hours at the medians and the assumed seconds: {by_dataset}; training is "
        f"{training:.0%} of it.\n"
    )
