"""``fedaug sweep``, ``fedaug report`` and ``fedaug archive``: a grid of runs, the tables of finished run
dirs, and their committable part (:mod:`fedaug.sweeps`, :mod:`fedaug.results`, imported when a command
runs, so ``--help`` stays fast)."""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import replace
from pathlib import Path

from fedaug.cli.common import add_device_arg, shared_overrides, with_plugins

logger = logging.getLogger("fedaug")


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedaug.sweeps.options import HEARTBEAT_SECONDS, check_sweep_options, parse_shard

    heartbeat = HEARTBEAT_SECONDS if args.heartbeat is None else args.heartbeat
    check_sweep_options(args.workers, heartbeat, args.order)  # with --dry-run too; before torch is imported
    shard = None if args.shard is None else parse_shard(args.shard)  # '' too is refused, not "no shard"
    from fedaug.config.load import check_sweep_overrides

    first = argparse.Namespace(**{**vars(args), "device": _first_device(args.device)})  # a,b: spread below
    check_sweep_overrides(args.config, [*shared_overrides(first), *args.overrides], smoke=args.smoke)
    from fedaug.runs.runner import check_run_dir_path
    from fedaug.runtime.device import DeviceError, resolve_device
    from fedaug.sweeps.archived import archive_times
    from fedaug.sweeps.cluster import run_commands, shard_points
    from fedaug.sweeps.estimate import dry_run_lines
    from fedaug.sweeps.sweep import expand_sweep, run_sweep
    from fedaug.sweeps.workers import cpu_oversubscription, gpu_underuse

    spread = _sweep_devices(args)  # --device cuda:0,cuda:1: the first in the configs, spread by the pool
    overrides = shared_overrides(args)
    points = expand_sweep(args.config, [*overrides, *args.overrides], args.grid, smoke=args.smoke)
    points = [replace(p, config=with_plugins(p.config, args.plugins)) for p in points]
    if args.list:
        print("\n".join(run_commands(_sweep_argv(args), len(points))))
        return 0
    if shard is not None:
        points = shard_points(points, *shard)
    for point in points:
        check_run_dir_path(point.run_dir)  # an --out-dir naming a file: one error now
    devices = sorted({p.config.engine.device for p in points} | set(spread))
    archive = archive_times()
    if args.dry_run:
        print("\n".join(dry_run_lines(points, workers=args.workers, order=args.order, archive=archive)))
        for name in devices:  # a plan may be written for another machine: a note, not a refusal
            try:
                resolve_device(name)
            except DeviceError as missing:
                print(f"note: this machine could not run them: {missing}")
        for note in (cpu_oversubscription(points, args.workers), gpu_underuse(points, args.workers)):
            if note:
                print(f"note: {note}")
        return 0
    for name in devices:
        resolve_device(name)  # a device this machine lacks: one error now, not one failure per run
    if crowded := cpu_oversubscription(points, args.workers):
        logger.warning(crowded)
    if idle := gpu_underuse(points, args.workers):
        logger.info(idle)
    summary = dry_run_lines(points, workers=args.workers, order=args.order, archive=archive)[-1]
    logger.info("%s (--dry-run lists them)", summary)
    result = run_sweep(
        points, workers=args.workers, heartbeat=heartbeat, order=args.order, devices=spread, archive=archive
    )
    busy = f", {len(result.busy)} busy (run by another process)" if result.busy else ""
    print(
        f"{len(points)} runs: {len(result.finished)} finished now, {len(result.skipped)} already finished, "
        f"{len(result.failures)} failed{busy}"
    )
    for run_dir, error in result.busy:
        print(f"BUSY {run_dir}: {error}")
    for run_dir, error in result.failures:
        print(f"FAILED {run_dir}: {error}")
    if result.failures:
        print("tracebacks: fedaug -v sweep ... --workers 1; fixed runs resume when the sweep is run again")
    if result.finished or result.skipped:
        # the sweep's folder: out_dir / name, above the folders of grid keys its run dirs' paths do not show
        root = os.path.commonpath([Path(p.config.out_dir) / p.config.name.split("/")[0] for p in points])
        print(f"tables and plots: fedaug report {root} --plots")
    return 1 if result.failures or result.busy else 0


