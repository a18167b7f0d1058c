"""The ``fedaug`` command line.

``fedaug run [CONFIG ...] [--set key=value ...]`` runs an experiment (default preset: UCI-HAR, HARNet,
Qua(2), K = 75, FedAvg, 100 rounds). ``fedaug list [KIND [NAME]]`` shows what is registered: one line per
name (description and paper, or shape, size, source and license), or one name's options with their defaults
and help (:mod:`fedaug.cli.listing`). ``fedaug partition`` prints a partition's per-client class counts; with
``--plot`` it also saves its heat-map (matplotlib). ``fedaug sweep SWEEP.yaml`` runs a grid of
experiments (``--workers N`` processes, ``--dry-run`` lists the run dirs and their time left); ``fedaug report
RUNS_DIR [...]``
turns finished run dirs into tables (Markdown, CSV, LaTeX) and plots; ``fedaug archive RUNS_DIR --out DIR``
keeps their reportable part (no checkpoints) where it can be committed; ``fedaug zsdg RUN_DIR`` draws the
zero-shot samples of every class that Fed-ZDA's ZSDG makes of a run's model; ``fedaug flower ...`` runs the
same experiments on Flower (simulation, or a SuperLink with SuperNodes over TLS). Every user error is one line
on stderr and exit code 2; an interrupted run or sweep resumes when the same command is run again.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import platform
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug import registry
from fedaug.cli.analyze import add_analyze_parser
from fedaug.cli.attack import add_attack_parser
from fedaug.cli.common import (
    OneLineParser,
    add_config_args,
    add_device_arg,
    add_plugin_args,
    load_config,
    plot_job,
    preflight_config,
    shared_overrides,
    with_plugins,
)
from fedaug.cli.flower import add_flower_parser
from fedaug.cli.zsdg import add_zsdg_parser
from fedaug.errors import FedaugError, out_of_memory_sentence, shorten
from fedaug.plugins import import_plugins
from fedaug.runtime import log_once, startup

if TYPE_CHECKING:
    from fedaug.engine.progress import JobEta

logger = logging.getLogger("fedaug")


def cmd_run(args: argparse.Namespace) -> int:
    preflight_config(args)  # an unreadable file or a malformed --set: refused before torch is imported
    from fedaug.runs.resolve import reusing_data

    with reusing_data():  # a comparison's data and partition: loaded once, for its checks and its runs
        return _run_configs(args)


def _run_configs(args: argparse.Namespace) -> int:
    from fedaug.config.identity import run_dir_for
    from fedaug.runs.runner import (
        check_experiment,
        comparison_configs,
        comparison_table,
        run_experiment,
    )

    startup.mark("imports")
    config = load_config(args)
    subs = comparison_configs(config)
    startup.mark("config")
    jobs: list[JobEta | None] = [None] * len(subs)
    if len(subs) > 1 or args.dry_run:  # every method's options and run dir checked before the first one runs
        from fedaug.sweeps.archived import archive_times
        from fedaug.sweeps.estimate import job_plan

        for sub in subs:
            check_experiment(sub, fresh=args.fresh)
        plan = job_plan(subs, fresh=args.fresh, archive=archive_times())
        if args.dry_run:
            print("\n".join(plan.lines))
            return 0
        for line in plan.lines:
            logger.info(line)
        jobs = list(plan.jobs)
        startup.mark("checks")
    rows = []
    for sub, job in zip(subs, jobs, strict=True):
        summary = run_experiment(sub, fresh=args.fresh, job=job)
        print(f"{sub.method.name}: run dir {run_dir_for(sub)}")
        rows.append((sub.method.name, summary))
    from fedaug.results.store import config_setting_label

    label = config_setting_label(config)  # names a stand-in model itself
    model = "" if config.model.stand_in_for else f", {config.model.name}"
    title = f"{label}{model}, seed {config.seed}"
    plot_job(title, [(sub.method.name, run_dir_for(sub)) for sub in subs], seed=config.seed)
    print(f"\n{title}:")
    print(comparison_table(rows))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from fedaug.cli import listing
    from fedaug.config import presets

    if args.kind == "preset":
        print("\n".join(presets.detail_lines(args.name) if args.name else listing.config_preset_lines()))
    elif args.name:
        print("\n".join(listing.detail_lines(args.kind, args.name)))
    elif args.kind:
        print("\n".join(listing.summary_lines(args.kind)))
    else:
        for kind in registry.KINDS:  # read from the registrations' source: without importing torch
            print(f"{kind}s: {', '.join(listing.names(kind))}")
        print(f"presets: {', '.join(p.name for p in presets.presets())}")
        print("details: fedaug list KIND (one line per name), fedaug list KIND NAME (its options)")
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    from fedaug.config.identity import partition_tag
    from fedaug.data.partition import describe, plot_heatmap
    from fedaug.results.store import config_setting_label
    from fedaug.runs.resolve import load_data_and_partition

    if args.plot is not None:  # checked before the data is loaded: a wrong --plot fails at once
        if args.plot and Path(args.plot).suffix.lower() not in (".png", ".pdf"):
            raise FedaugError(
                f"--plot takes a .png or .pdf path, got {args.plot!r} (put CONFIG files before --plot)"
            )
        try:
            import matplotlib  # noqa: F401
        except ImportError as error:
            raise FedaugError(
                "--plot needs matplotlib: pip install 'fedaug[plots]' (without --plot: the table alone)"
            ) from error
    config = load_config(args)
    dataset, partition = load_data_and_partition(config)
    labels = dataset.y_train.numpy()
    print(describe(partition, labels, dataset.class_names))
    if args.plot is None:
        return 0
    plot = Path(args.plot or f"{config.data.name}-{partition_tag(config)}.png")
    title = f"{config_setting_label(config)} (seed {config.seed})"
    plot_heatmap(partition.class_counts(labels), plot, title)
    print(f"heat-map: {plot}")
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedaug.sweeps.options import HEARTBEAT_SECONDS, check_sweep_options, parse_shard

    heartbeat = HEARTBEAT_SECONDS if args.heartbeat is None else args.heartbeat
    check_sweep_options(args.workers, heartbeat, args.order)  # with --dry-run too; before torch is imported
    shard = None if args.shard is None else parse_shard(args.shard)  # '' too is refused, not "no shard"
    from fedaug.config.tree import preflight

    preflight([args.config], [*shared_overrides(args), *args.overrides])  # the sweep file and its --set
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

    written = archive_runs(Path(args.runs_dir), Path(args.out), include_unfinished=args.include_unfinished)
    print(f"archived {len(written)} runs into {args.out}")
    return 0


def _add_archive_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    archive.set_defaults(func=cmd_archive)


def _add_sweep_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def _add_report_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def version_line() -> str:
    """``fedaug 0.1.0 (torch 2.13.0+cpu, Python 3.11.9)``, read without importing torch."""
    from importlib import metadata

    from fedaug import __version__

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "not installed"
    return f"fedaug {__version__} (torch {torch_version}, Python {platform.python_version()})"


def build_parser() -> argparse.ArgumentParser:
    from fedaug.cli.listing import LIST_KINDS, kind

    raw = argparse.RawDescriptionHelpFormatter
    parser: argparse.ArgumentParser = OneLineParser(
        prog="fedaug",
        description="fedaug: federated learning on scarce, label-skewed data (FLea, Fed-AugMix, Fed-ZDA, "
        "baselines).",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug run --smoke               # FedAvg and FLea on UCI-HAR, 2 rounds: a quick wiring check\n"
        "  fedaug list method fedntd        # a method's options, with their defaults and help\n\n"
        "fedaug COMMAND --help shows a command's options and an example.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    parser.add_argument(
        "--version", action="version", version=version_line(), help="fedaug's, torch's and Python's versions"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser(
        "run",
        help="run an experiment (resumes if interrupted)",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug run --smoke                # the default preset, 2 rounds, 1 local epoch\n"
        "  fedaug run smoke --set method=fedprox --set method.proximal_mu=0.1   # fedaug list presets",
    )
    add_config_args(run)
    run.add_argument("--fresh", action="store_true", help="discard an existing run dir and start over")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan (run dirs, status, time left and where each estimate comes from); run nothing",
    )
    add_device_arg(run)
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser(
        "list",
        help="what is registered (methods, datasets, models, partitioners, attacks) and the presets",
        description="Without KIND: every registered name. With KIND: one line per name (methods: what they\n"
        "change and their paper; datasets: shape, train / test size, classes, source, license; models:\n"
        "input, parameters, default split; partitioners: their options; presets: what each sets up and\n"
        "the command that runs it). With KIND NAME: its options, with their defaults and help (a preset:\n"
        "its YAML).",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug list datasets\n"
        "  fedaug list method fedntd        # FedNTD's options (set them with --set method.ntd_beta=...)\n"
        "  fedaug list presets              # the packaged presets; fedaug list preset NAME prints one",
    )
    lst.add_argument(
        "kind",
        nargs="?",
        type=kind,
        choices=LIST_KINDS,
        metavar="KIND",
        help="method, dataset, model, partitioner, attack or preset (the plural works too)",
    )
    lst.add_argument(
        "name",
        nargs="?",
        metavar="NAME",
        help="a registered name of that kind: its options (a preset: its YAML)",
    )
    lst.set_defaults(func=cmd_list)
    part = sub.add_parser(
        "partition",
        help="print a partition's per-client class counts (--plot: also save its heat-map)",
        description="Prints the per-client class counts of the partition a config makes. Only --plot saves\n"
        "a clients x classes heat-map, and only --plot needs matplotlib (pip install 'fedaug[plots]').",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug partition --set partition=dirichlet --set partition.alpha=0.1\n"
        "  fedaug partition smoke --plot smoke.png",
    )
    add_config_args(part)
    part.add_argument(
        "--plot",
        nargs="?",
        const="",
        metavar="FILE",
        help="also save the heat-map to FILE (.png; .pdf writes both), or without FILE to "
        "<dataset>-<partition>.png; needs matplotlib",
    )
    part.set_defaults(func=cmd_partition)
    _add_sweep_parser(sub)
    _add_report_parser(sub)
    _add_archive_parser(sub)
    add_attack_parser(sub)
    add_zsdg_parser(sub)
    add_analyze_parser(sub)
    add_flower_parser(sub)
    _add_campaign_stub(sub)
    add_plugin_args(parser)
    return parser


FILE_SYSTEM_ERRORS = (
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    FileNotFoundError,
)
"""OSErrors that ``main`` turns into one line naming the path (exit 2) wherever they come from."""


def file_system_error_line(exc: OSError) -> str:
    """``cannot use PATH: Permission denied`` (both paths of a rename or copy)."""
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None) or "a file"
    return f"cannot use {paths}: {exc.strerror or type(exc).__name__}"


STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG, errno.EROFS, errno.ELOOP)
"""Further OSErrors that ``main`` turns into one line naming the path (exit 2)."""

MAX_ERROR_CHARS = 2000
"""An error line is cut to this length (the values it echoes are cut already; this is the last guard)."""

ALLOCATION_HINT = (
    "this machine cannot allocate the memory this config needs: lower the sizes (train.batch_size, "
    "engine.eval_batch_size, the model's width or hidden sizes, partition.num_clients)"
)


def allocation_line(exc: Exception) -> str | None:
    """One line for torch's CPU allocator failing (None for any other error)."""
    text = " ".join(str(exc).split())
    at = text.find("can't allocate memory")
    return None if at < 0 else f"{shorten(text[at:], 160)}; {ALLOCATION_HINT}"


