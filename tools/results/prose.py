"""Generated numbers and claims for the sentences of the study READMEs and guides (issue #64): run times
from the archived timings, comparisons whose verbs follow docs/results.md's wording rules, and tables of
committed benchmark JSON. A run's time is its logged round times summed (each run's ``timings.jsonl.gz``, the
reader
:func:`fedaug.engine.checkpoint.logged_round_times`), so start-up and evaluation outside the rounds are not
in it."""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Sequence
from types import ModuleType

from fedaug.engine.checkpoint import logged_round_times
from fedaug.results.store import Run, setting_label
from tools.results.common import (
    BEST,
    FINAL,
    HAR_SPLITS,
    K150_SPLITS,
    LAST10,
    STUDIES,
    UCI_CPU,
    ZDA,
    ZDA_CELLS,
    Archive,
    fragment,
    gain_cell,
    har,
    label,
    listing,
    stat,
    try_gain,
)
from tools.results.fragments import Gain, markdown_table, reproduces, seeds_text
from tools.results.methods_flea import every, verb


def run_minutes(run: Run) -> float | None:
    times = [seconds for _, seconds in logged_round_times(run.path)]
    return sum(times) / 60 if times else None


def minutes_range(runs: Sequence[Run]) -> str:
    """``lo-hi min`` over ``runs`` (rounded to whole minutes), ``lo min`` when they agree; ``-`` without
    logged times."""
    values = [m for m in (run_minutes(r) for r in runs) if m is not None]
    if not values:
        return "-"
    lo, hi = round(min(values)), round(max(values))
    return f"{lo} min" if lo == hi else f"{lo}-{hi} min"


def timed(runs: Sequence[Run]) -> str:
    """``N runs`` (``1 run``): how many of ``runs`` logged round times."""
    count = sum(run_minutes(r) is not None for r in runs)
    return f"{count} run" if count == 1 else f"{count} runs"


def fedavg_and_others(archive: Archive, study: str, others: str) -> str:
    runs = archive.study(study)
    fedavg = [r for r in runs if label(r) == "fedavg"]
    rest = [r for r in runs if label(r) != "fedavg"]
    return (
        f"FedAvg {minutes_range(fedavg)} a run ({timed(fedavg)}), {others} {minutes_range(rest)} "
        f"({timed(rest)}): the rounds' logged times summed, each run's `timings.jsonl.gz`\n"
    )


@fragment("objective-run-times")
def objective_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_objective_har/runs", "the FLea variants")


@fragment("hparams-run-times")
def hparams_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_hparams_har/runs", "the FLea runs")


@fragment("fsdd-run-times")
def fsdd_run_times(archive: Archive) -> str:
    runs = archive.study("flea_fsdd/runs")
    parts = {
        "FedAvg": [r for r in runs if label(r) == "fedavg"],
        "`flea`": [r for r in runs if label(r) == "flea"],
        "the other baselines": [r for r in runs if label(r) not in ("fedavg", "flea")],
    }
    cells = [f"{name} {minutes_range(group)} a run ({timed(group)})" for name, group in parts.items()]
    return ", ".join(cells) + ": the rounds' logged times summed, each run's `timings.jsonl.gz`\n"


@fragment("k150-run-times")
def k150_run_times(archive: Archive) -> str:
    return fedavg_and_others(archive, "flea_k150_har/runs", "the other runs (FLea, FedMix)")


# --- verbal claims, each verb chosen by the wording rules of docs/results.md -------------------------------

STATISTICS = {"last-10 mean": LAST10, "best round": BEST}


def compared(
    archive: Archive,
    studies: Sequence[str],
    names: tuple[str, str],
    rows: tuple[str, str],
    splits: Sequence[str],
) -> str:
    """Per statistic, a method against a baseline (``names`` in words, ``rows`` their report rows) on each
    UCI-HAR K = 75 split of ``splits``: the verb by :func:`verb`, the paired gain (mean ± sample std, seeds
    0-2) and "in every seed" where :func:`in_every_seed` holds."""
    parts = []
    for what, metric in STATISTICS.items():
        cells = []
        for split in splits:
            runs = [archive.runs(studies, row, har(split)) for row in rows]
            gain = try_gain(runs[0], runs[1], metric)
            if gain is not None:
                seeds = f"; above zero in every seed, {seeds_text(gain.values)}" if every(gain) else ""
                cells.append(f"{verb(gain)} {names[1]} on {split} ({gain_cell(gain)}{seeds})")
        parts.append(f"by the {what}, {names[0]} " + listing(cells))
    return "; ".join(parts)