def _first_device(device: str | None) -> str | None:
    """The first of ``--device a,b`` as the configs get it (:func:`_sweep_devices`), read without importing
    torch: the early check of the overrides sees one device; the list is checked with the pool."""
    return device.split(",", 1)[0].strip() if device and "," in device else device


def _sweep_devices(args: argparse.Namespace) -> list[str]:
    """The devices of ``--device a,b`` (``args.device`` becomes the first, which the configs get); [] for
    one device or none."""
    from fedaug.sweeps.cluster import parse_devices

    if not args.device or "," not in args.device:
        return []
    devices = parse_devices(args.device)
    args.devices, args.device = args.device, devices[0]
    return devices


def _sweep_argv(args: argparse.Namespace) -> list[str]:
    """The sweep's command line from its parsed arguments, without ``--list``, ``--shard`` and ``--workers``:
    the base of ``--list``'s one command per run."""
    argv = [args.config]
    argv += [f"--set={o}" for o in args.overrides] + [f"--grid={g}" for g in args.grid]
    argv += [f"--plugin={p}" for p in args.plugins]
    for flag, value in (
        ("--data-dir", args.data_dir),
        ("--out-dir", args.out_dir),
        ("--device", getattr(args, "devices", args.device)),
    ):
        if value:
            argv.append(f"{flag}={value}")
    return [*argv, "--smoke"] if args.smoke else argv


def cmd_report(args: argparse.Namespace) -> int:
    from fedaug.results.reference import locate_reference
    from fedaug.results.report import write_report

    formats = [f.strip() for f in args.format.split(",") if f.strip()]
    outputs = write_report(
        [Path(d) for d in args.runs_dir],
        formats=formats,
        out_dir=Path(args.out) if args.out else None,
        reference=locate_reference(args.reference) if args.reference else None,
        highlight=args.highlight,
        exclude=[m.strip() for m in args.exclude.split(",") if m.strip()],
        include_unfinished=args.include_unfinished,
        plots=args.plots,
        heatmaps=args.heatmaps,
        methods=[m.strip() for m in args.methods.split(",") if m.strip()] if args.methods else None,
        baseline=args.baseline,
        pdf=args.pdf,
    )
    for text in outputs.printed:
        print(text)
    for path in outputs.files:
        print(f"wrote {path}")
    return 0


def cmd_archive(args: argparse.Namespace) -> int:
    from fedaug.results.archive import archive_runs

    written = archive_runs(
        Path(args.runs_dir),
        Path(args.out),
        include_unfinished=args.include_unfinished,
        full_precision=args.full_precision,
    )
    print(f"archived {len(written)} runs into {args.out}")
    return 0


def add_archive_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    archive = sub.add_parser(
        "archive",
        help="keep finished runs' config, summary and scalar metrics (no checkpoints) for report",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  fedaug archive runs/default --out studies/baselines_har/runs",
    )
    archive.add_argument("runs_dir", help="a folder holding run dirs, e.g. runs/flea_table1_har")
    archive.add_argument("--out", required=True, help="archive folder, e.g. studies/<name>/runs")
    archive.add_argument(
        "--include-unfinished", action="store_true", help="also archive runs without summary.json"
    )
    archive.add_argument(
        "--full-precision",
        action="store_true",
        help="keep the floats of metrics and timings as the run wrote them (default: metrics to 8 "
        "significant digits, timings to 4, about half the bytes; the reports print the same)",
    )
    archive.set_defaults(func=cmd_archive)