OUT_OF_MEMORY_HINT = (
    "The GPU ran out of memory: run fewer runs on it at once (fedaug sweep --workers), or lower "
    "engine.eval_batch_size or train.batch_size; the same command resumes from the last finished round"
)


def out_of_memory_line(exc: Exception) -> str | None:
    """One line for an error that is the device running out of memory (None for any other): what PyTorch
    said first, then what to do (its message goes on with every process's memory, a paragraph)."""
    sentence = out_of_memory_sentence(str(exc))
    return None if sentence is None else f"{sentence} {OUT_OF_MEMORY_HINT}"


def _sigterm_as_interrupt() -> contextlib.AbstractContextManager[None]:
    from fedaug.runtime.interrupt import sigterm_as_interrupt

    return sigterm_as_interrupt()


CAMPAIGN_TOOL = Path("tools") / "campaign" / "__main__.py"
"""The campaign's command, in a source checkout: the project's own machinery, not part of the package."""


def _add_campaign_stub(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``fedaug campaign`` in the help: the command itself is ``python -m tools.campaign`` of a checkout."""
    sub.add_parser(
        "campaign",
        help="the project's campaign (run | import | status; a source checkout's tools/campaign)",
        description="The grids of studies/campaign.yaml, one budget at a time: python -m tools.campaign\n"
        "of the source checkout, with the same arguments (docs/guide/gpu.md).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
        "  fedaug campaign status\n"
        "  fedaug campaign run --budget 540 --device cpu --workers 1 --out cpu_out",
        add_help=False,
    )


def checkout_with_tools(start: Path) -> Path | None:
    """The source checkout ``start`` lies in (or the one this package was installed from in place) that
    holds the campaign's tool; None where there is none."""
    for root in (start.resolve(), *start.resolve().parents, *Path(__file__).resolve().parents):
        if (root / CAMPAIGN_TOOL).is_file():
            return root
    return None


def delegate_campaign(argv: Sequence[str]) -> int:
    """``fedaug [-v] campaign ...`` runs ``python -m tools.campaign ...`` of the checkout (same flags)."""
    root = checkout_with_tools(Path.cwd())
    if root is None:
        print(
            "fedaug: error: fedaug campaign runs the project's campaign from a source checkout "
            f"({CAMPAIGN_TOOL}); none holds {Path.cwd()}: run it from the fedaug repository",
            file=sys.stderr,
        )
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [env.get("PYTHONPATH")])])
    import subprocess

    try:
        return subprocess.call([sys.executable, "-m", "tools.campaign", *argv], env=env)
    except KeyboardInterrupt:
        return 130


