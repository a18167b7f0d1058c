"""``python -m tools.campaign run | import | status`` (also reached as ``fedaug campaign ...`` in a checkout).

The campaign is the project's own machinery, so it lives beside the package, not in it; errors are the
``fedaug`` command's one-line errors (:func:`fedaug.cli.main.run_parsed`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from fedaug.cli.common import OneLineParser, add_plugin_args
from fedaug.cli.main import run_parsed
from tools.campaign.cli import add_campaign_parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="fedaug")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging and full tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    add_campaign_parser(sub)
    add_plugin_args(parser)
    words = list(sys.argv[1:] if argv is None else argv)
    flags = [w for w in words[:1] if w in ("-v", "--verbose")]
    return run_parsed(parser.parse_args([*flags, "campaign", *words[len(flags) :]]))


if __name__ == "__main__":
    sys.exit(main())
