"""``fedaug.script``: the Python entry points give what ``fedaug run`` gives, in the same run dirs, and the
example of docs/guide/python.md runs as printed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fedaug.cli.common import load_config as cli_config
from fedaug.cli.main import build_parser, main
from fedaug.errors import ConfigError
from fedaug.script import RunResult, load_config, run
from tests.conftest import REPO_ROOT

SETS = {"compare": ["fedavg", "flea"], "train.rounds": 2, "engine.num_threads": 1}


def test_load_config_is_the_command_lines_config(tmp_path: Path) -> None:
    argv = ["run", "smoke", "--set", "compare=[fedavg, flea]", "--set", "train.rounds=2"]
    argv += ["--set", "engine.num_threads=1", "--set", f"out_dir={tmp_path}"]
    expected = cli_config(build_parser().parse_args(argv))
    assert load_config("smoke", overrides={**SETS, "out_dir": str(tmp_path)}) == expected
    as_strings = [*(f"{k}={json.dumps(v)}" for k, v in SETS.items()), f"out_dir={tmp_path}"]
    assert load_config("smoke", overrides=as_strings) == expected
    assert expected.name == "smoke/train.rounds=2"  # a shortened run gets a folder of its own, as on the CLI
    nested = load_config("smoke", overrides={"partition": {"name": "quantity", "classes_per_client": 3}})
    assert (nested.partition.name, nested.partition.options) == ("quantity", {"classes_per_client": 3})
    assert load_config().compare == ["fedavg", "flea"]  # no preset: the default preset, the main job
    assert load_config(smoke=True).name == "default-smoke"


def test_bad_input_raises_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.roundz'"):
        load_config("smoke", overrides={"train.roundz": 2})
    with pytest.raises(ConfigError, match="no preset has that name"):
        load_config("smokey")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: run("smoke"), r"run takes the ExperimentConfig of load_config, got str 'smoke'"),
        (lambda: load_config(5), r"load_config takes preset names or paths .* got presets \(5,\)"),
        (lambda: load_config("smoke", overrides="train.rounds=3"), r"overrides 'train.rounds=3'"),
        (lambda: load_config("smoke", overrides=5), r"and overrides 5$"),
    ],
    ids=["run-a-name", "preset-an-int", "overrides-one-string", "overrides-an-int"],
)
def test_arguments_of_the_wrong_type_say_what_is_expected(call, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call()


def test_run_gives_the_command_lines_results_and_reads_finished_runs_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = run(load_config("smoke", overrides={**SETS, "out_dir": str(tmp_path / "py")}))
    assert [r.method for r in results] == ["fedavg", "flea"]
    for result in results:
        assert isinstance(result, RunResult)
        rounds = result.metrics()
        assert [r["round"] for r in rounds] == [1, 2]
        assert result.summary["best_acc"] == max(r["test/acc"] for r in rounds)
        assert json.loads((result.run_dir / "summary.json").read_text()) == result.summary
    # the command line, in another folder: the same numbers
    argv = ["run", "smoke", "--out-dir", str(tmp_path / "cli")]
    argv += [item for k, v in SETS.items() for item in ("--set", f"{k}={json.dumps(v)}")]
    assert main(argv) == 0
    for result in results:
        cli_dir = tmp_path / "cli" / result.run_dir.relative_to(tmp_path / "py")
        assert (cli_dir / "metrics.jsonl").read_text() == (result.run_dir / "metrics.jsonl").read_text()
    # run again: read back, nothing trained or rewritten
    stamps = {p: p.stat().st_mtime_ns for r in results for p in r.run_dir.iterdir() if p.is_file()}
    again = run(load_config("smoke", overrides={**SETS, "out_dir": str(tmp_path / "py")}))
    assert [r.summary for r in again] == [r.summary for r in results]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps


def test_the_guides_example_runs_as_printed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (REPO_ROOT / "docs" / "guide" / "python.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    monkeypatch.chdir(tmp_path)
    exec(compile(example, "docs/guide/python.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in out] == ["fedavg", "flea"]
    assert all(", 5 rounds, in runs/smoke/train.rounds=5/" in line for line in out)
