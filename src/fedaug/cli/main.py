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
import logging
import os
import platform
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug import registry
from fedaug.cli.analyze import add_analyze_parser
from fedaug.cli.attack import add_attack_parser
from fedaug.cli.campaign import add_campaign_stub, campaign_argv, delegate_campaign
from fedaug.cli.common import (
    OneLineParser,
    add_config_args,
    add_device_arg,
    add_plugin_args,
    load_config,
    plot_job,
    preflight_config,
)
from fedaug.cli.failures import (
    ALLOCATION_HINT,
    FILE_SYSTEM_ERRORS,
    MAX_ERROR_CHARS,
    STORAGE_ERRNOS,
    allocation_line,
    file_system_error_line,
    out_of_memory_line,
)
from fedaug.cli.flower import add_flower_parser
from fedaug.cli.sweeping import add_archive_parser, add_report_parser, add_sweep_parser
from fedaug.cli.zsdg import add_zsdg_parser
from fedaug.errors import FedaugError, shorten
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
    add_sweep_parser(sub)
    add_report_parser(sub)
    add_archive_parser(sub)
    add_attack_parser(sub)
    add_zsdg_parser(sub)
    add_analyze_parser(sub)
    add_flower_parser(sub)
    add_campaign_stub(sub)
    add_plugin_args(parser)
    return parser


def _sigterm_as_interrupt() -> contextlib.AbstractContextManager[None]:
    from fedaug.runtime.interrupt import sigterm_as_interrupt

    return sigterm_as_interrupt()


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    if (campaign := campaign_argv(words)) is not None:
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
