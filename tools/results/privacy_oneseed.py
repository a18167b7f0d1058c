"""The generated blocks of studies/privacy/README.md (issue #64): the one-seed section's reconstruction and
context-identification attacks on the Fashion-MNIST runs of 2026-11-22, read from the JSON the attack
commands wrote (``studies/privacy/reconstruct/reconstruct.json``, ``context/context.json``), and the
multi-seed section's sentences, from ``multiseed/summary/summary.json`` and the runs archived in
``multiseed/runs/``."""

from __future__ import annotations

import json
import re
import statistics
from functools import cache

from tools.results.common import STUDIES, Archive, fragment, list_item
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


# --- the multi-seed section: multiseed/summary/summary.json and the archived runs ---------------------------

MULTISEED = ONE_SEED / "multiseed"


@cache
def _summary() -> dict:
    return json.loads((MULTISEED / "summary" / "summary.json").read_text())


def _values(kind: str, label: str, key: str, attacker: str | None = None, seed: str | None = None) -> list:
    return [
        r[key]
        for r in _summary()[kind]
        if r["label"] == label
        and (attacker is None or r.get("attacker") == attacker)
        and (seed is None or r["run"][-1] == seed)
    ]


def _ms(values: list[float], digits: int = 4, scale: float = 1) -> str:
    values = [scale * v for v in values]
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} +- {statistics.stdev(values):.{digits}f}"


def _mse_of(label: str, attacker: str, seed: str | None = None) -> list[float]:
    return _values("reconstruct", label, "mse", attacker, seed)


@fragment("privacy-multiseed-undefended")
def privacy_multiseed_undefended(archive: Archive) -> str:
    needed = _values("context", "flea lambda2 0 r30", "needed") + [
        n for r in (1, 10) for n in _values("context", f"flea lambda2 0 r{r}", "needed")
    ]
    return (
        f"In `multiseed/summary/summary.md` the undefended MSE at round 30 (deep) is "
        f"{_ms(_mse_of('flea lambda2 0 r30', 'deep'))} and the context attack needs at most {max(needed)} "
        "samples in every seed and round.\n"
    )


@fragment("privacy-multiseed-reconstruct")
def privacy_multiseed_reconstruct(archive: Archive) -> str:
    deep = _mse_of("flea r30", "deep")
    mean_image = statistics.mean(_values("reconstruct", "flea r30", "baseline_mse", "deep"))
    dcor = _values("reconstruct", "flea r30", "eval_dcor", "deep")
    dcor0 = _values("reconstruct", "flea lambda2 0 r30", "eval_dcor", "deep")
    return list_item(
        f"Its shared activations keep dCor {_ms(dcor, 3)} with the inputs at round 30 (on the evaluation "
        f"images; {_ms(dcor0, 3)} with lambda2 = 0), and the stronger decoder reconstructs them to MSE "
        f"{_ms(deep)} at round 30 against {_ms(_mse_of('flea lambda2 0 r30', 'deep', 'seed0'))} undefended "
        f"(paper's decoder: {_ms(_mse_of('flea r30', 'conv4'))} vs "
        f"{_ms(_mse_of('flea lambda2 0 r30', 'conv4', 'seed0'))}), about "
        f"{mean_image / statistics.mean(deep):.1f}x below the mean-image attacker ({mean_image:.3f}). At "
        f"rounds 1 and 10 the MSE is {_ms(_mse_of('flea r1', 'deep'))} and "
        f"{_ms(_mse_of('flea r10', 'deep'))} "
        "(deep).\n"
    )


def _at_100(label: str, seed: str | None = None) -> list[float]:
    return [a["100"] for a in _values("context", label, "accuracy", seed=seed)]


@fragment("privacy-multiseed-context")
def privacy_multiseed_context(archive: Archive) -> str:
    fedmix = _values("reconstruct", "FedMix", "mse", seed="seed0")
    return list_item(
        f"At 100 samples the marker is detected from the default's round-1 features "
        f"{_ms(_at_100('flea r1'), 1, 100)}% of the time, from FedMix's averages of 10 "
        f"{_ms(_at_100('FedMix', 'seed0'), 1, 100)}% and from the raw images themselves (FedData) "
        f"{_ms(_at_100('FedData', 'seed0'), 1, 100)}% (both seed 0). FedMix's averages reconstruct to "
        f"{fedmix[0]:.3f} (random groups) and {fedmix[1]:.3f} (one-class groups), FLea's to "
        f"{statistics.mean(_mse_of('flea r30', 'deep')):.3f} (round 30, deep).\n"
    )


@fragment("privacy-multiseed-accuracy")
def privacy_multiseed_accuracy(archive: Archive) -> str:
    from tools.results.common import LAST10, label, stat
    from tools.results.fragments import fmt

    runs = MULTISEED.relative_to(STUDIES) / "runs"
    default = [r for r in archive.study(f"{runs}/privacy_fmnist") if label(r) == "flea"]
    undefended = archive.study(f"{runs}/privacy_fmnist_decor0")
    a, b = stat(default, LAST10), stat(undefended, LAST10)
    assert a is not None and b is not None
    return list_item(
        f"Last-10 accuracy {fmt(a)}% (default, {a.n} seeds) vs {fmt(b)}% (lambda2 = 0, {b.n} seeds), "
        "from the archived runs in `multiseed/runs/`.\n"
    )


@fragment("privacy-eq6-round30")
def privacy_eq6_round30(archive: Archive) -> str:
    defended, undefended = _logged("FLea l2=3 r30")["acc"], _logged("FLea l2=0 r30")["acc"]
    return list_item(
        f"At round 30 (one seed, `reconstruct/reconstruct.json`): MSE {_mse('FLea l2=3 r30', 'deep'):.3f} "
        f"deep, {_attack('context')['needed_for_90']['FLea l2=3 r30']} samples for the context attack, at "
        f"{100 * defended:.1f}% accuracy against {100 * undefended:.1f}% undefended.\n"
    )
