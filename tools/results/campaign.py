"""Where the campaign stands (``studies/campaign.yaml``, docs/guide/gpu.md): per grid, what it runs, the runs
archived of its points and the estimated GPU minutes of the others, the numbers ``fedaug campaign status``
prints; in docs/results.md and docs/guide/gpu.md."""

from __future__ import annotations

import tempfile
from pathlib import Path

from fedaug.config.load import config_to_dict
from fedaug.results.stand_ins import dataset_label, model_label
from fedaug.results.store import flatten
from tools.campaign.ledger import Ledger
from tools.campaign.plan import GridState, core_hours, grid_states, minutes_text
from tools.campaign.spec import grid_points, read_campaign
from tools.results.common import STUDIES, Archive, fragment
from tools.results.fragments import markdown_table

KIND = "cuda"


def _what(state: GridState, runs_dir: Path) -> str:
    """``uci_har, harnet, K = 75, 150``: the datasets (a stand-in by its label) with their models, and the
    client counts (or mean local sizes)."""
    configs = [flatten(config_to_dict(p.config)) for p in grid_points(state.grid, runs_dir)]
    data = dict.fromkeys(f"{dataset_label(c)}, {model_label(c)}" for c in configs)
    clients = sorted({int(c["partition.num_clients"]) for c in configs if c["partition.num_clients"]})
    sizes = sorted({c["partition.mean_local_size"] for c in configs if not c["partition.num_clients"]})
    counts = [f"K = {', '.join(map(str, clients))}"] if clients else []
    counts += [f"mean local size {', '.join(f'{n:g}' for n in sizes)}"] if sizes else []
    return ", ".join([*data, *counts])


@fragment("campaign-status")
def campaign_status(archive: Archive) -> str:
    """One row per grid, in the campaign's order, then the whole campaign."""
    del archive
    campaign = read_campaign(STUDIES / "campaign.yaml")
    workers = campaign.workers.get(KIND) or 1
    with tempfile.TemporaryDirectory() as empty:  # the archives alone, never a local runs/ folder
        states = grid_states(campaign, Ledger(campaign.studies), Path(empty), KIND)
        rows = [
            [
                f"`{s.grid.name}`",
                f"`{s.grid.study}`",
                _what(s, Path(empty)),
                f"{len(s.done)} / {s.total}",
                minutes_text(s.pending, workers),
            ]
            for s in states
        ]
    done, total = sum(len(s.done) for s in states), sum(s.total for s in states)
    known = [p for s in states for p in s.pending if p.cost is not None]
    rows.append(["all", "", "", f"{done} / {total}", minutes_text(known, workers)])
    return (
        "Generated from `studies/campaign.yaml` and the runs archived under `studies/` (what "
        "`fedaug campaign status` prints): a grid point counts as done when a finished run of its result "
        "config is archived. "
        f"GPU minutes are estimates for {workers} runs at once on one GPU: archived round times of like runs "
        "where a GPU timed them, else the campaign file's guesses.\n\n"
        + markdown_table(
            ["grid (priority order)", "study", "what", "runs archived", "GPU minutes left (estimate)"], rows
        )
    )


@fragment("campaign-status-cpu")
def campaign_status_cpu(archive: Archive) -> str:
    """The CPU's grids (the campaign file's ``order.cpu``), in order: runs archived and core-hours left."""
    del archive
    campaign = read_campaign(STUDIES / "campaign.yaml")
    with tempfile.TemporaryDirectory() as empty:
        states = grid_states(campaign, Ledger(campaign.studies), Path(empty), "cpu")
        rows = [
            [
                f"`{s.grid.name}`",
                f"`{s.grid.study}`",
                _what(s, Path(empty)),
                f"{len(s.done)} / {s.total}",
                core_hours(s.pending),
            ]
            for s in states
        ]
    done, total = sum(len(s.done) for s in states), sum(s.total for s in states)
    known = [p for s in states for p in s.pending if p.cost is not None]
    rows.append(["all", "", "", f"{done} / {total}", core_hours(known)])
    return (
        "The CPU's grids, in its order (`order: cpu` of `studies/campaign.yaml`; what "
        "`fedaug campaign status --device cpu` prints). Core-hours are estimates for one run per core: "
        "archived round times of like runs on a CPU, unscaled by host where the archives carry no host "
        "probe, else the campaign file's costs.\n\n"
        + markdown_table(
            ["grid (CPU order)", "study", "what", "runs archived", "core-hours left (estimate)"], rows
        )
    )
