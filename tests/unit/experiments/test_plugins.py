"""Plugins (fedaug.plugins): a user's dataset and model, registered outside fedaug, run through
``fedaug run``, ``fedaug sweep --workers 2`` (spawned worker processes import the plugin again) and
``fedaug flower simulate`` (Ray's node processes too); a broken plugin is one line and exit 2 before any
run dir is written; an empty ``plugins`` list leaves every run's identity as it was."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.cli.common import OneLineParser
from fedaug.cli.main import build_parser, main
from fedaug.config.identity import result_config, run_dir_for
from fedaug.config.load import config_to_dict, load_config
from fedaug.plugins import PluginError, import_plugins
from fedaug.runs.resolve import load_data_and_partition
from fedaug.runs.runner import run_experiment
from tests.conftest import REPO_ROOT, SMOKE
from tests.plugin_fixtures import isolated_plugins

PLUGIN = REPO_ROOT / "tests" / "plugin_fixtures" / "tiny_plugin.py"
USE_PLUGIN = ["--set", "data=plugin_blobs", "--set", "model=plugin_net", "--set", "engine.num_threads=1"]
SETTING = "plugin_blobs-dirichlet0.5_2-K6"


@pytest.fixture(autouse=True)
def _plugins_undone() -> Iterator[None]:
    """What a test's plugins register is gone after it (other tests list the registries)."""
    with isolated_plugins():
        yield


def _summary(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "summary.json").read_text())


def test_run_trains_a_plugin_dataset_and_model_and_records_the_plugin(tmp_path: Path) -> None:
    # Prepare / Execute: FedAvg and FLea (which needs the model's encoder/head split) for 2 rounds
    argv = ["run", str(SMOKE), "--plugin", str(PLUGIN), *USE_PLUGIN, "--set", "train.rounds=2"]
    code = main([*argv, "--set", "compare=[fedavg, flea]", "--out-dir", str(tmp_path)])
    # Assert
    assert code == 0
    for method in ("fedavg", "flea"):
        run_dir = tmp_path / "smoke" / "train.rounds=2" / SETTING / method / "seed0"
        assert _summary(run_dir)["rounds"] == 2
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        assert saved["plugins"] == [str(PLUGIN)]
        assert (saved["data"]["name"], saved["model"]["name"]) == ("plugin_blobs", "plugin_net")
    # a new process (nothing registered) runs FedAvg again from its config.yaml: the plugin is imported again
    run_dir = tmp_path / "smoke" / "train.rounds=2" / SETTING / "fedavg" / "seed0"
    first = (run_dir / "metrics.jsonl").read_text()
    again = [sys.executable, "-m", "fedaug", "run", str(run_dir / "config.yaml"), "--fresh"]
    done = subprocess.run(
        again, capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ), timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert [
        json.loads(line)["test/acc"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ] == [json.loads(line)["test/acc"] for line in first.splitlines()]


def test_sweep_workers_import_the_plugin_recorded_in_the_config(tmp_path: Path) -> None:
    # Prepare: the plugin named in the sweep file only; two spawned workers, two seeds
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"extends: {SMOKE}\nname: plug\nplugins: [{PLUGIN}]\ndata: {{name: plugin_blobs}}\n"
        "model: {name: plugin_net}\ntrain: {rounds: 2}\nengine: {num_threads: 1}\ngrid:\n  seed: [0, 1]\n"
    )
    command = [sys.executable, "-m", "fedaug", "sweep", str(sweep), "--workers", "2", "--device", "cpu",
               "--out-dir", str(tmp_path / "runs")]  # fmt: skip
    # Execute
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ), timeout=300)
    # Assert
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 runs: 2 finished now, 0 already finished, 0 failed" in done.stdout
    for seed in (0, 1):
        assert _summary(tmp_path / "runs" / "plug" / SETTING / "fedavg" / f"seed{seed}")["rounds"] == 2


@pytest.mark.slow  # Ray starts: about 30 s on a loaded 2-core machine
def test_flower_simulation_nodes_import_the_plugin(tmp_path: Path) -> None:
    pytest.importorskip("flwr")
    pytest.importorskip("ray")
    # Prepare / Execute: Flower's Ray backend runs each ClientApp in a process of its own
    argv = ["flower", "simulate", str(SMOKE), "--plugin", str(PLUGIN), *USE_PLUGIN, "--num-cpus", "1"]
    code = main(
        [*argv, "--set", "train.rounds=2", "--set", "partition.num_clients=4", "--out-dir", str(tmp_path)]
    )
    # Assert
    assert code == 0
    run_dir = next(tmp_path.rglob("summary.json")).parent
    assert "plugin_blobs-" in str(run_dir) and _summary(run_dir)["rounds"] == 2


