"""Writes steps.txt, the commands of the DP frontier study (studies/privacy_dp/README.md) in priority order,
for run_steps.sh: FLea at split layers 1 and 2 and FedMix, each at epsilon inf, 8, 4, 2, 1 under
``method.share_dp``, on Fashion-MNIST (configs/privacy_fmnist.yaml, seeds 0-2) and UCI-HAR
(configs/privacy_har.yaml, seed 0); each run is followed by the reconstruction (both decoders) and context
attacks on its last round's model, with the settings of studies/privacy/multiseed and studies/privacy_har.

Run from the repository root: python studies/privacy_dp/make_steps.py [--tiny]
``--tiny`` writes steps_tiny.txt instead: FLea at both layers and FedMix at epsilon inf and 2, seed 0, on
both datasets, for 2 rounds of 1 local epoch with small attacks, all under runs/ (runs/privacy_dp_tiny_*), to
check the whole chain (run, attacks, ``finish.sh --tiny``) in well under an hour on one core.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
_spec = importlib.util.spec_from_file_location(
    "multiseed_steps", HERE.parent / "privacy" / "multiseed" / "make_steps.py"
)
assert _spec is not None and _spec.loader is not None
multiseed = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(multiseed)  # the attack settings of the earlier studies, one copy

EPSILONS = (math.inf, 8.0, 4.0, 2.0, 1.0)
LAYERS = (1, 2)
DELTA = 1e-5
RELEASES = 1
"""Every sample is shared at most once (the noise calibrated for one release; drawn again, it is withheld)."""


@dataclass(frozen=True)
class Dataset:
    """One dataset's part of the study.

    Attributes:
        key: short name in run names and folders.
        config: the study's config.
        tail: the run dirs' data-partition folder.
        seeds: the seeds run.
        last_round: the attacked round (the config's last, a kept checkpoint).
        clips: the clip per split layer (FLea) and for FedMix (key 0 = the inputs), each about the median
            L2 norm of 2,000 training rows through the untrained model (clip_norms.py).
        reconstruct: the reconstruction attack's options (both decoders).
        context: the context attack's options.
        data: the data-dir option.
    """

    key: str
    config: str
    tail: str
    seeds: tuple[int, ...]
    last_round: int
    clips: dict[int, float]
    reconstruct: str
    context: str
    data: str


FMNIST = Dataset(
    key="fmnist",
    config="configs/privacy_fmnist.yaml",
    tail="fashion_mnist-quantity3-K100",
    seeds=(0, 1, 2),
    last_round=30,
    clips={1: 4.0, 2: 1.0, 0: 27.0},
    reconstruct=multiseed.RECONSTRUCT,
    context=multiseed.CONTEXT,
    data=multiseed.DATA,
)
HAR = Dataset(
    key="har",
    config="configs/privacy_har.yaml",
    tail="uci_har-quantity2-K75",
    seeds=(0,),
    last_round=100,
    clips={1: 9.0, 2: 4.0, 0: 2.0},
    reconstruct="--decoders conv4,deep --epochs 20 --eval-size 1000",
    context=multiseed.HAR_CONTEXT,
    data=multiseed.DATA,
)
TINY: dict[str, Any] = {  # the chain check: 2 rounds, small attacks
    "rounds": 2,
    "epsilons": (math.inf, 2.0),
    "reconstruct": "--decoders conv4,deep --epochs 1 --batch-size 32 --attack-size 200 --eval-size 100",
    "context": "--sizes 100,300 --repeats 1 --eval-size 200",
}


def eps_text(epsilon: float) -> str:
    return "inf" if math.isinf(epsilon) else f"{epsilon:g}"


def setting(method: str, layer: int | None, epsilon: float) -> str:
    """The setting's label in tables and figures, e.g. ``flea l1 eps 8``, ``fedmix eps inf``."""
    where = f" l{layer}" if layer is not None else ""
    return f"{method}{where} eps {eps_text(epsilon)}"


def run_name(data: Dataset, method: str, layer: int | None, epsilon: float, tiny: bool) -> str:
    where = f"_l{layer}" if layer is not None else ""
    return f"privacy_dp{'_tiny' if tiny else ''}_{data.key}{where}_eps{eps_text(epsilon)}"


def run_dir(data: Dataset, method: str, layer: int | None, epsilon: float, seed: int, tiny: bool) -> str:
    return f"runs/{run_name(data, method, layer, epsilon, tiny)}/{data.tail}/{method}/seed{seed}"


def options(data: Dataset, method: str, layer: int | None, epsilon: float) -> list[str]:
    """The ``--set`` options of a setting: the split layer, and the mechanism unless epsilon is inf."""
    sets = [] if layer is None else [f"method.split_layer={layer}"]
    if not math.isinf(epsilon):
        clip = data.clips[layer if layer is not None else 0]
        sets += [
            f"method.share_dp.epsilon={epsilon:g}",
            f"method.share_dp.delta={DELTA:g}",
            f"method.share_dp.clip={clip:g}",
            f"method.share_dp.releases={RELEASES}",
        ]
    return sets


def run_steps(
    data: Dataset, method: str, layer: int | None, epsilon: float, seed: int, tiny: bool
) -> list[str]:
    """One run and the attacks on its last round's model."""
    name = run_name(data, method, layer, epsilon, tiny)
    sets = [*options(data, method, layer, epsilon), f"name={name}"]
    last = data.last_round
    reconstruct, context = data.reconstruct, data.context
    config = data.config
    if tiny:  # 2 rounds of 1 local epoch (tiny_<key>.yaml)
        last, reconstruct, context = TINY["rounds"], TINY["reconstruct"], TINY["context"]
        if "--marker" in data.context:  # the dataset's marker (UCI-HAR's stuck sensor), the tiny sizes
            context += " " + data.context[data.context.index("--marker") :]
        config = f"studies/privacy_dp/tiny_{data.key}.yaml"
    set_text = " ".join(f"--set {s}" for s in sets)
    data_dir = f" {data.data}" if data.data else ""
    common = f"--seed {seed} --threads 1 --device cpu{data_dir}"
    target = f'"{setting(method, layer, epsilon)}={run_dir(data, method, layer, epsilon, seed, tiny)}@{last}"'
    where = "runs/privacy_dp_tiny_attacks" if tiny else "studies/privacy_dp/attacks"
    out = f"{where}/{data.key}/{name}/seed{seed}"
    return [
        f"fedaug run {config} --method {method}{data_dir} --seed {seed} {set_text}",
        f"fedaug attack reconstruct {target} --out {out}/reconstruct {reconstruct} {common}",
        f"fedaug attack context {target} --out {out}/context {context} {common}",
    ]


def grid(epsilons: tuple[float, ...] = EPSILONS) -> list[tuple[str, int | None, float]]:
    """Every (method, split layer, epsilon), the largest epsilon first (the no-DP anchors)."""
    return [
        (method, layer, epsilon)
        for epsilon in epsilons
        for method, layer in [("flea", layer) for layer in LAYERS] + [("fedmix", None)]
    ]


def steps(tiny: bool = False) -> list[str]:
    """Fashion-MNIST seeds 0, 1, 2, then UCI-HAR seed 0: Fashion-MNIST's three seeds decide the verdict
    (README), and its steps are minutes each, so a session that ends mid-step loses little; a UCI-HAR run
    takes half an hour or more and informs only (one seed)."""
    out: list[str] = []
    order = [(FMNIST, 0)] + ([] if tiny else [(FMNIST, s) for s in FMNIST.seeds[1:]]) + [(HAR, 0)]
    for data, seed in order:
        for method, layer, epsilon in grid(TINY["epsilons"] if tiny else EPSILONS):
            out += run_steps(data, method, layer, epsilon, seed, tiny)
    return out


def archived(lines: list[str], root: Path = HERE) -> list[str]:
    """The lines of ``lines`` (a steps file's, in make_steps' triples: a run, then its two attacks) whose
    results ``finish.sh`` archived under ``root``: a triple counts when the run's ``summary.json`` and both
    attacks' JSON reports are there, since an attack needs its run's checkpoint, which no archive keeps
    (a run archived without its attacks runs again). On a machine that starts fresh, the runner marks
    these done so that it does not redo them."""
    commands = [x for x in lines if x.strip() and not x.startswith("#")]
    done: list[str] = []
    for i in range(0, len(commands) - 2, 3):
        run, *attacks = commands[i : i + 3]
        name, seed = re.search(r"name=(\S+)", run), re.search(r"--seed (\d+)", run)
        outs = [re.search(r"--out studies/privacy_dp/(\S+)", a) for a in attacks]
        if name is None or seed is None or None in outs:
            continue
        runs = list((root / "runs" / name.group(1)).glob(f"*/*/seed{seed.group(1)}/summary.json"))
        reports = [list((root / m.group(1)).glob("*.json")) for m in outs if m is not None]
        if runs and all(reports):
            done += [run, *attacks]
    return done


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="write steps_tiny.txt (the chain check)")
    parser.add_argument(
        "--archived",
        metavar="STEPS",
        help="print the lines of the steps file STEPS whose results are archived here, write nothing",
    )
    args = parser.parse_args()
    if args.archived:
        print("\n".join(archived(Path(args.archived).read_text().splitlines())))
        raise SystemExit(0)
    header = [
        "# The DP frontier study (studies/privacy_dp), in priority order, written by make_steps.py;",
        "# run_steps.sh runs them one after another (each run and attack single-threaded).",
    ]
    name = "steps_tiny.txt" if args.tiny else "steps.txt"
    (HERE / name).write_text("\n".join(header + steps(args.tiny)) + "\n")
