"""Writes steps.txt, the commands of the multi-seed privacy study in priority order (run_steps.sh runs them),
studies/privacy_har/steps.txt, the same for UCI-HAR, and studies/fedaugmix/severity/steps.txt, Fed-AugMix's
severity frontier.

Run from the repository root: python studies/privacy/multiseed/make_steps.py
"""

from __future__ import annotations

from pathlib import Path

DATA = "--data-dir ../shared/data"
ROOT = "runs/{name}/fashion_mnist-quantity3-K100"
OUT = "studies/privacy/multiseed/attacks"
RECONSTRUCT = "--decoders conv4,deep --epochs 6 --batch-size 32 --attack-size 2000 --eval-size 1000"
CONTEXT = "--sizes 100,300,1000,3000,10000 --repeats 3 --eval-size 2000"
COMMON = f"--threads 1 --device cpu {DATA}"

# setting -> (run name, method, extra --set options); the run dirs are ROOT/<method>/seed<S>
SETTINGS = {
    "flea": ("privacy_fmnist", "flea", ""),
    "flea lambda2 0": ("privacy_fmnist_decor0", "flea", "--set method.decor_weight=0"),
    "flea lambda2 0.5": ("privacy_fmnist_decor0.5", "flea", "--set method.decor_weight=0.5"),
    "flea lambda2 1": ("privacy_fmnist_decor1", "flea", "--set method.decor_weight=1"),
    "flea lambda2 2": ("privacy_fmnist_decor2", "flea", "--set method.decor_weight=2"),
    "flea lambda2 6": ("privacy_fmnist_decor6", "flea", "--set method.decor_weight=6"),
    "flea dcor_squared": ("privacy_fmnist_dcorsq", "flea", "--set method.decor_form=dcor_squared"),
    "flea_eq6": ("privacy_fmnist", "flea_eq6", ""),
    "flea_official": ("privacy_fmnist", "flea_official", ""),
    "fedavg": ("privacy_fmnist", "fedavg", ""),
}


def run(setting: str, seed: int) -> str:
    name, method, extra = SETTINGS[setting]
    named = f" --set name={name}" if name != "privacy_fmnist" else ""
    options = f"{(' ' + extra) if extra else ''}{named}"
    return f"fedaug run configs/privacy_fmnist.yaml --method {method} {DATA} --seed {seed}{options}"


def target(setting: str, seed: int, round_num: int) -> str:
    name, method, _ = SETTINGS[setting]
    return f'"{setting} r{round_num}={ROOT.format(name=name)}/{method}/seed{seed}@{round_num}"'


def attacks(group: str, targets: list[str], seed: int) -> list[str]:
    """Reconstruction and context attacks on ``targets`` (attack seed = run seed), one output folder each."""
    where = f"{OUT}/{group}/seed{seed}"
    joined = " ".join(targets)
    return [
        f"fedaug attack reconstruct {joined} --out {where}/reconstruct {RECONSTRUCT} --seed {seed} {COMMON}",
        f"fedaug attack context {joined} --out {where}/context {CONTEXT} --seed {seed} {COMMON}",
    ]


def rounds(settings: list[str], seed: int, kept: tuple[int, ...] = (1, 10, 30)) -> list[str]:
    return [target(s, seed, r) for r in kept for s in settings]


def shared_baselines(seed: int) -> list[str]:
    """FedMix and FedData: what they share does not depend on training, so a smoke run is enough."""
    root = "runs/privacy_fmnist-smoke/fashion_mnist-quantity3-K100"
    run_line = f"fedaug run configs/privacy_fmnist.yaml --method fedmix,feddata {DATA} --smoke --seed {seed}"
    targets = [f'"FedMix={root}/fedmix/seed{seed}"', f'"FedData={root}/feddata/seed{seed}"']
    return [run_line, *attacks("shared", targets, seed)]


def steps() -> list[str]:
    """Seed 0 of the default and the undefended FLea with their attacks first (one complete comparison), then
    the default's other seeds, then the undefended ones, then the frontier and the variants."""
    core = ["flea", "flea lambda2 0"]
    out: list[str] = []
    out += [run(s, 0) for s in core] + attacks("flea", rounds(core, 0), 0)
    out += shared_baselines(0)
    out += [run("flea", seed) for seed in (1, 2)]
    out += [line for seed in (1, 2) for line in attacks("flea", rounds(["flea"], seed), seed)]
    out += [run("flea lambda2 0", seed) for seed in (1, 2)]
    out += [line for seed in (1, 2) for line in attacks("decor0", rounds(["flea lambda2 0"], seed), seed)]
    out += [line for seed in (1, 2) for line in shared_baselines(seed)]
    frontier = ["flea lambda2 1", "flea lambda2 6"]
    out += [run(s, 0) for s in frontier] + attacks("frontier", rounds(frontier, 0, (30,)), 0)
    out += [run("fedavg", 0)]
    variants = ["flea_eq6", "flea_official"]
    out += [run(s, 0) for s in variants] + attacks("variants", rounds(variants, 0), 0)
    for seed in (1, 2):
        out += [run(s, seed) for s in frontier] + attacks("frontier", rounds(frontier, seed, (30,)), seed)
    out += [run("fedavg", seed) for seed in (1, 2)]
    for seed in (1, 2):
        out += [run(s, seed) for s in variants] + attacks("variants", rounds(variants, seed), seed)
    more = ["flea lambda2 0.5", "flea lambda2 2", "flea dcor_squared"]
    for seed in (0, 1, 2):
        out += [run(s, seed) for s in more] + attacks("frontier2", rounds(more, seed, (30,)), seed)
    return out