BROKEN = {
    "raises": ("raise RuntimeError('no GPU driver')", "failed to import: RuntimeError: no GPU driver"),
    "syntax": ("def broken(:\n", "failed to import: SyntaxError"),
    "taken name": (
        "import fedaug\n@fedaug.register_model('mlp')\ndef mlp(**kw): ...",
        "model 'mlp' is already registered (module 'fedaug.models.mlp'); pick another name",
    ),
    "not a method": (
        "import fedaug\n@fedaug.register_method('m2')\nclass M2: ...",
        "method 'm2' must be a subclass of fedaug.api.Method",
    ),
    "dataset returns a dict": (
        "import fedaug\n@fedaug.register_dataset('dict_data')\ndef d(ctx): return {}",
        "dataset 'dict_data' (plugin '{plugin}') returned dict, expected a fedaug.data.base.Dataset",
    ),
    "model returns a string": (
        "import fedaug\n@fedaug.register_model('str_model')\ndef m(*, num_classes, input_shape): return ''",
        "model 'str_model' (plugin '{plugin}') returned str, expected a torch.nn.Module",
    ),
    "model input does not fit": (
        "import fedaug\nfrom torch import nn\n@fedaug.register_model('narrow_in')\n"
        "def m(*, num_classes, input_shape):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(7, num_classes))",
        "model 'narrow_in' (plugin '{plugin}') does not fit dataset 'synthetic' (samples [1, 8, 8], "
        "10 classes): one batch forward failed: RuntimeError: mat1 and mat2 shapes cannot be multiplied "
        "(2x64 and 7x10)",
    ),
    "model output does not fit": (
        "import fedaug\nfrom torch import nn\n@fedaug.register_model('wide_out')\n"
        "def m(*, num_classes, input_shape):\n"
        "    return nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes + 3))",
        "model 'wide_out' (plugin '{plugin}') does not fit dataset 'synthetic' (samples [1, 8, 8], "
        "10 classes): a batch of 2 must give logits of shape [2, 10], got shape [2, 13]",
    ),
    "exits at import": (
        "import sys\nsys.exit(0)",
        "exited while being imported (SystemExit(0)); a plugin must not",
    ),
    "parses the command line": (
        "import argparse\np = argparse.ArgumentParser()\n"
        "p.add_argument('--data', required=True)\np.parse_args()",
        "exited while being imported (SystemExit(2); it printed: plugin_parses_the_command_line.py: error: "
        "the following arguments are required: --data)",
    ),
    "partitioner index out of range": (
        "import fedaug, numpy as np\n@fedaug.register_partitioner('out_of_range')\n"
        "def beyond(labels, *, num_clients, num_classes, rng):\n"
        "    return [np.array([labels.size])] + [np.arange(1)] * (num_clients - 1)",
        "partitioner 'beyond' (plugin '{plugin}') must return indices in 0..",
    ),
}


