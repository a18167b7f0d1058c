"""Packaged presets (``fedaug.config.presets``): named from any directory, shipped in the wheel, listed by
``fedaug list presets``; a file that exists always wins over a preset of the same name."""

from __future__ import annotations

import fnmatch
import logging
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fedaug.cli.main import main
from fedaug.config import presets
from fedaug.config.load import load_config
from fedaug.errors import ConfigError
from fedaug.runtime.log_once import forget
from fedaug.sweeps.sweep import expand_sweep
from tests.conftest import REPO_ROOT

ROOT = presets.PRESET_ROOT


def test_the_checkouts_configs_folder_is_the_packaged_one() -> None:
    assert (REPO_ROOT / "configs").resolve() == ROOT
    assert ROOT.parent == Path(presets.__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("name", "relative"),
    [
        ("smoke", "smoke.yaml"),
        ("smoke.yaml", "smoke.yaml"),
        ("smoke.yml", "smoke.yaml"),
        ("configs/smoke.yaml", "smoke.yaml"),
        ("./configs/default.yaml", "default.yaml"),
        ("flea_table1_har", "experiments/flea_table1_har.yaml"),
        ("experiments/flea_table1_har", "experiments/flea_table1_har.yaml"),
        ("configs/experiments/flea_table1_har.yaml", "experiments/flea_table1_har.yaml"),
        ("methods/fedprox", "methods/fedprox.yaml"),
        ("configs\\methods\\fedprox.yaml", "methods/fedprox.yaml"),
    ],
)
def test_find_by_name_or_checkout_path(name: str, relative: str) -> None:
    assert presets.find(name) == ROOT / relative


@pytest.mark.parametrize(
    "name",
    ["fedprox", "nope", "", "methods", "../pyproject", "experiments/../smoke", "/smoke", "configs/nope.yaml"],
)
def test_find_refuses_what_is_not_a_preset(name: str) -> None:
    # method presets only by methods/NAME: a bare method name would be the method alone over the built-in
    # defaults, which --method NAME does better
    assert presets.find(name) is None


def test_locate_reads_an_existing_file_as_given_and_a_name_from_anywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "smoke.yaml").write_text("seed: 3\n")
    assert presets.locate("smoke.yaml") == Path("smoke.yaml")
    forget()  # the line is logged once a process (an earlier test may have located this preset)
    with caplog.at_level(logging.INFO, logger="fedaug"):
        assert presets.locate("smoke") == ROOT / "smoke.yaml"
        assert presets.locate("configs/smoke.yaml") == ROOT / "smoke.yaml"
    assert f"preset smoke: {ROOT / 'smoke.yaml'}" in caplog.text
    (tmp_path / "default").mkdir()  # a folder of that name is no config file: the preset is meant
    assert presets.locate("default") == ROOT / "default.yaml"
    (tmp_path / "folder").mkdir()
    assert presets.locate("folder") == Path("folder")  # read_yaml then says it is a folder


def test_an_unknown_config_names_itself_and_the_presets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as error:
        presets.locate("configs/smokee.yaml")
    message = str(error.value)
    assert message.startswith("config file 'configs/smokee.yaml' does not exist, and no preset has that name")
    assert "default, fedaugmix_mnist" in message and "flea_table1_har" in message
    assert message.endswith("methods/NAME (fedaug list presets)")


def test_every_preset_is_listed_once_and_loads() -> None:
    listed = presets.presets()
    files = sorted(ROOT.rglob("*.yaml"))
    assert sorted(p.path for p in listed) == files
    assert len({p.name for p in listed}) == len(listed)
    for preset in listed:
        assert presets.find(preset.name) == preset.path
        assert preset.summary, f"{preset.path} needs a header comment saying what it sets up"
        if presets.has_grid(preset.path):
            assert expand_sweep(preset.path)
        else:
            load_config([preset.path])


def test_the_wheel_ships_every_data_file_of_the_package() -> None:
    # presets, the papers' numbers, the embedded UCI-HAR: every file under src/fedaug that is not Python
    patterns = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]["fedaug"]
    package = ROOT.parent
    data = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc")
    ]
    assert "configs/smoke.yaml" in data and "results/published_numbers.yaml" in data
    for relative in data:
        # setuptools globs: * does not cross a folder
        assert any(fnmatch.fnmatch(relative, p) and relative.count("/") == p.count("/") for p in patterns), (
            relative
        )


def test_summaries_are_first_sentences_not_cut_at_abbreviations(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(
        "# Study of Sec. 4 and Eq. 6 (Zhao et al. 2018), e.g. this. Second sentence.\n# more\nseed: 1\n"
    )
    assert presets._summary(path) == "Study of Sec. 4 and Eq. 6 (Zhao et al. 2018), e.g. this."
    path.write_text("# " + "word " * 40 + "\nseed: 1\n")
    summary = presets._summary(path, width=50)
    assert len(summary) <= 50 and summary.endswith(" ...")
    path.write_text("seed: 1\n")
    assert presets._summary(path) == ""


def test_list_presets_and_one_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "presets"]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in out[1:]}
    assert rows["smoke"].split()[1] == "run"
    assert " sweep (360 runs) " in rows["flea_table1_har"]  # 5 seeds x 2 K x 3 splits x 12 methods
    assert " method " in rows["methods/fedprox"]
    assert main(["list", "preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"# {ROOT / 'smoke.yaml'}\n") and "name: smoke" in out


def test_list_unknown_preset_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "preset", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("fedaug: error: no preset is named 'nope'; presets: default,") and "\n" not in err


def test_run_and_sweep_by_name_from_another_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["run", "smoke", "--set", "train.rounds=1", "--set", "engine.num_threads=1"]) == 0
    assert list((tmp_path / "runs").rglob("summary.json"))
    assert main(["sweep", "smoke", "--dry-run", "--set", "train.rounds=1"]) == 0


def test_running_a_sweep_preset_says_to_sweep_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "flea_table1_har"]) == 2
    assert "(a sweep file has a grid: run it with fedaug sweep)" in capsys.readouterr().err


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    # `fedaug list presets | head -1`: the reader is gone (here before fedaug writes, so it always happens)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        listing = subprocess.run(
            [sys.executable, "-m", "fedaug", "list", "presets"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)
    assert (listing.returncode, listing.stderr.decode()) == (1, "")