HAR_ROOT = "runs/{name}/uci_har-quantity2-K75/flea"
HAR_OUT = "studies/privacy_har/attacks"
# a stuck sensor: body_acc x reads 0.5 g for 16 of the 128 samples, in half of the windows
HAR_CONTEXT = (
    "--sizes 100,300,1000,3000 --repeats 3 --eval-size 1000 --marker-size 16 --marker-width 1 "
    "--marker-at 56,0 --marker-colour 0.5"
)


def har_steps() -> list[str]:
    """UCI-HAR (configs/privacy_har.yaml): FLea and FLea with lambda2 = 0, seeds 0-2, each attacked at
    rounds 1, 10, 50 and 100 right after its pair of runs."""
    out: list[str] = []
    settings = {
        "flea": ("privacy_har", ""),
        "flea lambda2 0": ("privacy_har_decor0", " --set method.decor_weight=0"),
    }
    for seed in (0, 1, 2):
        targets = []
        for label, (name, extra) in settings.items():
            named = f" --set name={name}" if name != "privacy_har" else ""
            out.append(f"fedaug run configs/privacy_har.yaml --method flea --seed {seed}{extra}{named}")
            root = HAR_ROOT.format(name=name)
            targets += [f'"{label} r{r}={root}/seed{seed}@{r}"' for r in (1, 10, 50, 100)]
        joined, where = " ".join(targets), f"{HAR_OUT}/seed{seed}"
        out += [
            f"fedaug attack reconstruct {joined} --out {where}/reconstruct --decoders conv4,deep --epochs 20 "
            f"--eval-size 1000 --seed {seed} --threads 1 --device cpu",
            f"fedaug attack context {joined} --out {where}/context {HAR_CONTEXT} --seed {seed} --threads 1 "
            "--device cpu",
        ]
    return out


SEVERITIES = (1, 3, 6, 10)


def augmix_steps() -> list[str]:
    """Fed-AugMix's severity frontier on MNIST (configs/fedaugmix_mnist.yaml, 100 rounds): FedAvg and
    Fed-AugMix at each severity, seeds 0-2, then Inverting Gradients on each seed's converged FedAvg model
    with clients at every severity (0 = no protection), both threat models; then
    studies/fedaugmix/severity/finish.sh draws the frontier (`fedaug attack invert-frontier`)."""
    out: list[str] = []
    run = "fedaug run configs/fedaugmix_mnist.yaml --data-dir ../shared/data --set engine.num_threads=1"
    for seed in (0, 1, 2):
        out.append(f"{run} --method fedavg --seed {seed}")
        out += [
            f"{run} --method fedaugmix --seed {seed} --set method.severity={sev} "
            f"--set name=fedaugmix_sev{sev}"
            for sev in SEVERITIES
        ]
        checkpoint = f"runs/fedaugmix_mnist/mnist-dirichlet0.5-K100/fedavg/seed{seed}/ckpt/latest.pt"
        out.append(
            f"fedaug attack invert --model lenet5 --stages untrained,converged --checkpoint {checkpoint} "
            f"--severities 0,{','.join(map(str, SEVERITIES))} --threat-models aware,ce --iterations 1000 "
            f"--seed {seed} --threads 1 --device cpu --data-dir ../shared/data "
            f"--out studies/fedaugmix/severity/invert/seed{seed}"
        )
    return out


if __name__ == "__main__":
    header = [
        "# A privacy study, in priority order, written by make_steps.py; run_steps.sh runs",
        "# them one after another (each run and attack single-threaded).",
    ]
    Path(__file__).with_name("steps.txt").write_text("\n".join(header + steps()) + "\n")
    har = Path(__file__).parents[2] / "privacy_har"
    har.mkdir(exist_ok=True)
    (har / "steps.txt").write_text("\n".join(header + har_steps()) + "\n")
    augmix = Path(__file__).parents[2] / "fedaugmix" / "severity"
    augmix.mkdir(exist_ok=True)
    (augmix / "steps.txt").write_text("\n".join(header + augmix_steps()) + "\n")