def _campaign_argv(argv: Sequence[str]) -> list[str] | None:
    """The arguments of ``fedaug [-v] campaign ARGS`` for the tool (``-v`` kept), or None for other
    commands."""
    leading = []
    for at, word in enumerate(argv):
        if word in ("-v", "--verbose"):
            leading.append(word)
            continue
        return [*leading, *argv[at + 1 :]] if word == "campaign" else None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if (campaign := _campaign_argv(words)) is not None:
        return delegate_campaign(campaign)
    return run_parsed(build_parser().parse_args(words))


def run_parsed(args: argparse.Namespace) -> int:
    """Runs the parsed command ``args.func(args)``: every error a user can cause is one line and exit 2."""
    startup.mark("cli")  # argument parsing and the CLI's own imports
    log_once.forget()  # each command logs its facts (the dataset and partition it loads) once
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        datefmt="%H:%M:%S",
        stream=sys.stderr,
    )
    try:
        import_plugins(getattr(args, "plugins", []))  # before the command: its names may come from them
        # SIGTERM stops a run as Ctrl-C does: the lock released, the resume line (other commands keep theirs)
        with _sigterm_as_interrupt() if args.command == "run" else contextlib.nullcontext():
            return int(args.func(args))
    except FedaugError as exc:
        if args.verbose:
            raise
        message = out_of_memory_line(exc) or " ".join(str(exc).splitlines())
        print(f"fedaug: error: {shorten(message, MAX_ERROR_CHARS)}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # torch.OutOfMemoryError outside a client (evaluation, a server phase)
        if args.verbose or (line := out_of_memory_line(exc) or allocation_line(exc)) is None:
            raise
        print(f"fedaug: error: {line}", file=sys.stderr)
        return 2
    except MemoryError:
        if args.verbose:
            raise
        print(f"fedaug: error: {ALLOCATION_HINT}", file=sys.stderr)
        return 2
    except FILE_SYSTEM_ERRORS as exc:  # last resort: a file or folder the command could not use
        if args.verbose:
            raise
        print(f"fedaug: error: {file_system_error_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fedaug: interrupted; run the same command again to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `fedaug list presets | head`: the reader left; no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # disk full, a name too long, a read-only file system: one line naming the path
        if args.verbose or exc.errno not in STORAGE_ERRNOS:
            raise
        print(f"fedaug: error: {file_system_error_line(exc)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
