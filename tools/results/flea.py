"""The FLea tables of docs/results.md: UCI-HAR (objective, Table 1, devices, K = 150), the CPU table,
spoken digits."""

from __future__ import annotations

from fedaug.results.store import setting_label
from tools.results.common import (
    BEST,
    FLEA_ROWS,
    FSDD,
    FSDD_BASELINE_ROWS,
    FSDD_SPLITS,
    GPU_GRIDS,
    HAR_SPLITS,
    K150_SPLITS,
    LAST10,
    UCI_CPU,
    Archive,
    cell,
    fragment,
    gain_cell,
    har,
    label,
    off_reference,
    on_seeds,
    paper_cell,
    seeds_of,
    stat,
    try_gain,
)
from tools.results.fragments import (
    REFERENCE_CPU,
    Gain,
    cpu_name,
    device_class,
    markdown_table,
    reruns,
    seeds_text,
)

# --- UCI-HAR, K = 75: FLea's objective and Table 1 ---------------------------------------------------------


@fragment("flea-objective")
def flea_objective(archive: Archive) -> str:
    """Every row of ``flea_objective_har``: last-10 and best, with the paired gains over FedAvg."""
    study = ("flea_objective_har/runs",)
    rows = []
    for name, row in FLEA_ROWS.items():
        cells = [name]
        for split in ("Qua(2)", "Dir(0.1)"):
            runs = archive.runs(study, row, har(split))
            base = archive.runs(study, "fedavg", har(split))
            gains = "" if row == "fedavg" else f" ({gain_cell(try_gain(runs, base, LAST10), count=True)})"
            best = "" if row == "fedavg" else f" ({gain_cell(try_gain(runs, base, BEST), count=True)})"
            cells += [cell(runs, LAST10) + gains, cell(runs, BEST) + best]
        rows.append(cells)
    header = ["method", "Qua(2) last-10", "Qua(2) best", "Dir(0.1) last-10", "Dir(0.1) best"]
    return markdown_table(header, rows)


@fragment("table1-cpu")
def table1_cpu(archive: Archive) -> str:
    """FedAvg, ``flea`` and the Eq. 6 / authors' variants at K = 75 on the CPU, with gains and the paper."""
    rows = []
    for name, row in FLEA_ROWS.items():
        rows.append([name] + [cell(archive.runs(UCI_CPU, row, har(s)), BEST, LAST10) for s in HAR_SPLITS])
        rows[-1].insert(1, seeds_of(archive.runs(UCI_CPU, row, har("Qua(2)"))))
    for metric, what in ((LAST10, "last-10"), (BEST, "best")):
        gains = [
            try_gain(archive.runs(UCI_CPU, "flea", har(s)), archive.runs(UCI_CPU, "fedavg", har(s)), metric)
            for s in HAR_SPLITS
        ]
        rows.append([f"`flea` - FedAvg, {what}, paired (seeds that gain)", "0-2"])
        rows[-1] += [gain_cell(g, count=True) for g in gains]
    papers = []
    for split in HAR_SPLITS:
        runs = archive.runs(UCI_CPU, "fedavg", har(split))
        papers.append(
            f"{paper_cell(archive.paper('best_acc', 'fedavg', runs))} / "
            f"{paper_cell(archive.paper('best_acc', 'flea', runs))}"
        )
    rows.append(["paper FedAvg / FLea (best, 5 seeds)", "-", *papers])
    cells = {
        f"{name.split(' (')[0]} {split}": archive.runs(UCI_CPU, row, har(split))
        for name, row in FLEA_ROWS.items()
        for split in HAR_SPLITS
    }
    return markdown_table(["method", "seeds", *HAR_SPLITS], rows) + off_reference(cells)


