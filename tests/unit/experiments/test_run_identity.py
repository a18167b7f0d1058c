"""A run dir's identity: moving it under another name/out_dir keeps it; a different setting is refused."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fedaug.api import Method
from fedaug.config.identity import run_dir_for
from fedaug.config.load import load_config
from fedaug.config.schema import ExperimentConfig
from fedaug.errors import ConfigError
from fedaug.runs import runner
from fedaug.runs.resolve import build_method, load_data_and_partition
from fedaug.runs.runner import run_experiment
from fedaug.runtime.machine import cpu_model, recorded_cpu
from tests.conftest import SMOKE


def _config(out_dir: Path, *overrides: str) -> ExperimentConfig:
    sets = [f"out_dir={out_dir}", "train.rounds=2", "engine.progress=false", *overrides]
    return load_config([SMOKE], sets)


def test_a_run_moved_into_another_tree_is_that_trees_finished_run(tmp_path: Path) -> None:
    # Prepare: a finished run under name "smoke", moved to where a sweep named "table" would put it.
    first = _config(tmp_path)
    summary = run_experiment(first)
    moved = _config(tmp_path / "elsewhere", "name=table")
    shutil.move(run_dir_for(first), run_dir_for(moved))
    metrics = (run_dir_for(moved) / "metrics.jsonl").read_text()
    # Execute: the same experiment under the new name
    again = run_experiment(moved)
    # Assert: skipped as finished, nothing rewritten
    assert again == summary
    assert (run_dir_for(moved) / "metrics.jsonl").read_text() == metrics


def test_a_different_setting_in_the_same_run_dir_is_refused(tmp_path: Path) -> None:
    run_experiment(_config(tmp_path))
    with pytest.raises(ConfigError, match=r"differs in: train\.lr"):
        run_experiment(_config(tmp_path, "train.lr=0.5"))


def test_another_data_dir_is_the_same_run(tmp_path: Path) -> None:
    # Prepare: a finished run that named no data dir (the data is found at the default place)
    summary = run_experiment(_config(tmp_path))
    # Execute: the same experiment with --data-dir given (where the files are, not which data)
    again = run_experiment(_config(tmp_path, f"data.data_dir={tmp_path / 'data'}"))
    # Assert: skipped as finished
    assert again == summary


def test_resuming_with_another_thread_count_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: a run with 1 thread, "interrupted" after its last round (no summary yet).
    threads = torch.get_num_threads()
    try:
        first = _config(tmp_path, "engine.num_threads=1")
        run_experiment(first)
        (run_dir_for(first) / "summary.json").unlink()
        # Execute: resumed with 1 thread (silent), again interrupted, then with 2 threads
        with caplog.at_level(logging.WARNING, logger="fedaug.runs.resume"):
            run_experiment(first)
            assert not caplog.records
            (run_dir_for(first) / "summary.json").unlink()
            run_experiment(_config(tmp_path, "engine.num_threads=2"))
    finally:
        torch.set_num_threads(threads)
    # Assert: one warning naming both thread counts and the fix
    (record,) = caplog.records
    assert "ran with 1 torch threads and resumes with 2" in record.getMessage()
    assert "engine.num_threads=1" in record.getMessage()


def test_resuming_on_another_kind_of_cpu_warns(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Prepare: an "interrupted" run; env.json records the CPU it ran on
    config = _config(tmp_path)
    run_experiment(config)
    run_dir = run_dir_for(config)
    (run_dir / "summary.json").unlink()
    env = json.loads((run_dir / "env.json").read_text())
    assert env["cpu_model"] == cpu_model()
    assert env["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    # Execute: resumed on the same CPU (silent), then "on another one" (as if env.json came from elsewhere)
    with caplog.at_level(logging.WARNING, logger="fedaug.runs.resume"):
        run_experiment(config)
        assert not caplog.records
        (run_dir / "summary.json").unlink()
        (run_dir / "env.json").write_text(json.dumps({**env, "cpu_model": "Some Other CPU"}))
        run_experiment(config)
        (run_dir / "summary.json").unlink()
        old = {k: v for k, v in env.items() if k not in ("cpu_model", "cpu_capability")}
        (run_dir / "env.json").write_text(json.dumps(old))  # a run from before the CPU was recorded
        run_experiment(config)
    # Assert: one warning, naming both CPUs
    (record,) = caplog.records
    message = record.getMessage()
    assert f"ran on Some Other CPU ({env['cpu_capability']}) and resumes on {cpu_model()}" in message
    assert "not be bit-identical" in message


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"cpu_model": "AMD EPYC", "num_threads": 1}', "AMD EPYC"),
        ('{"num_threads": 1}', None),  # from before the CPU was recorded
        ('{"cpu_model": 3}', None),
        ('["not", "an", "object"]', None),
        ("{truncated", None),
        (None, None),  # no env.json
    ],
)
def test_recorded_cpu_reads_env_json_and_is_none_where_it_cannot(
    tmp_path: Path, content: str | None, expected: str | None
) -> None:
    if content is not None:
        (tmp_path / "env.json").write_text(content)
    assert recorded_cpu(tmp_path) == expected


def test_env_json_records_every_method_option_with_its_default(tmp_path: Path) -> None:
    # config.yaml keeps only the options given; env.json says what the run used, defaults included
    config = _config(tmp_path, "method.name=fedprox", "method.proximal_mu=0.5")
    run_experiment(config)
    run_dir = run_dir_for(config)
    env = json.loads((run_dir / "env.json").read_text())
    assert env["method_config"] == {"proximal_mu": 0.5}
    default = _config(tmp_path / "default", "method.name=qffl")
    run_experiment(default)
    env = json.loads((run_dir_for(default) / "env.json").read_text())
    assert env["method_config"] == {"q": 1.0, "lipschitz": None}
    assert yaml.safe_load((run_dir_for(default) / "config.yaml").read_text())["method"] == {"name": "qffl"}


def test_a_method_default_changed_since_the_run_started_is_refused_until_named(tmp_path: Path) -> None:
    # Prepare: a q-FFL run "interrupted" before its summary, started when q's default was (say) 0.5 and before
    # the option `lipschitz` existed; its config.yaml names no option, like any run on the defaults.
    config = _config(tmp_path, "method.name=qffl")
    run_experiment(config)
    run_dir = run_dir_for(config)
    (run_dir / "summary.json").unlink()
    env = json.loads((run_dir / "env.json").read_text())
    env["method_config"] = {"q": 0.5, "an_option_removed_since": 3}
    (run_dir / "env.json").write_text(json.dumps(env))
    # Execute / Assert: resuming on today's default (q = 1) would change the rest of the run: refused
    with pytest.raises(ConfigError, match=r"differs in: method\.q \(the run used 0\.5, now 1\.0\)"):
        run_experiment(config)
    assert not (run_dir / "summary.json").exists()
    # Execute / Assert: naming the value the run used finishes it (config.yaml as given differs, the run not)
    summary = run_experiment(_config(tmp_path, "method.name=qffl", "method.q=0.5"))
    assert summary["rounds"] == 2
    assert json.loads((run_dir / "env.json").read_text())["method_config"] == {"q": 0.5, "lipschitz": None}


def test_method_options_compare_as_run_not_as_written(tmp_path: Path) -> None:
    # Prepare: a finished FedProx run on the default mu (0.01)
    summary = run_experiment(_config(tmp_path, "method.name=fedprox"))
    # Execute / Assert: the default written out is the same run (skipped), another mu is not
    assert run_experiment(_config(tmp_path, "method.name=fedprox", "method.proximal_mu=0.01")) == summary
    with pytest.raises(ConfigError, match=r"method\.proximal_mu \(the run used 0\.01, now 0\.5\)"):
        run_experiment(_config(tmp_path, "method.name=fedprox", "method.proximal_mu=0.5"))


def test_partition_seed_keeps_one_partition_over_the_run_seeds(tmp_path: Path) -> None:
    # Prepare: run seeds 0 and 1, with the partition drawn from the run seed (default) or fixed to seed 0
    drawn = [load_data_and_partition(_config(tmp_path, f"seed={s}"))[1] for s in (0, 1)]
    fixed = [_config(tmp_path, f"seed={s}", "partition.seed=0") for s in (0, 1)]
    parts = [load_data_and_partition(c)[1] for c in fixed]
    # Assert: by default the seeds' partitions differ; with partition.seed both are seed 0's
    assert any(not np.array_equal(a, b) for a, b in zip(*(p.train_indices for p in drawn), strict=True))
    for part in parts:
        for got, want in zip(part.train_indices, drawn[0].train_indices, strict=True):
            np.testing.assert_array_equal(got, want)
    # the run dirs say so, and the two training seeds still differ in what they train
    assert run_dir_for(fixed[1]).parts[-3].endswith("-K6-pseed0")
    metrics = []
    for config in fixed:
        run_experiment(config)
        metrics.append((run_dir_for(config) / "metrics.jsonl").read_text())
    assert metrics[0] != metrics[1]


@pytest.mark.parametrize("bad", ["-1", "1.5", "true", "zero"])
def test_a_bad_partition_seed_is_refused(tmp_path: Path, bad: str) -> None:
    message = r"partition\.seed must be (>= 0|of type int), got"
    with pytest.raises(ConfigError, match=message):
        _config(tmp_path, f"partition.seed={bad}")


def test_quiet_logs_no_rounds_and_is_not_written_to_config_yaml(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Prepare: a config that asks for progress lines (the default), as a sweep's worker receives it
    def config(out: str) -> ExperimentConfig:
        return load_config([SMOKE], [f"out_dir={tmp_path / out}", "train.rounds=2"])

    def rounds_logged() -> list[str]:
        return [r.getMessage()[:9] for r in caplog.records if r.getMessage().startswith("round ")]

    # Execute: one run quiet (a sweep worker), one not
    with caplog.at_level(logging.INFO, logger="fedaug"):
        quiet = run_experiment(config("quiet"), quiet=True)
        assert rounds_logged() == []
        loud = run_experiment(config("loud"))
    # Assert: same results; only the loud run logged its rounds; config.yaml keeps progress as given
    assert quiet == loud
    assert rounds_logged() == ["round 1/2", "round 2/2"]
    saved = yaml.safe_load((run_dir_for(config("quiet")) / "config.yaml").read_text())
    assert saved["engine"]["progress"] is True


def test_a_resumed_run_builds_its_method_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare: an "interrupted" FedProx run (env.json records its options, so resuming compares them)
    config = _config(tmp_path, "method.name=fedprox")
    run_experiment(config)
    (run_dir_for(config) / "summary.json").unlink()
    built: list[Method] = []

    def counted(config: ExperimentConfig) -> Method:
        built.append(build_method(config))
        return built[-1]

    monkeypatch.setattr(runner, "build_method", counted)
    # Execute: the resume checks (before and after the lock) and the run
    run_experiment(config)
    # Assert: one instance, the one the resume checks compared
    assert len(built) == 1


def test_a_resume_after_a_plugin_or_data_file_changed_warns_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The checkpoint keeps the SHA-256 of the run's plugin and data files: a resume after either changed
    says which, as a WARNING (the same content: no word)."""
    from tests.plugin_fixtures import isolated_plugins

    plugin = tmp_path / "noop_plugin.py"
    plugin.write_text("X = 1\n")
    table = tmp_path / "table.csv"
    rows = [f"{i % 5},{(i * 7) % 3},{i % 2}" for i in range(40)]
    table.write_text("\n".join(["a,b,label", *rows]) + "\n")
    sets = [f"plugins=[{plugin}]", "data=csv", f"data.path={table}", "model=mlp", "engine.num_threads=1"]
    with isolated_plugins():
        config = _config(tmp_path / "runs", *sets)
        from fedaug.plugins import import_plugins

        import_plugins(config.plugins)
        run_experiment(config)
        summary = run_dir_for(config) / "summary.json"
        summary.unlink()
        with caplog.at_level(logging.WARNING):
            run_experiment(config)  # the same files: resumed without a word
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        summary.unlink()
        plugin.write_text("X = 2\n")
        table.write_text(table.read_text().replace("\n4,", "\n3,", 1))
        with caplog.at_level(logging.WARNING):
            run_experiment(config)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"data file {table} (SHA-256 " in warning and f"plugin {plugin} (SHA-256 " in warning
    assert "changed since its rounds 1..2 were trained" in warning


