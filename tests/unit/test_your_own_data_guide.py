"""docs/guide/your-own-data.md runs as printed: its files (a code block whose first line is ``# NAME``) are
written to a fresh folder and its commands run there in order, on less data, fewer rounds and one worker so
that the test takes seconds; the report compares FedAvg and FLea over three seeds."""

from __future__ import annotations

import re
import runpy
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from fedaug.cli.main import main
from tests.conftest import REPO_ROOT
from tests.plugin_fixtures import isolated_plugins

GUIDE = REPO_ROOT / "docs" / "guide" / "your-own-data.md"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", flags=re.DOTALL)
SMALLER = {  # the guide's sizes -> the test's
    "n, classes, steps = 3000, 6, 32": "n, classes, steps = 600, 6, 32",
    "rounds: 40": "rounds: 2",
    "--workers 2": "--workers 1",
}


@pytest.fixture(autouse=True)
def _plugins_undone() -> Iterator[None]:
    """What a test's plugins register is gone after it (other tests list the registries)."""
    with isolated_plugins():
        yield


def _steps() -> list[tuple[str, str]]:
    """The guide's files (``("file", text)``) and commands (``("command", line)``), in order."""
    text = GUIDE.read_text(encoding="utf-8")
    for guide_value, test_value in SMALLER.items():
        assert guide_value in text, f"the guide no longer says {guide_value!r}: update SMALLER"
        text = text.replace(guide_value, test_value)
    steps = []
    for language, body in BLOCK.findall(text):
        if language == "bash":
            steps += [("command", line) for line in body.splitlines() if line.strip()]
        elif body.startswith("# "):
            steps.append(("file", body))
    return steps


def test_the_guide_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    commands = []
    for kind, text in _steps():
        if kind == "file":
            name, _, body = text.partition("\n")
            Path(name.removeprefix("# ").strip()).write_text(body)
            continue
        argv = shlex.split(text)
        commands.append(argv[0])
        if argv[0] == "python":
            runpy.run_path(argv[1], run_name="__main__")
        else:
            threads = (
                ["--set", "engine.num_threads=1"] if argv[1] == "run" else []
            )  # as sweeps do; no result change
            assert argv[0] == "fedaug" and main([*argv[1:], *threads]) == 0, text
    assert commands == ["python", "fedaug", "fedaug", "fedaug", "fedaug"]
    out = capsys.readouterr().out
    assert "clients: 10, samples: 480" in out  # the natural split by subject
    assert "6 runs: 4 finished now, 2 already finished, 0 failed" in out
    assert "# 6 runs from `runs/wearables`: 2 methods x 1 setting, rounds 2" in out
    assert re.search(r"\| flea \| .*\(n=3\)", out) and re.search(r"\| fedavg \| .*\(n=3\)", out)
    for method in ("fedavg", "flea"):
        saved = (
            tmp_path / "runs/wearables/arrays-quantity2-K30" / method / "seed2" / "config.yaml"
        ).read_text()
        assert "plugins:\n- ./my_model.py\n" in saved