@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_plugin_is_one_line_exit_2_and_no_run_dir(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare
    source, expected = BROKEN[case]
    plugin = tmp_path / f"plugin_{case.replace(' ', '_')}.py"
    plugin.write_text(source)
    names = {
        "dataset returns a dict": "data=dict_data",
        "model returns a string": "model=str_model",
        "partitioner index out of range": "partition=out_of_range",
        "model input does not fit": "model=narrow_in",
        "model output does not fit": "model=wide_out",
    }
    extra = ["--set", names[case]] if case in names else []
    # Execute
    code = main(["run", str(SMOKE), "--plugin", str(plugin), *extra, "--out-dir", str(tmp_path / "runs")])
    # Assert
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert expected.format(plugin=plugin) in err
    assert f"'{plugin}'" in err
    assert not (tmp_path / "runs").exists()


def test_a_plugin_partitioner_and_method_are_used_by_name(tmp_path: Path) -> None:
    # Prepare: the fixture imported as a module this time (the file form of it is the same module)
    import_plugins(["tests.plugin_fixtures.tiny_plugin", str(PLUGIN)])
    sets = [f"out_dir={tmp_path}", "plugins=[tests.plugin_fixtures.tiny_plugin]", "data=plugin_blobs"]
    sets += [
        "partition=plugin_halves",
        "partition.first=0.25",
        "partition.num_clients=4",
        "method=plugin_fedavg",
    ]
    config = load_config([SMOKE], [*sets, "train.rounds=1", "engine.num_threads=1", "engine.progress=false"])
    # Execute
    summary = run_experiment(config)
    # Assert: client 0 holds the first quarter of the 120 samples, the other three 30 each
    _, partition = load_data_and_partition(config)
    assert [len(i) for i in partition.train_indices] == [30, 30, 30, 30]
    assert partition.train_indices[0].tolist() == list(range(30))
    assert summary["rounds"] == 1 and run_dir_for(config).parts[-2] == "plugin_fedavg"


def test_a_missing_plugin_names_it(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"plugin 'no_such_pkg\.mod' not found: no module 'no_such_pkg'"):
        import_plugins(["no_such_pkg.mod"])
    with pytest.raises(PluginError, match=r"plugin '\./nowhere\.py' not found: no file"):
        import_plugins(["./nowhere.py"])


def test_a_module_plugin_in_the_current_directory_imports_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: a module beside the user, not on sys.path (the fedaug console script does not add it)
    (tmp_path / "my_cwd_plugin.py").write_text("COUNT = globals().get('COUNT', 0) + 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    # Execute
    first, again = import_plugins(["my_cwd_plugin", "my_cwd_plugin"])
    # Assert
    assert first is again and first.COUNT == 1


def test_every_command_takes_plugin() -> None:
    def leaves(parser: argparse.ArgumentParser, path: str) -> dict[str, argparse.ArgumentParser]:
        if isinstance(parser, OneLineParser):  # fedaug attack adds its sub-commands when it first parses
            parser.populated()
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return {path: parser}
        return {
            k: v for name, sub in subs[0].choices.items() for k, v in leaves(sub, f"{path} {name}").items()
        }

    commands = leaves(build_parser(), "fedaug")
    assert {
        "fedaug run",
        "fedaug sweep",
        "fedaug report",
        "fedaug attack invert",
        "fedaug flower simulate",
    } <= set(commands)
    lacking = [name for name, parser in commands.items() if "--plugin" not in parser._option_string_actions]
    assert not lacking
    args = build_parser().parse_args(["zsdg", "RUN", "--plugin", "a.b", "--plugin", "./c.py"])
    assert args.plugins == ["a.b", "./c.py"]


def test_plugins_do_not_change_a_runs_identity() -> None:
    # Prepare
    plain = load_config([SMOKE])
    plugged = load_config([SMOKE], [f"plugins=[{PLUGIN}]"])
    # Assert: archived runs (no plugins key) resolve to the run dirs and configs they had
    assert plain.plugins == []
    assert "plugins" not in result_config(config_to_dict(plain))
    assert result_config(config_to_dict(plugged)) == result_config(config_to_dict(plain))
    assert (
        run_dir_for(plugged)
        == run_dir_for(plain)
        == Path("runs/smoke/synthetic-dirichlet0.5_2-K6/fedavg/seed0")
    )


STATEMENTS = st.sampled_from(
    [
        "import sys\nsys.exit({n})",
        "raise SystemExit({n})",
        "raise RuntimeError('boom\\nsecond line {n}')",
        "import argparse\nargparse.ArgumentParser().parse_args()",
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('x')\np.parse_args()",
        "import sys\nprint('note {n}', file=sys.stderr)",
        "import sys\nassert sys.argv[1:] == []",
        "import fedaug\n@fedaug.register_model('fuzz_model_{n}')\ndef m(*, num_classes, input_shape): ...",
        "def broken(:\n    pass",
        "1 / 0",
        "x = {n}",
    ]
)


@settings(max_examples=30, deadline=None)
@given(lines=st.lists(st.tuples(STATEMENTS, st.integers(0, 3)), min_size=1, max_size=3))
def test_any_plugin_module_imports_or_is_one_plugin_error_naming_its_file(
    lines: list[tuple[str, int]],
) -> None:
    _plugin_property(lines)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(lines=st.lists(st.tuples(STATEMENTS, st.integers(0, 3)), min_size=1, max_size=5))
def test_any_plugin_module_imports_or_is_one_plugin_error_naming_its_file_long(
    lines: list[tuple[str, int]],
) -> None:
    _plugin_property(lines)


def _plugin_property(lines: list[tuple[str, int]]) -> None:
    """sys.exit, argparse (which sees an empty command line), exceptions, syntax errors and prints at import:
    the import works, or it is one PluginError line naming the file; never SystemExit or a traceback."""
    source = "\n".join(template.format(n=n) for template, n in lines) + "\n"
    argv = list(sys.argv)
    with tempfile.TemporaryDirectory() as folder, isolated_plugins():
        plugin = Path(folder) / "fuzzed_plugin.py"
        plugin.write_text(source)
        try:
            import_plugins([str(plugin)])
        except PluginError as error:
            assert "\n" not in str(error) and str(plugin) in str(error)
    assert sys.argv == argv  # restored, whatever the plugin did