@fragment("devices")
def devices(archive: Archive) -> str:
    """``flea``'s paired last-10 gain and both methods' best over the same seeds, per device class: never
    mixed."""
    rows = []
    for clients in (75, 150):
        sources = {
            f"CPU ({REFERENCE_CPU})": (UCI_CPU, "CPU"),
            **{k: ((v,), "") for k, v in GPU_GRIDS.items()},
        }
        for name, (studies, device) in sources.items():
            cells, seeds = [], set()
            for split in HAR_SPLITS:
                flea = archive.runs(studies, "flea", har(split, clients))
                base = archive.runs(studies, "fedavg", har(split, clients))
                dev = device or (device_class(flea[0]) if flea else "CPU")
                gain = try_gain(flea, base, LAST10, dev)
                if gain is None:
                    cells.append("-")
                    continue
                seeds.add(seeds_text(gain.values))
                pair = on_seeds(base, gain), on_seeds(flea, gain)
                best = f"{cell(pair[0], BEST, device=dev)} / {cell(pair[1], BEST, device=dev)}"
                cells.append(f"{gain_cell(gain, count=True)}; best {best}")
            rows.append([f"K = {clients}", name, ", ".join(sorted(seeds)), *cells])
    return markdown_table(["K", "device", "seeds", *HAR_SPLITS], rows)


@fragment("cpu-spread")
def cpu_spread(archive: Archive) -> str:
    """Every (config, seed) archived on two CPU models: how far the CPU alone moves the numbers."""
    rows = []
    studies = (*UCI_CPU, "fedzda/runs", "fedzda/cpu_drift/runs")
    seen: set[str] = set()
    for run in (r for s in studies for r in archive.study(s)):
        key = f"{setting_label(run.config)}|{label(run)}"
        if key in seen:
            continue
        seen.add(key)
        same = archive.runs(studies, label(run), setting_label(run.config))
        for first, other in reruns(same):
            rows.append(
                [
                    f"{setting_label(run.config)}, {label(run)}, seed {first.seed}",
                    f"{cpu_name(first)} / {cpu_name(other)}",
                    *(
                        f"{m(first):.2f} / {m(other):.2f} ({m(other) - m(first):+.2f})"
                        for m in (BEST, LAST10)
                    ),
                ]
            )
    header = ["config and seed", "CPUs", "best % (difference)", "last-10 % (difference)"]
    return markdown_table(header, sorted(rows))


# --- UCI-HAR, K = 150; spoken digits ---------------------------------------------------------------------


@fragment("k150")
def k150(archive: Archive) -> str:
    """FedAvg, ``flea`` and FedMix with K = 150 on the CPU, paired gains, the paper's best."""
    rows = []
    for name, row in (("FedAvg", "fedavg"), ("`flea`", "flea"), ("FedMix", "fedmix")):
        runs = [archive.runs(UCI_CPU, row, s) for s in K150_SPLITS.values()]
        seeds = ", ".join(sorted({seeds_of(r) for r in runs if r}))
        rows.append([name, seeds, *(cell(r, BEST, LAST10) for r in runs)])
    for first, second in (("flea", "fedavg"), ("fedmix", "flea")):
        for metric, what in ((LAST10, "last-10"), (BEST, "best")):
            gains = [
                try_gain(archive.runs(UCI_CPU, first, s), archive.runs(UCI_CPU, second, s), metric)
                for s in K150_SPLITS.values()
            ]
            rows.append(
                [
                    f"{first} - {second}, {what}, paired",
                    "as above",
                    *(gain_cell(g, count=True) for g in gains),
                ]
            )
    papers = []
    for setting in K150_SPLITS.values():
        base = archive.runs(UCI_CPU, "fedavg", setting)
        papers.append(
            " / ".join(paper_cell(archive.paper("best_acc", m, base)) for m in ("fedavg", "flea", "fedmix"))
        )
    rows.append(["paper FedAvg / FLea / FedMix (best, 5 seeds)", "-", *papers])
    cells = {
        f"{name} {split}": archive.runs(UCI_CPU, row, setting)
        for name, row in (("FedAvg", "fedavg"), ("`flea`", "flea"), ("FedMix", "fedmix"))
        for split, setting in K150_SPLITS.items()
    }
    return markdown_table(["method", "seeds", *K150_SPLITS], rows) + off_reference(cells)