def add_sweep_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sweep = sub.add_parser(
        "sweep",
        help="run a grid of experiments (skips finished runs, resumes the rest)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  fedaug sweep flea_table1_har --dry-run   # a preset by name: run dirs, status, time left\n"
        "  fedaug sweep configs/experiments/flea_table1_har.yaml --workers 2 --grid seed=[0]   # or a file",
    )
    sweep.add_argument("config", help="sweep YAML: a config plus grid: {key: [values]}")
    sweep.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override the base"
    )
    sweep.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=[V1,V2]",
        help="replace (or add) a grid axis, e.g. --grid seed=[0] --grid 'method=[fedavg, flea]'",
    )
    sweep.add_argument("--data-dir", help="directory holding the datasets (default: $FEDAUG_DATA)")
    sweep.add_argument("--out-dir", help="root of run directories (default: the sweep's out_dir)")
    sweep.add_argument(
        "--smoke", action="store_true", help="2 rounds, 1 local epoch per run, in run dirs of <name>-smoke"
    )
    sweep.add_argument(
        "--workers",
        type=int,
        default=1,
        help="worker processes (default 1; several may share one GPU: a run that runs out of its memory "
        "resumes once another ends, and fewer run at once)",
    )
    add_device_arg(sweep)
    sweep.add_argument(
        "--heartbeat",
        type=float,
        metavar="SECONDS",
        help="with --workers > 1: log each running run's round and time left this often (600; 0: never)",
    )
    sweep.add_argument(
        "--order",
        default="grid",
        help="grid (default: as listed, seeds first) or longest-first (most run time left by other seeds' "
        "round times first; unknown ones first in grid order): shortens the tail of many workers on a GPU",
    )
    sweep.add_argument(
        "--dry-run",
        action="store_true",
        help="list the run dirs, their status and run time left (other seeds' round times, else archived "
        "runs of the setting scaled by a host probe), and the wall time with --workers; run nothing",
    )
    sweep.add_argument(
        "--shard",
        metavar="I/N",
        help="run slice I of N (0-based) of the grid: N disjoint slices cover it, e.g. one per SLURM array "
        "task (--shard $SLURM_ARRAY_TASK_ID/N)",
    )
    sweep.add_argument(
        "--list", action="store_true", help="print one command per run (--shard k/N of N runs); run nothing"
    )
    sweep.set_defaults(func=cmd_sweep)


def add_report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    report = sub.add_parser(
        "report",
        help="tables (and plots) from finished run dirs; never trains",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  fedaug report runs/flea_table1_har --reference papers --highlight flea",
    )
    report.add_argument(
        "runs_dir",
        nargs="+",
        help="folders holding run dirs, e.g. runs/flea_table1_har (several: merged, the first wins a repeat)",
    )
    report.add_argument("--format", default="md", help="comma-separated: md, csv, tex (default md)")
    report.add_argument("--out", help="write report.<format> (and plots/) here instead of printing")
    report.add_argument(
        "--reference",
        help="YAML of published numbers to put beside ours: papers (the four papers' tables, shipped with "
        "fedaug: docs/published_numbers.yaml) or a file of your own",
    )
    report.add_argument(
        "--highlight", help="method compared with the best other one (arrows for >5%%, >10%%)"
    )
    report.add_argument(
        "--exclude",
        default="feddata,local,centralized",  # fedaug.results.tables.NOT_COMPARED (not imported here)
        help="methods not counted as 'best other' (default: feddata, as the papers, and the reference "
        "runs local and centralized)",
    )
    report.add_argument("--methods", help="comma-separated: only these methods' runs (default: all)")
    report.add_argument(
        "--baseline",
        help="method whose number every row's gain is shown over, ours (paired by seed) and the paper's",
    )
    report.add_argument(
        "--include-unfinished", action="store_true", help="also use runs without summary.json"
    )
    report.add_argument(
        "--plots", action="store_true", help="learning curves, dCor/exposure, Beta, hyper-params"
    )
    report.add_argument(
        "--heatmaps", action="store_true", help="partition heat-maps (reads the datasets' labels)"
    )
    report.add_argument("--pdf", action="store_true", help="also a PDF copy of each plot (default: PNG only)")
    report.set_defaults(func=cmd_report)