@fragment("objective-claims")
def objective_claims(archive: Archive) -> str:
    """The objective study's two comparisons that its bullets draw on: Eq. 6 and the chosen ``flea`` against
    FedAvg, and the chosen ``flea`` against the authors' full code, paired by seed."""
    study, splits = ("flea_objective_har/runs",), ("Qua(2)", "Dir(0.1)")
    pairs = (
        (("`flea_eq6` (Eq. 6 as printed)", "FedAvg"), ("flea_eq6", "fedavg")),
        (("the chosen `flea`", "FedAvg"), ("flea", "fedavg")),
        (("the chosen `flea`", "the authors' full code (`flea_official`)"), ("flea", "flea_official")),
    )
    claims = [compared(archive, study, names, rows, splits) for names, rows in pairs]
    return "".join(f"- {text[0].upper()}{text[1:]}.\n" for text in claims)


@fragment("table1-claims")
def table1_claims(archive: Archive) -> str:
    """``flea`` against FedAvg at K = 75 on the CPU, every split, paired by seed."""
    text = compared(archive, UCI_CPU, ("`flea`", "FedAvg"), ("flea", "fedavg"), HAR_SPLITS)
    return text[0].upper() + text[1:] + ".\n"


def short(split: str) -> str:
    """A split's name without commas, for lists."""
    return "the authors' two-halves Dir(0.1)" if "two halves" in split else split


def against_paper(archive: Archive, studies: Sequence[str], row: str, settings: dict[str, str]) -> str:
    """Which settings ``row``'s best accuracy reproduces the paper's on (:func:`reproduces`), and on which it
    does not, with the side ours is on."""
    same, other = [], []
    for split, setting in settings.items():
        runs = archive.runs(studies, row, setting)
        ours, paper = stat(runs, BEST), archive.paper("best_acc", row, runs)
        if ours is None or paper is None or reproduces(ours, paper.mean) is None:
            continue
        if reproduces(ours, paper.mean):
            same.append(short(split))
        else:
            other.append(f"{short(split)} (ours {'higher' if ours.mean > paper.mean else 'lower'})")
    return (f"reproduces the paper's on {listing(same)}" if same else "reproduces the paper's nowhere") + (
        f" and does not on {listing(other)}" if other else ""
    )


@fragment("k150-paper-claims")
def k150_paper_claims(archive: Archive) -> str:
    """K = 150, best accuracy (the paper's statistic), seeds 0-2: FedAvg and ``flea`` against the paper's
    columns, and the paired gain against the paper's gain, by the rule of "reproduces"."""
    gains_same: list[str] = []
    gains_other: list[str] = []
    for split, setting in K150_SPLITS.items():
        runs, base = archive.runs(UCI_CPU, "flea", setting), archive.runs(UCI_CPU, "fedavg", setting)
        gain = try_gain(runs, base, BEST)
        papers = [archive.paper("best_acc", m, r) for m, r in (("flea", runs), ("fedavg", base))]
        if gain is None or papers[0] is None or papers[1] is None:
            continue
        paper_gain = papers[0].mean - papers[1].mean
        fits = reproduces(gain.stat, paper_gain)
        side = "higher" if gain.stat.mean > paper_gain else "lower"
        (gains_same if fits else gains_other).append(
            short(split) if fits else f"{short(split)} (ours {side})"
        )
    return (
        "By best accuracy over seeds 0-2 (the paper's statistic; a number reproduces when the paper's lies "
        "in our mean ± 2 sample std)"
        f": our FedAvg {against_paper(archive, UCI_CPU, 'fedavg', K150_SPLITS)}; "
        f"`flea` {against_paper(archive, UCI_CPU, 'flea', K150_SPLITS)}; "
        "the paired gain of `flea` over FedAvg "
        + (
            f"reproduces the paper's gain on {listing(gains_same)}"
            if gains_same
            else "reproduces the paper's gain nowhere"
        )
        + (f" and does not on {listing(gains_other)}" if gains_other else "")
        + ".\n"
    )


