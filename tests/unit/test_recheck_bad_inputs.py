"""``scripts/recheck_bad_inputs.py`` (issue 68's bad inputs through the real command line): how it judges a
finished command, and that its table covers every class of the issue. The script itself runs some 60
processes (minutes), so it is run by hand, not here; one cheap case runs as a real process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "scripts"))
try:
    import recheck_bad_inputs as recheck
finally:
    sys.path.remove(str(REPO_ROOT / "scripts"))

REFUSE = recheck.Case("x", "also", "refuse", "--shard", lambda work: [])
WARN = recheck.Case("w", "cache", "warn", "net.py", lambda work: [])
ERROR = "fedaug: error: --shard must be i/n with 0 <= i < n, got ''"
LOG = "06:50:25 INFO loaded synthetic: train 600"


def judged(
    case: recheck.Case, code: int | None, stderr: str, left: list[str] | None = None
) -> recheck.Outcome:
    return recheck.judge(case, recheck.Done(code, "", stderr, 1.0), left or [], None)


def test_one_error_line_after_log_lines_naming_the_value_is_a_refusal() -> None:
    result = judged(REFUSE, 2, f"{LOG}\n{ERROR}\n")
    assert (result.outcome, result.ok, result.names_value) == ("refused", True, True)


@pytest.mark.parametrize(
    ("code", "stderr", "left", "outcome"),
    [
        (2, "fedaug: error: something else\n", [], "refused"),  # does not name the bad value
        (2, f"numpy RuntimeWarning: overflow\n{ERROR}\n", [], "refused"),  # another line beside the log's
        (2, f"{ERROR}\n", ["runs/x/config.yaml"], "refused"),  # a run dir left behind
        (1, "Traceback (most recent call last):\nValueError: x\n", [], "traceback"),
        (None, LOG, [], "hang"),
        (0, LOG, [], "accepted"),
        (1, "Killed\n", [], "unclear"),
    ],
)
def test_anything_else_fails(code: int | None, stderr: str, left: list[str], outcome: str) -> None:
    result = judged(REFUSE, code, stderr, left)
    assert (result.outcome, result.ok) == (outcome, False)


def test_a_warning_naming_the_input_or_a_refusal_passes_a_warn_case() -> None:
    warning = "06:50:25 WARNING resuming r: plugin ./net.py (SHA-256 44f2c6de8b85, now eaa4e890072e) changed"
    assert judged(WARN, 0, f"{LOG}\n{warning}\n").ok
    assert not judged(WARN, 0, f"{LOG}\n06:50:25 WARNING something else\n").ok
    assert judged(WARN, 2, "fedaug: error: net.py changed\n").ok
    assert not judged(WARN, 0, LOG).ok


def test_the_table_covers_every_class_of_the_issue() -> None:
    ids = [case.id for case in recheck.CASES]
    assert len(ids) == len(set(ids)) >= 39
    assert {case.group for case in recheck.CASES} == {
        "cache", "data", "identity", "path", "traceback", "hang", "late", "also"
    }  # fmt: skip


def test_a_cheap_case_runs_through_the_command_line(tmp_path: Path) -> None:
    # Prepare, Execute: ``--shard ''`` is refused before any data is loaded (under a second of fedaug)
    case = next(c for c in recheck.CASES if c.id == "shard-empty")
    result = recheck.run_case(case, tmp_path, 120.0, None)
    # Assert
    assert result.ok and result.code == 2, result
    assert result.last_line.startswith("fedaug: error: --shard must be i/n")
