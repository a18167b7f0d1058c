"""The ``fedaug`` command end to end: bad inputs give one line and exit 2; SIGKILL + rerun == no kill."""

from __future__ import annotations

import gzip
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fedaug.cli.main import main
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")


def _error_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err, "expected an error message"
    return err[-1]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("method=nosuch", "unknown method 'nosuch'; valid choices: ccvr, centralized, fedadagrad, fedadam"),
        ("data=nosuch", "unknown dataset 'nosuch'; valid choices:"),
        ("model=nosuch", "unknown model 'nosuch'; valid choices:"),
        ("train.roundz=3", "unknown config key 'train.roundz'; valid keys:"),
        ("train.rounds=many", "train.rounds must be of type int, got 'many'"),
        ("partition.alpha=-1", "alpha"),
        ("partition.num_clients=100000", "100000"),
    ],
)
def test_bad_inputs_give_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, override: str, expected: str
) -> None:
    line = _error_of(capsys, ["run", SMOKE, "--out-dir", str(tmp_path), "--set", override])
    assert line.startswith("fedaug: error: ")
    assert expected in line


def test_quantity_larger_than_number_of_classes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    line = _error_of(
        capsys,
        [
            "run",
            SMOKE,
            "--out-dir",
            str(tmp_path),
            "--set",
            "partition=quantity",
            "--set",
            "partition.classes_per_client=11",
        ],
    )
    assert "11" in line


def test_malformed_yaml(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {rounds: 3\n")
    assert "malformed YAML" in _error_of(capsys, ["run", str(bad)])


def test_missing_and_corrupt_dataset_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, shared_data: Path
) -> None:
    args = ["run", SMOKE, "--out-dir", str(tmp_path / "runs"), "--set", "data=mnist", "--set", "model=mlp"]
    line = _error_of(capsys, [*args, "--data-dir", str(tmp_path / "empty")])
    assert "mnist" in line
    corrupt = tmp_path / "corrupt" / "mnist"
    corrupt.mkdir(parents=True)
    for path in (shared_data / "mnist").iterdir():
        shutil.copy(path, corrupt / path.name)
    with gzip.open(corrupt / "t10k-labels-idx1-ubyte.gz", "wb") as handle:
        handle.write(b"\x00\x00\x08\x01garbage")
    line = _error_of(capsys, [*args, "--data-dir", str(tmp_path / "corrupt")])
    assert "t10k-labels" in line


def test_list_shows_every_registry(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for kind in ("methods: ", "models: ", "datasets: ", "partitioners: "):
        assert kind in out
    assert "flea" in out and "uci_har" in out and "harnet" in out and "dirichlet" in out


def _run_cmd(out_dir: Path, rounds: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fedaug",
        "run",
        SMOKE,
        "--out-dir",
        str(out_dir),
        "--set",
        f"train.rounds={rounds}",
        "--set",
        "train.local_epochs=40",
        "--set",
        "engine.num_threads=1",
    ]


def test_sigkill_then_rerun_matches_uninterrupted_run(tmp_path: Path) -> None:
    env = {**os.environ, "FEDAUG_CACHE": str(tmp_path / "cache")}
    subprocess.run(_run_cmd(tmp_path / "full", 6), check=True, env=env, capture_output=True)
    proc = subprocess.Popen(_run_cmd(tmp_path / "cut", 6), env=env, stderr=subprocess.DEVNULL)
    metrics = tmp_path / "cut" / "smoke"
    deadline = time.time() + 120
    while time.time() < deadline:  # kill once round 3 has been written, in the middle of the run
        found = list(metrics.rglob("metrics.jsonl"))
        if found and len(found[0].read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    (cut_dir,) = {p.parent for p in metrics.rglob("metrics.jsonl")}
    assert not (cut_dir / "summary.json").exists(), "the run finished before it could be killed"
    subprocess.run(_run_cmd(tmp_path / "cut", 6), check=True, env=env, capture_output=True)
    (full_dir,) = {p.parent for p in (tmp_path / "full").rglob("metrics.jsonl")}
    for name in ("metrics.jsonl", "summary.json"):
        assert (cut_dir / name).read_text() == (full_dir / name).read_text()


def test_compare_runs_each_method_and_prints_them_side_by_side(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = [
        "run",
        SMOKE,
        "--out-dir",
        str(tmp_path),
        "--set",
        "train.rounds=2",
        "--set",
        "compare=[fedavg, flea]",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert _table_methods(out) == ["fedavg", "flea"]
    setting = tmp_path / "smoke" / "train.rounds=2" / "synthetic-dirichlet0.5_2-K6"  # 2 rounds, not smoke's 3
    assert (setting / "flea" / "seed0" / "summary.json").exists()
    curves = setting / "curves_seed0_fedavg_flea.png"  # the job's curves, before the table
    assert f"curves: {curves}\n\nsynthetic Dir(0.5, 2) K=6, mlp, seed 0:\nmethod " in out
    assert "last-2 %" in out  # 2 rounds: the mean of the 2 it has
    assert curves.read_bytes().startswith(b"\x89PNG")
    assert main([*argv, "--method", "flea"]) == 0  # finished: skipped, and only flea is listed
    out = capsys.readouterr().out
    assert _table_methods(out) == ["flea"]
    assert f"curves: {setting / 'curves_seed0_flea.png'}" in out


def test_the_jobs_curves_are_a_hint_without_matplotlib_and_a_warning_if_they_fail(
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from fedaug.results import plots

    argv = ["run", SMOKE, "--out-dir", str(tmp_path), "--set", "train.rounds=1"]
    caplog.set_level(logging.INFO, logger="fedaug")
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
        assert main(argv) == 0
    assert "curves:" not in capsys.readouterr().out
    assert "pip install 'fedaug[plots]' to get these curves as a figure" in caplog.text
    assert not list(tmp_path.rglob("*.png"))

    def broken(*_: object) -> None:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(plots, "plot_job_curves", broken)
    assert main(argv) == 0  # the run is done and saved: a failed figure does not fail the command
    out = capsys.readouterr().out
    assert "curves:" not in out and "method " in out
    assert "could not plot the curves (RuntimeError: no fonts); the results are saved" in caplog.text


def _table_methods(out: str) -> list[str]:
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("method "))
    return [line.split()[0] for line in lines[header + 1 :]]


def test_no_config_means_the_default_preset_file() -> None:
    from fedaug.cli.common import load_config
    from fedaug.cli.main import build_parser

    config = load_config(build_parser().parse_args(["run"]))
    assert config.compare == ["fedavg", "flea"]
    assert config.data.options == {"channels": 3}
    assert (config.partition.name, config.partition.num_clients) == ("quantity", 75)
    assert load_config(build_parser().parse_args(["run", "--method", "flea"])).compare == []


def test_set_method_options_apply_to_the_method_chosen_with_method_flag() -> None:
    from fedaug.cli.common import load_config
    from fedaug.cli.main import build_parser

    args = build_parser().parse_args(["run", "--method", "flea", "--set", "method.decor_weight=0"])
    config = load_config(args)
    assert (config.method.name, config.method.options, config.compare) == ("flea", {"decor_weight": 0}, [])