def listed_minutes(
    archive: Archive, study: str, rows: Sequence[str], settings: Sequence[str], seeds: Sequence[int]
) -> str:
    """``Run times: lo-hi min (N runs) ...`` of the runs of ``rows`` in ``settings`` and ``seeds`` archived
    in ``study``."""
    runs = [
        r
        for r in archive.study(study)
        if label(r) in rows and setting_label(r.config) in settings and r.seed in seeds
    ]
    return f"Run times: {minutes_range(runs)} a run ({timed(runs)}; the rounds' logged times summed).\n"


@fragment("baselines-times-fedgen")
def baselines_times_fedgen(archive: Archive) -> str:
    return listed_minutes(archive, "baselines_har/runs", ("fedgen",), (har("Qua(2)"),), (1, 2))


@fragment("baselines-times-fedmix")
def baselines_times_fedmix(archive: Archive) -> str:
    return listed_minutes(archive, "baselines_har/runs", ("fedmix",), (har("Dir(0.1)"),), (1, 2))


@fragment("baselines-times-fedavg-fedrs")
def baselines_times_fedavg_fedrs(archive: Archive) -> str:
    fedavg = listed_minutes(
        archive, "baselines_har/runs", ("fedavg",), (har("Dir(0.3)"), har("Dir(0.1)")), (1, 2)
    )
    fedrs = listed_minutes(
        archive, "baselines_har/runs", ("fedrs",), tuple(har(s) for s in HAR_SPLITS), (1, 2)
    )
    return "FedAvg: " + fedavg[0].lower() + fedavg[1:] + "FedRS: " + fedrs[0].lower() + fedrs[1:]


# --- GPU grids: sweep time from the archived sweep log, per-run round times from the timings --------------


def run_seconds(run: Run) -> float | None:
    minutes = run_minutes(run)
    return None if minutes is None else 60 * minutes


def seconds_range(runs: Sequence[Run]) -> str:
    values = [s for s in (run_seconds(r) for r in runs) if s is not None]
    if not values:
        return "-"
    lo, hi = round(min(values)), round(max(values))
    return f"{lo} s" if lo == hi else f"{lo}-{hi} s"


def grid_times(archive: Archive, folder: str) -> str:
    """A GPU grid of ``flea_table1_har``: the sweep commands' times (``sweep.log``'s ``sweep exit``
    lines) and each method's summed round times per run."""
    log = (STUDIES / "flea_table1_har" / folder / "sweep.log").read_text()
    exits = [int(s) for s in re.findall(r"sweep exit \d+ after (\d+) s", log)]
    runs = archive.study(f"flea_table1_har/{folder}/runs")
    commands = "one command" if len(exits) == 1 else f"{len(exits)} commands"
    per = ", ".join(
        f"{name} {seconds_range([r for r in runs if label(r) == row])}"
        for name, row in (("FedAvg", "fedavg"), ("FLea", "flea"))
    )
    return (
        f"{len(runs)} finished runs archived; {sum(exits)} s of sweep time over {commands} "
        f"(`{folder}/sweep.log`); "
        f"per run, its rounds' logged times summed: {per}.\n"
    )


@fragment("table1-h100-grid2-times")
def table1_h100_grid2_times(archive: Archive) -> str:
    return grid_times(archive, "h100_one_call")


@fragment("table1-h100-grid1-times")
def table1_h100_grid1_times(archive: Archive) -> str:
    return grid_times(archive, "h100")


@fragment("table1-h200-times")
def table1_h200_times(archive: Archive) -> str:
    """The H200 call: it stopped at its limit, so the sweep time is the limit's; only finished runs count."""
    return grid_times(archive, "h200")


# --- Fed-AugMix on MNIST: paired gains from accuracy.json, verbs by the rules ------------------------------

AUGMIX_PAIRS = (("FedAvg", "fedavg", "fedaugmix"), ("FedProx", "fedprox", "fedprox_augmix"))


