"""The generated tables of studies/privacy/README.md's one-seed section (issue #64): the reconstruction and
context-identification attacks on the Fashion-MNIST runs of 2026-11-22, read from the JSON the attack
commands wrote (``studies/privacy/reconstruct/reconstruct.json``, ``context/context.json``)."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache

from tools.results.common import STUDIES, Archive, fragment
from tools.results.fragments import markdown_table

ONE_SEED = STUDIES / "privacy"
TARGETS = {
    "FLea l2=3 r1": ("FLea lambda2 = 3", 1),
    "FLea l2=3 r10": ("FLea lambda2 = 3", 10),
    "FLea l2=3 r30": ("FLea lambda2 = 3", 30),
    "FLea l2=0 r10": ("FLea lambda2 = 0", 10),
    "FLea l2=0 r30": ("FLea lambda2 = 0", 30),
}
"""The attacks' FLea targets: the README's name and the round."""


@cache
def _attack(name: str) -> dict:
    return json.loads((ONE_SEED / name / f"{name}.json").read_text())


def _mse(target: str, attacker: str) -> float:
    return next(
        r["mse"]
        for r in _attack("reconstruct")["rows"]
        if r["target"] == target and r["attacker"] == attacker
    )


@fragment("privacy-oneseed-reconstruct")
def privacy_oneseed_reconstruct(archive: Archive) -> str:
    data = _attack("reconstruct")
    targets = {t["label"]: t for t in data["targets"]}
    baseline = data["rows"][0]["baseline_mse"]
    rows = []
    for label, (name, round_) in TARGETS.items():
        t = targets[label]
        accuracy = float(re.search(r"acc ([\d.]+)", t["description"]).group(1))
        rows.append(
            [
                name,
                str(round_),
                f"{100 * accuracy:.1f}%",
                f"{t['eval_dcor']:.3f} / {t['eval_dcor_u']:.3f}",
                f"{_mse(label, 'conv4'):.4f}",
                f"{_mse(label, 'deep'):.4f}",
            ]
        )
    fedmix = [r["mse"] for r in data["rows"] if r["target"] == "FedMix"]
    rows.append(
        [
            "FedMix averages (random groups of 10 / one-class groups)",
            "-",
            "-",
            "-",
            f"{fedmix[0]:.4f} / {fedmix[1]:.4f}",
            "",
        ]
    )
    feddata = next(r["mse"] for r in data["rows"] if r["target"] == "FedData")
    rows.append(["FedData raw images (ceiling)", "-", "-", "-", f"{feddata:.0f}", ""])
    header = ["shared", "round", "global acc.", "dCor / bias-corr. dCor^2", "conv4 (paper's)", "deep"]
    return (
        f"Predicting the mean image gives {baseline:.4f} (`reconstruct/reconstruct.json`).\n\n"
        + markdown_table(header, rows)
    )


CONTEXT = {
    "FLea l2=3 r1": "FLea lambda2 = 3, round 1",
    "FLea l2=3 r10": "FLea lambda2 = 3, round 10",
    "FLea l2=3 r30": "FLea lambda2 = 3, round 30",
    "FLea l2=0 r30": "FLea lambda2 = 0, round 30",
    "FedMix": "FedMix averages of 10",
    "FedData": "FedData raw images",
}


def _cell(values: list[float]) -> str:
    mean, std = 100 * statistics.mean(values), 100 * statistics.stdev(values)
    return f"{mean:.1f}" if round(std, 1) == 0 else f"{mean:.1f} +- {std:.1f}"


@fragment("privacy-oneseed-context")
def privacy_oneseed_context(archive: Archive) -> str:
    data = _attack("context")
    sizes = list(next(iter(data["accuracy"].values())))
    rows = [
        [name, *(_cell(data["accuracy"][label][size]) for size in sizes), str(data["needed_for_90"][label])]
        for label, name in CONTEXT.items()
    ]
    return markdown_table(["shared", *sizes, "samples for 90%"], rows) + (
        "\n(`context/context.json`; marker detection accuracy, %, mean +- sample std over "
        f"{data['repeats']} repeats.)\n"
    )


def _logged(label: str) -> dict[str, float]:
    """The logged accuracy, dCor and bias-corrected dCor^2 of a target, from its description."""
    target = next(t for t in _attack("reconstruct")["targets"] if t["label"] == label)
    return {k: float(v) for k, v in re.findall(r"(acc|dcor|dcor_u) ([\d.]+)", target["description"])}


@fragment("privacy-oneseed-dcor")
def privacy_oneseed_dcor(archive: Archive) -> str:
    first, last = _logged("FLea l2=3 r1"), _logged("FLea l2=3 r30")
    undefended = min(_logged(label)["dcor"] for label in ("FLea l2=0 r10", "FLea l2=0 r30"))
    return (
        "With lambda2 = 3 the shared activations' logged dCor with the inputs falls from "
        f"{first['dcor']:.2f} "
        f"to {last['dcor']:.2f} over 30 rounds (the bias-corrected dCor^2 from {first['dcor_u']:.2f} to "
        f"{last['dcor_u']:.2f}); without the term it is at least {undefended:.2f} at rounds 10 and 30 "
        "(`reconstruct/reconstruct.json`).\n"
    )
