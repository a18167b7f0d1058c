"""Run-dir files fuzzed with hypothesis: random truncations, byte flips, line edits and deletions in the
checkpoint, metrics, timings, summary, config, identity and env record of a finished smoke run and of one
killed after round 2. Every outcome of running the same command again is one of:

* a refusal: a :class:`~fedaug.errors.FedaugError` (``fedaug run``: one line, exit 2) naming a file of the
  run dir (or the run dir);
* a finished run whose ``metrics.jsonl`` and ``summary.json`` are byte-identical / equal to the uninterrupted
  run's (a documented repair, or a change in a file that no result depends on, such as a timing).

Never a finished run with other numbers. Settings: ``max_examples`` 12 per state in the default suite (1-2 s
an example on a busy 2-core machine: the smoke run is made once per session), 300 under ``-m slow``.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fedaug.errors import FedaugError
from fedaug.runs.runner import run_experiment
from tests.unit import run_dirs

FILES = (
    "ckpt/latest.pt",
    "metrics.jsonl",
    "timings.jsonl",
    "summary.json",
    "config.yaml",
    "identity.json",
    "env.json",
)


@dataclass(frozen=True)
class Damage:
    """One change to one file: ``kind`` with its random parameters."""

    file: str
    kind: str
    at: float  # where, as a fraction of the file (or of its lines)
    size: int  # how many bytes flipped
    seed: int

    def apply(self, run_dir: Path) -> None:
        path = run_dir / self.file
        if not path.exists():
            return
        data = path.read_bytes()
        lines = data.splitlines(keepends=True)
        index = min(int(self.at * len(data)), max(len(data) - 1, 0))
        line = min(int(self.at * len(lines)), max(len(lines) - 1, 0))
        if self.kind == "delete":
            path.unlink()
        elif self.kind == "truncate":
            path.write_bytes(data[:index])
        elif self.kind == "flip" and data:
            end = min(index + self.size, len(data))
            flipped = bytes(b ^ (1 + (self.seed + i) % 255) for i, b in enumerate(data[index:end]))
            path.write_bytes(data[:index] + flipped + data[end:])
        elif self.kind == "drop-line" and lines:
            path.write_bytes(b"".join(lines[:line] + lines[line + 1 :]))
        elif self.kind == "repeat-line" and lines:
            path.write_bytes(b"".join(lines[: line + 1] + lines[line:]))
        elif self.kind == "swap-lines" and len(lines) > 1:
            other = (line + 1) % len(lines)
            lines[line], lines[other] = lines[other], lines[line]
            path.write_bytes(b"".join(lines))
        elif self.kind == "edit-digit":
            digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39]  # ASCII digits
            if digits:
                i = digits[min(int(self.at * len(digits)), len(digits) - 1)]
                new = str((int(chr(data[i])) + 1 + self.seed % 8) % 10).encode()
                path.write_bytes(data[:i] + new + data[i + 1 :])


DAMAGE = st.builds(
    Damage,
    file=st.sampled_from(FILES),
    kind=st.sampled_from(
        ["delete", "truncate", "flip", "drop-line", "repeat-line", "swap-lines", "edit-digit"]
    ),
    at=st.floats(0, 1),
    size=st.integers(1, 64),
    seed=st.integers(0, 1000),
)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return run_dirs.finished(tmp_path_factory.getbasetemp() / "verified_session")


def outcome_is_clean(finished: Path, damages: list[Damage], after_round: int | None) -> None:
    """Runs the same run again on a damaged copy (``run_experiment``: what ``fedaug run`` calls, without its
    figure; ``fedaug run`` prints a FedaugError as its one line, exit 2)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        run_dir = run_dirs.copy_run(finished, out, after_round=after_round)
        for damage in damages:
            damage.apply(run_dir)
        try:
            run_experiment(run_dirs.config(out))
        except FedaugError as error:
            message = " ".join(str(error).splitlines())
            named = [str(run_dir / name) for name in (*FILES, "")]
            assert any(name in message for name in named), (damages, message)
            assert len(message) < 1000, (damages, message)
            return
        assert run_dirs.result_values(run_dir) == run_dirs.result_values(finished), damages


FUZZ = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLOW = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(st.lists(DAMAGE, min_size=1, max_size=2))
def test_a_damaged_killed_run_is_refused_or_ends_identical(finished: Path, damages: list[Damage]) -> None:
    outcome_is_clean(finished, damages, after_round=2)


@FUZZ
@given(st.lists(DAMAGE, min_size=1, max_size=2))
# found by the fuzz: a 17th significant digit edited to another spelling of the same float (values unchanged)
@example([Damage(file="metrics.jsonl", kind="edit-digit", at=0.38671875, size=1, seed=0)])
def test_a_damaged_finished_run_is_refused_or_skipped_unchanged(
    finished: Path, damages: list[Damage]
) -> None:
    outcome_is_clean(finished, damages, after_round=None)


@pytest.mark.slow
@SLOW
@given(st.lists(DAMAGE, min_size=1, max_size=3), st.sampled_from([None, 1, 2]))
def test_damaged_run_dirs_long(finished: Path, damages: list[Damage], after_round: int | None) -> None:
    outcome_is_clean(finished, damages, after_round)
