"""``fedaug campaign run | import | status``: the grids of ``studies/campaign.yaml``, one budget at a time
(:mod:`tools.campaign`)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fedaug.validation import flag_int, flag_number
from tools.campaign import MAX_STUDIES

DEFAULT_CAMPAIGN = "studies/campaign.yaml"
DEFAULT_RUNS = "runs/campaign"


def cmd_campaign_run(args: argparse.Namespace) -> int:
    from tools.campaign.run import SUMMARY_NAME, run_campaign
    from tools.campaign.spec import read_campaign

    if args.dry_run:
        print("\n".join(_plan_lines(args)))
        return 0
    summary = run_campaign(
        read_campaign(args.campaign).only(_names(args.only)),
        budget=args.budget,
        device=args.device,
        out=Path(args.out),
        runs_dir=Path(args.runs_dir),
        data_dir=Path(args.data_dir or os.environ.get("FEDAUG_DATA") or "data"),
        workers=args.workers,
        overrides=args.overrides,
        max_archives=args.max_archives,
        advance=args.advance,
        choose_once=args.choose_once,
    )
    runs = summary["runs"]
    finished = sum(r["status"] == "finished" for r in runs)
    unfinished = len(summary["unfinished"])
    print(
        f"{len(runs)} runs selected: {finished} finished, {unfinished} unfinished (not archived), "
        f"{len(runs) - finished - unfinished} not started; {summary['elapsed_s']:.0f} s; "
        f"archives: {', '.join(summary['archives']) or 'none'}; {Path(args.out) / SUMMARY_NAME}"
    )
    return 0


def _plan_lines(args: argparse.Namespace) -> list[str]:
    """``campaign run --dry-run``: the runs the budget would take, in the order they would start."""
    from fedaug.runtime.device import resolve_device
    from fedaug.sweeps.probe import given_or_measured
    from fedaug.sweeps.workers import usable_cores
    from tools.campaign.ledger import Ledger
    from tools.campaign.plan import grid_states, makespan, select
    from tools.campaign.spec import archive_path, read_campaign

    campaign = read_campaign(args.campaign).only(_names(args.only))  # a GPU plan may be made on a CPU
    kind = "cuda" if args.device.startswith("cuda") else resolve_device(args.device).type
    workers = args.workers or campaign.workers.get(kind, 0) or usable_cores()
    probe = given_or_measured() if kind == "cpu" else None
    states = grid_states(campaign, Ledger(campaign.studies, probe), Path(args.runs_dir), kind, args.overrides)
    chosen = sorted(
        select(states, args.budget, workers, max_studies=args.max_archives, advance=args.advance),
        key=lambda c: 0.0 if c.advances else -(c.cost or 0.0),
    )
    lines = [f"~{c.cost or 0.0:.0f} s  {c.grid.study}/runs/{archive_path(c.point)}" for c in chosen]
    span = makespan([c.cost or 0.0 for c in chosen], workers)
    return [
        *lines,
        f"{len(chosen)} runs, {workers} at once: about {span:.0f} s of the {args.budget:.0f} s budget",
    ]


def cmd_campaign_import(args: argparse.Namespace) -> int:
    from tools.campaign.importer import import_archives
    from tools.campaign.size import checkout_line
    from tools.campaign.spec import read_campaign

    campaign = read_campaign(args.campaign)
    for path in import_archives(campaign, Path(args.folder), runs_dir=Path(args.runs_dir)):
        print(f"wrote {path}")
    line = checkout_line(campaign.studies)
    if line is not None:
        print(line)
    return 0


def cmd_campaign_status(args: argparse.Namespace) -> int:
    from fedaug.sweeps.probe import given_or_measured
    from fedaug.sweeps.workers import usable_cores
    from tools.campaign.ledger import Ledger
    from tools.campaign.plan import grid_states, status_lines
    from tools.campaign.spec import read_campaign

    campaign = read_campaign(args.campaign).only(_names(args.only))
    workers = args.workers or campaign.workers.get(args.kind, 0) or usable_cores()
    probe = given_or_measured() if args.kind == "cpu" else None
    states = grid_states(campaign, Ledger(campaign.studies, probe), Path(args.runs_dir), args.kind)
    print("\n".join(status_lines(states, workers, args.kind)))
    return 0


def _names(text: str | None) -> list[str]:
    return [name.strip() for name in (text or "").split(",") if name.strip()]


def _common(parser: argparse.ArgumentParser, *, only: bool = True) -> None:
    parser.add_argument(
        "--campaign", default=DEFAULT_CAMPAIGN, help=f"campaign file (default {DEFAULT_CAMPAIGN})"
    )
    parser.add_argument(
        "--runs-dir",
        default=DEFAULT_RUNS,
        help=f"where the campaign's run dirs live (default {DEFAULT_RUNS})",
    )
    if only:
        parser.add_argument(
            "--only", metavar="GRID[,GRID]", help="these grids of the file alone (default: all)"
        )


def add_campaign_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    raw = argparse.RawDescriptionHelpFormatter
    campaign = sub.add_parser(
        "campaign",
        help="run the campaign's next grid points within a time budget, import them, show how far it is",
        formatter_class=raw,
        epilog="examples (docs/guide/gpu.md):\n"
        "  fedaug campaign status\n"
        "  fedaug campaign run --budget 540 --device cuda --out gpu_out   # on a lent GPU machine\n"
        "  fedaug campaign import gpu_out                                   # back here",
    )
    verbs = campaign.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser(
        "run",
        help="run what the budget holds; archives, log and summary into --out",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug campaign run --budget 525 --device cuda --out gpu_out   # as scripts/gpu_campaign.sh\n"
        "  fedaug campaign run --budget 525 --out gpu_out --dry-run       # what it would run",
    )
    _common(run)
    run.add_argument("--budget", type=flag_number(0, low_open=True), required=True, help="seconds to spend")
    run.add_argument("--device", default="cuda", help="engine.device of every run (default cuda)")
    run.add_argument(
        "--out", required=True, help="folder for the archives, campaign.log, campaign_summary.json"
    )
    run.add_argument(
        "--data-dir", help="folder holding the data folders grids need (default $FEDAUG_DATA or data)"
    )
    run.add_argument(
        "--workers", type=flag_int(1), help="runs at once (default: the campaign file's for the device kind)"
    )
    run.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="for every run"
    )
    run.add_argument(
        "--max-archives",
        type=flag_int(1, MAX_STUDIES),
        default=MAX_STUDIES,
        help=f"studies (one archive each) at most (default {MAX_STUDIES}: with the log and the summary, "
        "the 8 files a lent machine returns; fewer when other files share --out)",
    )
    run.add_argument(
        "--dry-run", action="store_true", help="list the runs the budget takes (longest first); run nothing"
    )
    run.add_argument(
        "--advance",
        action="store_true",
        help="also start the next run that cannot finish in the budget, last: it stops at the budget and "
        "resumes next time (moves a run longer than any one session on; it is archived once finished). "
        "Only where --runs-dir outlives the command: on a machine that starts fresh each session, the "
        "cut run's rounds are lost with it",
    )
    run.add_argument(
        "--choose-once",
        action="store_true",
        help="run only the runs chosen at the start (the list --dry-run prints), also when they end "
        "sooner than estimated (default: a free worker takes the next runs that fit the time left)",
    )
    run.set_defaults(func=cmd_campaign_run)
    imp = verbs.add_parser(
        "import",
        help="unpack a run's archives into studies/, rebuild their reports",
        formatter_class=raw,
        epilog="example:\n  fedaug campaign import gpu_out   # the --out folder of campaign run",
    )
    _common(imp, only=False)
    imp.add_argument("folder", help="the --out folder of fedaug campaign run")
    imp.set_defaults(func=cmd_campaign_import)
    status = verbs.add_parser(
        "status",
        help="per grid: runs archived / total and the time left",
        description="Per grid: runs archived / total; spent: the core-hours (GPU: device-hours) the archived "
        "runs' logged rounds took on this device kind, as measured on the hosts that ran them; core-h: the "
        "estimate for the runs left, one at a time; and the minutes they take, --workers at once.",
        formatter_class=raw,
        epilog="examples:\n  fedaug campaign status\n"
        "  fedaug campaign status --device cpu                   # the CPU grids, core-hours left\n"
        "  fedaug campaign status --kind cpu --only flea_fsdd_baselines",
    )
    _common(status)
    status.add_argument(
        "--kind",
        "--device",
        dest="kind",
        default="cuda",
        choices=("cuda", "cpu"),
        help="device kind the time left is for, and whose grids (the file's order:) are counted "
        "(default cuda)",
    )
    status.add_argument("--workers", type=flag_int(1), help="runs at once (default: the campaign file's)")
    status.set_defaults(func=cmd_campaign_status)
