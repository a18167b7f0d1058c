"""``fedaug campaign ...``: the project's campaign (``python -m tools.campaign`` of a source checkout, with
the same arguments); the package itself holds only this hand-over and its help entry."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

CAMPAIGN_TOOL = Path("tools") / "campaign" / "__main__.py"
"""The campaign's command, in a source checkout: the project's own machinery, not part of the package."""


def add_campaign_stub(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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


def campaign_argv(argv: Sequence[str]) -> list[str] | None:
    """The arguments of ``fedaug [-v] campaign ARGS`` for the tool (``-v`` kept), or None for other
    commands."""
    leading = []
    for at, word in enumerate(argv):
        if word in ("-v", "--verbose"):
            leading.append(word)
            continue
        return [*leading, *argv[at + 1 :]] if word == "campaign" else None
    return None