@fragment("fedaugmix-gain-claims")
def fedaugmix_gain_claims(archive: Archive) -> str:
    """Fed-AugMix's gain over its base, paired by seed (``accuracy.json``, both runs of a seed on one
    machine), by best and last-10; "reproduces" against the paper's gain on its statistic (best); and the
    round-time ratio per seed (median round times)."""
    runs = [r for r in json.loads((STUDIES / "fedaugmix" / "accuracy.json").read_text()) if r["finished"]]
    by = {(r["method"], r["seed"]): r for r in runs}
    sentences: list[str] = []
    ratios: list[str] = []
    for name, base, method in AUGMIX_PAIRS:
        seeds = sorted(s for m, s in by if m == method and (base, s) in by)
        parts = []
        for key, what in (("best_acc", "best"), ("last10_acc", "last-10 mean")):
            gain = Gain({s: by[method, s][key] - by[base, s][key] for s in seeds}, ())
            parts.append(f"by the {what} {verb(gain)} {name} ({gain_cell(gain)}{every(gain)})")
            if key == "best_acc":
                paper = by[method, seeds[0]]["paper"] - by[base, seeds[0]]["paper"]
                fits = reproduces(gain.stat, paper)
                claim = "no claim" if fits is None else "reproduces" if fits else "does not reproduce"
                parts[-1] += f", which {claim} the paper's gain of {paper:+.2f}"
        sentences.append(f"{name} + Fed-AugMix " + "; ".join(parts))
        cost = []
        for key, what in (("round_s_median", "round"), ("train_s_median", "client training")):
            ratio = [by[method, s][key] / by[base, s][key] for s in seeds]
            cost.append(f"{what} {min(ratio):.1f}-{max(ratio):.1f}x")
        ratios.append(f"over {name}: " + ", ".join(cost))
    return (
        "Paired by seed (" + seeds_text(seeds) + "): " + ". ".join(sentences) + ". "
        "Fed-AugMix's cost per seed (medians per run, `accuracy.json`), " + "; ".join(ratios) + ".\n"
    )


# --- docs/guide/speed.md: threads on a shared machine (studies/speed/busy_core.py's result files) ----------


