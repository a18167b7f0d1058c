"""Reading a campaign file (``tools.campaign.spec.read_campaign``): a valid file reads back as written, and
whatever a file holds, reading it either works or fails with one ConfigError naming the file (hypothesis
mutates a valid file: a key dropped, a value replaced by any YAML value)."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.errors import ConfigError
from tests.helpers import mutated, tree_paths
from tools.campaign.spec import grid_points, read_campaign

VALID: dict[str, Any] = {
    "studies": ".",
    "workers": {"cuda": 16, "cpu": 0},
    "grids": [
        {
            "name": "har",
            "preset": "smoke",
            "study": "har_study",
            "set": ["engine.num_threads=1"],
            "grid": {"seed": [0, 1], "method": ["fedavg", "flea"]},
            "data": ["cifar10_jpeg_lossy"],
            "cost_s": {"cuda": 20, "cpu": {"default": 900, "flea": 1400}},
            "report": {"runs": ["runs"], "baseline": "fedavg", "out": ".", "plots": False},
        }
    ],
}
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner, max_size=2),
    max_leaves=4,
)


def test_a_valid_file_reads_back_as_written(tmp_path: Path) -> None:
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(VALID))
    campaign = read_campaign(path)
    (grid,) = campaign.grids
    assert (campaign.studies, dict(campaign.workers)) == (tmp_path / ".", {"cuda": 16, "cpu": 0})
    assert (grid.name, grid.preset, grid.study, grid.overrides) == (
        "har",
        "smoke",
        "har_study",
        ("engine.num_threads=1",),
    )
    assert grid.table_cost("cpu", "flea") == 1400.0 and grid.table_cost("cpu", "fedavg") == 900.0
    assert (
        grid.table_cost("cuda", "flea") == 20.0 and grid.report.baseline == "fedavg" and not grid.report.plots
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data(), drop=st.booleans())
def test_a_mutated_file_reads_or_is_refused_naming_it(data: st.DataObject, drop: bool) -> None:
    path_in = data.draw(st.sampled_from(tree_paths(VALID)), label="path")
    value = None if drop else data.draw(VALUES, label="value")
    changed = mutated(VALID, path_in, value, drop)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.yaml"
        path.write_text(yaml.safe_dump(changed))
        try:
            campaign = read_campaign(path)
        except ConfigError as error:
            assert str(path) in str(error) and "\n" not in str(error)
        else:  # what was read is what the planner uses
            for grid in campaign.grids:
                assert all(
                    grid.table_cost(kind, "flea") is None or grid.table_cost(kind, "flea") >= 0
                    for kind in ("cuda", "cpu")
                )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"workers": "x"}, "workers must map cuda / cpu to counts >= 0, got 'x'"),
        ({"workers": {"cuda": True}}, "workers must map cuda / cpu to counts >= 0"),
        ({"studies": ["a"]}, "studies must be a folder, got ['a']"),
        ({"grid.cost_s": {"cuda": "x"}}, ".cost_s must map cuda / cpu to seconds"),
        ({"grid.cost_s": {"cpu": {"flea": -1}}}, ".cost_s must map cuda / cpu to seconds"),
        ({"grid.report": {"baseline": [1]}}, ".report.baseline must be a string, got [1]"),
        ({"grid.grid": {"seed": 3}}, ".grid must map config keys to non-empty lists, got {'seed': 3}"),
        ({"grid.study": "../elsewhere"}, ".study '../elsewhere' must be a folder inside the studies folder"),
        ({"grid.runs_with": "har"}, "grid har: runs_with must name another grid, got 'har'"),
        ({"grid.runs_with": "other"}, "grid har: runs_with must name another grid, got 'other'"),
        ({"grid.runs_with": "../x"}, "runs_with of"),
        ({"grid.axes_from": "../x.json"}, ".axes_from must be a file inside the campaign file's folder"),
        ({"grid.axes_from": ["x"]}, ".axes_from must be a file inside the campaign file's folder"),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    raw = copy.deepcopy(VALID)
    for key, value in change.items():
        if key.startswith("grid."):
            raw["grids"][0][key.split(".", 1)[1]] = value
        else:
            raw[key] = value
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        read_campaign(path)
    assert message in str(error.value) and str(path) in str(error.value)


@pytest.mark.parametrize("name", ["../escape", "a/b", "/tmp/escape", "..", ".", "a\\b", "x/../../y"])
def test_a_grid_name_that_is_a_path_is_refused(tmp_path: Path, name: str) -> None:
    raw = copy.deepcopy(VALID)
    raw["grids"][0]["name"] = name
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError) as error:
        read_campaign(path)
    message = str(error.value)
    assert message.startswith(f"grids[0].name of {path} must be a name without path characters")
    assert message.endswith(f"got {name!r}") and "\n" not in message


@settings(max_examples=60, deadline=None)
@given(name=st.text(min_size=1, max_size=12))
def test_an_accepted_grid_name_is_one_folder_inside_the_runs_dir(name: str) -> None:
    """Whatever the name, a grid's run dirs (``runs_dir/<name>``) stay one level inside ``runs_dir``."""
    raw = copy.deepcopy(VALID)
    raw["grids"][0]["name"] = name
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "campaign.yaml"
        path.write_text(yaml.safe_dump(raw))
        try:
            (grid,) = read_campaign(path).grids
        except ConfigError as error:
            assert str(path) in str(error) and "\n" not in str(error)
        else:
            runs = Path(folder) / "runs"
            assert (runs / grid.name).resolve().parent == runs.resolve()


def test_axes_from_a_file_fill_the_grid_once_it_chooses_values(tmp_path: Path) -> None:
    """A grid whose method axis another grid's results choose: no points while nothing is chosen, then the
    chosen entries beside the grid's own axes; a file that is no mapping of lists is refused by name."""
    raw = copy.deepcopy(VALID)
    raw["grids"][0]["axes_from"] = "har_study/chosen.json"
    raw["grids"][0]["grid"] = {"seed": [1, 2]}
    path = tmp_path / "campaign.yaml"
    path.write_text(yaml.safe_dump(raw))
    (grid,) = read_campaign(path).grids
    chosen = tmp_path / "har_study" / "chosen.json"
    assert grid.axes_from == chosen
    assert grid_points(grid, tmp_path / "runs") == []  # no file yet
    chosen.parent.mkdir()
    chosen.write_text('{"method": []}')
    assert grid_points(grid, tmp_path / "runs") == []  # nothing chosen yet
    chosen.write_text('{"method": [{"name": "fedprox", "proximal_mu": 0.1}]}')
    points = grid_points(grid, tmp_path / "runs")
    assert sorted(p.config.seed for p in points) == [1, 2]
    assert {(p.config.method.name, p.config.method.options["proximal_mu"]) for p in points} == {
        ("fedprox", 0.1)
    }
    for bad in ('["fedprox"]', '{"method": "fedprox"}', "not json"):
        chosen.write_text(bad)
        with pytest.raises(ConfigError, match=f"axes_from {chosen}"):
            grid_points(grid, tmp_path / "runs")
