"""``scripts/archive_finished.sh`` (sourced by the studies' finish.sh): it goes on where there is nothing to
archive yet (no folder; fedaug archive exits 2) and stops on any other failure, with a stub ``fedaug``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _finish(tmp_path: Path, status: int, *, make_dir: bool = True) -> subprocess.CompletedProcess[str]:
    """A finish script under ``set -eu`` that archives one folder, then says it went on; ``fedaug`` is a stub
    that records its arguments and exits with ``status``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "fedaug"
    stub.write_text(f'#!/usr/bin/env bash\necho "$@" >> "{tmp_path}/calls"\nexit {status}\n')
    stub.chmod(0o755)
    if make_dir:
        (tmp_path / "runs" / "study").mkdir(parents=True)
    script = f". {REPO_ROOT / 'scripts' / 'archive_finished.sh'}\nset -eu\n"
    script += 'archive_finished runs/study out/study\necho "went on"\n'
    return subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
    )


def test_archives_and_goes_on(tmp_path: Path) -> None:
    done = _finish(tmp_path, 0)
    assert done.returncode == 0 and done.stdout == "went on\n"
    assert (tmp_path / "calls").read_text() == "archive runs/study --out out/study\n"


def test_nothing_finished_yet_goes_on_with_a_line(tmp_path: Path) -> None:
    done = _finish(tmp_path, 2)
    assert done.returncode == 0 and done.stdout == "nothing finished in runs/study\nwent on\n"


def test_missing_folder_is_skipped_without_calling_fedaug(tmp_path: Path) -> None:
    done = _finish(tmp_path, 1, make_dir=False)
    assert done.returncode == 0 and done.stdout == "went on\n" and not (tmp_path / "calls").exists()


@pytest.mark.parametrize("status", [1, 3])
def test_any_other_failure_stops_the_script(tmp_path: Path, status: int) -> None:
    done = _finish(tmp_path, status)
    assert done.returncode == status and "went on" not in done.stdout