def fsdd_gains(archive: Archive) -> dict[tuple[int, str], Gain | None]:
    return {
        (k, s): try_gain(
            archive.runs(FSDD, "flea", f"fsdd {s} K={k}"),
            archive.runs(FSDD, "fedavg", f"fsdd {s} K={k}"),
            LAST10,
        )
        for k in (27, 54)
        for s in FSDD_SPLITS
    }


@fragment("fsdd")
def fsdd(archive: Archive) -> str:
    """FedAvg and ``flea`` on spoken digits, both scarcity levels, and the paired last-10 gain."""
    rows = []
    gains = fsdd_gains(archive)
    for clients in (27, 54):
        for name, row in (("FedAvg", "fedavg"), ("`flea`", "flea")):
            runs = [archive.runs(FSDD, row, f"fsdd {s} K={clients}") for s in FSDD_SPLITS]
            rows.append([str(clients), name, seeds_of(runs[0]), *(cell(r, BEST, LAST10) for r in runs)])
        rows.append(
            [
                str(clients),
                "last-10 gain, paired",
                "",
                *(gain_cell(gains[clients, s], count=True) for s in FSDD_SPLITS),
            ]
        )
    cells = {
        f"{row} {split} K={k}": archive.runs(FSDD, row, f"fsdd {split} K={k}")
        for k in (27, 54)
        for row in ("fedavg", "flea")
        for split in FSDD_SPLITS
    }
    return markdown_table(["K", "", "seeds", *FSDD_SPLITS], rows) + off_reference(cells)


@fragment("fsdd-claim")
def fsdd_claim(archive: Archive) -> str:
    """The counts behind the FSDD sentence: paired runs that gain, cells where ``flea`` spreads less."""
    gains = [g for g in fsdd_gains(archive).values() if g is not None]
    up, total = sum(g.above_zero() for g in gains), sum(len(g.values) for g in gains)
    narrower = 0
    for clients in (27, 54):
        for split in FSDD_SPLITS:
            ours, base = (
                stat(archive.runs(FSDD, m, f"fsdd {split} K={clients}"), LAST10) for m in ("flea", "fedavg")
            )
            narrower += ours is not None and base is not None and ours.std < base.std
    seeds = seeds_text({seed for g in gains for seed in g.values})
    return (
        f"`flea` gains by the last-10 mean in {up} of the {total} paired runs ({len(gains)} cells, {seeds}), "
        f"and its last-10 std over seeds is below FedAvg's in {narrower} of the {len(gains)} cells.\n"
    )


@fragment("fsdd-baselines")
def fsdd_baselines(archive: Archive) -> str:
    """Every FSDD method at K = 27 (best / last-10) and `flea`'s paired last-10 gain over the best other."""
    settings = [f"fsdd {s} K=27" for s in FSDD_SPLITS]
    runs = {row: [archive.runs(FSDD, row, s) for s in settings] for row in FSDD_BASELINE_ROWS.values()}
    rows = [
        [name, seeds_of(runs[row][0]), *(cell(r, BEST, LAST10) for r in runs[row])]
        for name, row in FSDD_BASELINE_ROWS.items()
    ]
    versus = []
    for i in range(len(settings)):
        others = {row: stat(runs[row][i], LAST10) for row in runs if row not in ("flea", "feddata")}
        best = max((r for r in others if others[r] is not None), key=lambda r: others[r].mean, default=None)
        gain = try_gain(runs["flea"][i], runs[best][i], LAST10) if best else None
        name = next(n for n, r in FSDD_BASELINE_ROWS.items() if r == best) if best else ""
        versus.append(f"{gain_cell(gain, count=True)} vs {name}" if gain else "-")
    rows.append(["`flea` − best other but FedData, last-10, paired", "", *versus])
    cells = {f"{row} {s}": archive.runs(FSDD, row, s) for row in runs for s in settings}
    return markdown_table(["method", "seeds", *FSDD_SPLITS], rows) + off_reference(cells)
