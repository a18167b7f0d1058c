"""``fedaug campaign import DIR``: a campaign command's archives into their studies, then their reports.

Every ``*.tar.gz`` in ``DIR`` (``<study>/runs/<path>/...``, :func:`tools.campaign.run.write_archives`) is
unpacked into a scratch folder and checked first, all of them before anything is written: each run must sit
where a point of a grid of that study puts it, hold that point's result config
(:func:`~fedaug.runs.resume.config_differences`), be finished, and not replace a finished run of
another config already there. One that does not is refused with one line naming it. Then each run goes into
``<studies>/<study>/runs/<path>`` through :func:`~fedaug.results.archive.archive_runs` (what ``fedaug
archive`` keeps), and each study touched gets its report rebuilt with
:func:`~fedaug.results.report.write_report` as its grid's ``report:`` says.
"""

from __future__ import annotations

import logging
import tarfile
import tempfile
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fedaug.errors import FedaugError
from fedaug.results.archive import archive_runs
from fedaug.results.reference import locate_reference
from fedaug.results.report import write_report
from fedaug.results.store import group_runs, load_runs
from fedaug.results.tables import resolve_row
from fedaug.runs.resume import config_differences, finished_summary
from fedaug.sweeps.order import SweepPoint
from tools.campaign.spec import Campaign, Grid, archive_path, grid_points

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Incoming:
    """A run from an archive: where it was unpacked, its grid and point, where it goes."""

    source: Path
    grid: Grid
    point: SweepPoint
    target: Path


def unpack(archive: Path, into: Path) -> None:
    """Extracts ``archive`` into ``into``, refusing a member that is not a file or folder inside it."""
    try:
        with tarfile.open(archive, "r:gz") as tar:
            members = tar.getmembers()
            for member in members:
                path = Path(member.name)
                if not (member.isfile() or member.isdir()) or path.is_absolute() or ".." in path.parts:
                    raise FedaugError(f"{archive} holds {member.name!r}, not a run's file; refusing it")
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4: also strips odd permissions
                tar.extractall(into, members=members, filter="data")
            else:
                tar.extractall(into, members=members)
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:  # EOFError: a truncated .gz
        raise FedaugError(f"cannot unpack {archive}: {exc}") from exc


def _study_of(relative: Path, campaign: Campaign) -> tuple[str, Path] | None:
    """The study (the longest that fits) and the path inside its ``runs/`` of an unpacked run dir."""
    parts = relative.parts
    for cut in range(len(parts) - 1, 0, -1):
        study = "/".join(parts[:cut])
        if parts[cut] == "runs" and any(g.study == study for g in campaign.grids):
            return study, Path(*parts[cut + 1 :])
    return None


Points = dict[str, list[tuple[Grid, SweepPoint]]]
"""Each study's grid points (and their grids)."""


def check_run(source: Path, relative: Path, campaign: Campaign, points: Points) -> Incoming:
    """The checked :class:`Incoming` of the run unpacked at ``source``.

    Raises:
        FedaugError: the run is in no study of the campaign, at no grid point's path, of another config,
            or unfinished.
    """
    found = _study_of(relative, campaign)
    if found is None:
        studies = ", ".join(sorted({g.study for g in campaign.grids}))
        raise FedaugError(
            f"run {relative} is in no study of {campaign.path} (<study>/runs/...; studies: {studies})"
        )
    study, inside = found
    match = [(g, p) for g, p in points.get(study, []) if archive_path(p) == inside]
    if not match:
        raise FedaugError(f"run {relative} is at no grid point of study {study} in {campaign.path}")
    grid, point = match[0]
    differences = config_differences(source / "config.yaml", point.config)
    if differences:
        raise FedaugError(
            f"run {relative} does not match its grid point of {grid.name}: {', '.join(differences)} differ"
        )
    if finished_summary(source, point.config.train.rounds) is None:
        raise FedaugError(
            f"run {relative} is unfinished (no summary.json of {point.config.train.rounds} rounds)"
        )
    target = campaign.study_dir(grid) / "runs" / inside
    if finished_summary(target, point.config.train.rounds) is not None and config_differences(
        target / "config.yaml", point.config
    ):
        raise FedaugError(f"run {relative} would replace {target}, a finished run of another config")
    return Incoming(source, grid, point, target)


def import_archives(
    campaign: Campaign, folder: Path, *, runs_dir: Path = Path("runs/campaign")
) -> list[Path]:
    """Imports every archive in ``folder`` (module docstring); returns the report files written.

    Raises:
        FedaugError: no archives, an archive that cannot be unpacked, a run refused by :func:`check_run`
            (before anything is written), a report that cannot be built.
    """
    archives = sorted(folder.glob("*.tar.gz"))
    if not archives:
        raise FedaugError(f"no *.tar.gz archives in {folder} (fedaug campaign run --out writes them)")
    points: Points = {}
    for grid in campaign.grids:
        points.setdefault(grid.study, []).extend((grid, p) for p in grid_points(grid, runs_dir))
    with tempfile.TemporaryDirectory(prefix="fedaug_import_") as scratch_name:
        scratch = Path(scratch_name)
        incoming = []
        for index, archive in enumerate(archives):
            unpacked = scratch / str(index)
            unpack(archive, unpacked)
            for config in sorted(unpacked.rglob("config.yaml")):
                run_dir = config.parent
                incoming.append(check_run(run_dir, run_dir.relative_to(unpacked), campaign, points))
        for run in incoming:
            archive_runs(run.source, run.target)
    logger.info("imported %d runs from %d archives", len(incoming), len(archives))
    grids = list({run.grid.study: run.grid for run in incoming}.values())
    return [path for grid in grids for path in rebuild_report(campaign, grid)]


def rebuild_report(campaign: Campaign, grid: Grid) -> Sequence[Path]:
    """Writes the study's report (``report.md``, ``report.csv`` and plots) as the grid's ``report:`` says."""
    spec = grid.report
    study = campaign.study_dir(grid)
    runs = [study / folder for folder in spec.runs if (study / folder).is_dir()]
    present = _present(runs, [name for name in (spec.highlight, spec.baseline) if name is not None])
    outputs = write_report(
        runs,
        formats=("md", "csv"),
        out_dir=study / spec.out,
        reference=locate_reference(spec.reference) if spec.reference else None,
        highlight=spec.highlight if spec.highlight in present else None,
        plots=spec.plots,
        baseline=spec.baseline if spec.baseline in present else None,
    )
    return outputs.files


def _present(runs_dirs: Sequence[Path], names: Sequence[str]) -> set[str]:
    """Which of the report's ``names`` (its highlight and baseline) have runs yet: a grid's first archives may
    hold FedAvg alone, and its report is still rebuilt, without the highlight until FLea's runs come."""
    grouping = group_runs([run for folder in runs_dirs for run in load_runs(folder)])
    found = {name for name in names if resolve_row(grouping, name) is not None}
    for name in sorted(set(names) - found):
        logger.info("report without %s: no run of it archived yet", name)
    return found