def _busy_core() -> ModuleType:
    """``studies/speed/busy_core.py``, whose ``table`` prints a result file as the guide's table."""
    spec = importlib.util.spec_from_file_location("busy_core", STUDIES / "speed" / "busy_core.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _busy_result(name: str) -> dict:
    return json.loads((STUDIES / "speed" / f"busy_core_{name}.json").read_text())


def _busy_ratios(result: dict) -> list[float]:
    rows, old, new = result["rows"], result["old_default"], result["new_default"]
    ratios = []
    for busy in (False, True):
        for repeat in sorted({r["repeat"] for r in rows}):
            pick = {
                r["threads"]: r["s_per_round"] for r in rows if r["repeat"] == repeat and r["busy"] == busy
            }
            if pick.get(old) and pick.get(new):
                ratios.append(pick[old] / pick[new])
    return ratios


@fragment("speed-busy-core-smoke")
def speed_busy_core_smoke(archive: Archive) -> str:
    return _busy_core().table(_busy_result("smoke")) + "\n"


@fragment("speed-busy-core-default")
def speed_busy_core_default(archive: Archive) -> str:
    return _busy_core().table(_busy_result("default")) + "\n"


@fragment("speed-busy-core-claim")
def speed_busy_core_claim(archive: Archive) -> str:
    parts = []
    for name, what in (("smoke", "the smoke preset"), ("default", "the default preset")):
        ratios = _busy_ratios(_busy_result(name))
        every = (
            "in every pair"
            if all(r > 1 for r in ratios)
            else f"in {sum(r > 1 for r in ratios)} of {len(ratios)} pairs"
        )
        parts.append(f"{min(ratios):.1f}-{max(ratios):.1f}x slower per round on {what} ({every})")
    return "The old default was " + " and ".join(parts) + ".\n"


# --- docs/guide/gpu.md: the H100 measurements (benchmarks/results/*.json) ---------------------------------

BENCH = STUDIES.parent / "benchmarks" / "results"


def _bench(name: str) -> dict:
    return json.loads((BENCH / name).read_text())


@fragment("gpu-h100-modes")
def gpu_h100_modes(archive: Archive) -> str:
    """Seconds a round of the default preset on the H100 by mode (the 5-round probe, the 100-round runs with
    graphs, 10 rounds with the default settings), and how far the modes' best accuracies after the probe's
    rounds lie apart."""
    probe = _bench("gpu_h100_probe_5rounds.json")
    modes = {m: {r["mode"]: r for r in rows} for m, rows in probe["methods"].items()}
    full = {r["method"]: r for r in _bench("device_runs_h100_graphs.json")["runs"]}
    auto = {r["method"]: r for r in _bench("device_runs_h100_default_10rounds.json")["runs"]}
    methods = ("fedavg", "flea")
    n = probe["rounds"]
    rows = [
        [
            f"eager (`engine.cuda_graphs: false`), median s a round ({n} rounds)",
            *(f"{modes[m]['sequential']['median_round_s']:.2f}" for m in methods),
        ],
        [
            f"batched clients, median s a round ({n} rounds)",
            *(f"{modes[m]['batched']['median_round_s']:.2f}" for m in methods),
        ],
        [
            f"graphs, median s a round ({n} rounds)",
            *(f"{modes[m]['graphs']['median_round_s']:.2f}" for m in methods),
        ],
        [
            f"graphs, a whole {full['fedavg']['rounds']}-round run: median / mean s a round",
            *(f"{full[m]['median_round_s']:.2f} / {full[m]['mean_round_s']:.3f}" for m in methods),
        ],
        [
            f"graphs, a whole {full['fedavg']['rounds']}-round run, wall time",
            *(f"{full[m]['wall_s']:.1f} s" for m in methods),
        ],
        [
            f"the default settings (`auto`), median s a round ({auto['fedavg']['rounds']} rounds)",
            *(f"{auto[m]['median_round_s']:.2f}" for m in methods),
        ],
    ]
    table = markdown_table(["", "FedAvg", "FLea"], rows)
    spread = max(
        max(r["best_acc"] for r in modes[m].values()) - min(r["best_acc"] for r in modes[m].values())
        for m in methods
    )
    rounds_sum = {m: full[m]["mean_round_s"] * full[m]["rounds"] for m in methods}
    return (
        table
        + f"\nThe best accuracy after {n} rounds differs by at most {100 * spread:.2f} points between the "
        "three modes. FedAvg's wall time is that of the first run in a fresh process: its rounds sum to "
        f"{rounds_sum['fedavg']:.1f} s; FLea, run next in the same process, spent "
        f"{full['flea']['wall_s']:.1f} s for {rounds_sum['flea']:.2f} s of rounds.\n"
    )


# --- studies/fedzda: the Fed-ZDA gains against the paper's, by the rule of "reproduces" -------------------


@fragment("fedzda-reproduce-claims")
def fedzda_reproduce_claims(archive: Archive) -> str:
    """Per cell and method, the final-round gain over FedAvg paired by seed (the paper's statistic) against
    the paper's gain (its Tables 1-2): reproduces or not, and which side ours is on."""
    same, other = [], []
    for name, setting in ZDA_CELLS.items():
        base = archive.runs((*ZDA, "fedzda/cpu_drift/runs"), "fedavg", setting)
        for row, short_name in (("fedzdac", "Fed-ZDAC"), ("fedzdas", "Fed-ZDAS")):
            runs = archive.runs(ZDA, row, setting)
            gain = try_gain(runs, base, FINAL)
            papers = [archive.paper("global_acc", m, runs) for m in (row, "fedavg")]
            if gain is None or papers[0] is None or papers[1] is None:
                continue
            paper = papers[0].mean - papers[1].mean
            fits = reproduces(gain.stat, paper)
            if fits:
                same.append(f"{short_name} on {name}")
            elif fits is not None:
                side = "higher" if gain.stat.mean > paper else "lower"
                other.append(f"{short_name} on {name} (ours {side})")
    return (
        "By the final round's global accuracy (the paper's statistic), the gain over FedAvg paired by seed "
        "(seeds 0-2) reproduces the paper's gain (the paper's within our mean ± 2 sample std) for "
        + listing(same)
        + (f", and does not for {listing(other)}" if other else "")
        + ".\n"
    )