def test_a_finished_run_skipped_after_a_plugin_or_data_file_changed_warns_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 68, re-checked: a finished run was skipped in silence after its plugin or data file changed (its
    results, from the old content, kept as the new one's). Now a WARNING names each changed file; the same
    files, or a plugin moved elsewhere, say nothing."""
    from tests.plugin_fixtures import isolated_plugins

    plugin = tmp_path / "noop_plugin.py"
    plugin.write_text("X = 1\n")
    table = tmp_path / "table.csv"
    rows = [f"{i % 5},{(i * 7) % 3},{i % 2}" for i in range(40)]
    table.write_text("\n".join(["a,b,label", *rows]) + "\n")
    sets = ["data=csv", f"data.path={table}", "model=mlp", "engine.num_threads=1"]
    with isolated_plugins():
        from fedaug.plugins import import_plugins

        config = _config(tmp_path / "runs", f"plugins=[{plugin}]", *sets)
        import_plugins(config.plugins)
        summary = run_experiment(config)
        with caplog.at_level(logging.WARNING):
            assert run_experiment(config) == summary  # the same files: skipped without a word
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        moved = tmp_path / "moved" / "noop_plugin.py"
        moved.parent.mkdir()
        shutil.copyfile(plugin, moved)
        elsewhere = _config(tmp_path / "runs", f"plugins=[{moved}]", *sets)
        import_plugins(elsewhere.plugins)
        with caplog.at_level(logging.WARNING):
            assert run_experiment(elsewhere) == summary  # which file defined the plugin is no input
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        plugin.write_text("X = 2\n")
        table.write_text(table.read_text().replace("\n4,", "\n3,", 1))
        with caplog.at_level(logging.WARNING):
            assert run_experiment(config) == summary  # skipped, as before, but not in silence
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.startswith(f"{run_dir_for(config)} is finished, but data file {table} (SHA-256 ")
    assert (
        f"plugin {plugin} (SHA-256 " in warning
        and "skipping it keeps the results of the old content" in warning
    )
