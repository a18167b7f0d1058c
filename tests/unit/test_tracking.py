"""``tracking: [tensorboard, mlflow]`` (``fedaug.runs.tracking``): a smoke run stopped after round 2 and
resumed is read back by TensorBoard's own event reader and MLflow's client with each round's scalars once,
equal to ``metrics.jsonl`` and ``timings.jsonl``, the summary and the resolved config as hyper-parameters
(also when tracking starts at the resume); without ``tracking`` nothing is written and the trackers'
libraries are not imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fedaug.cli.main import main
from fedaug.engine.simulation import Simulation
from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
ARGS = ["--set", "train.rounds=3", "--set", "engine.num_threads=1", "--set", "engine.progress=true"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _stop_after_round_2_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, first: list[str], then: list[str]
) -> Path:
    """``first`` stopped by a Ctrl-C after round 2's log lines, ``then`` resumed to round 3; the run dir."""
    real_report = Simulation._report

    def stop_after_round_2(self: Simulation, bar: Any, record: dict[str, Any], *rest: Any) -> None:
        real_report(self, bar, record, *rest)
        if record["round"] == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(Simulation, "_report", stop_after_round_2)
    assert main(first) == 130  # stopped: rounds 1-2 checkpointed
    monkeypatch.setattr(Simulation, "_report", real_report)
    assert main(then) == 0  # resumed after round 2
    (run_dir,) = {p.parent for p in tmp_path.rglob("metrics.jsonl")}
    return run_dir


@pytest.mark.parametrize("tracked_before", [True, False], ids=["tracked-throughout", "tracking-from-resume"])
def test_a_stopped_and_resumed_run_is_read_once_per_round_by_mlflows_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracked_before: bool
) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    from mlflow.tracking import MlflowClient

    command = ["run", SMOKE, "--out-dir", str(tmp_path), *ARGS, "--set", "tracking=[mlflow]"]
    run_dir = _stop_after_round_2_and_resume(
        tmp_path, monkeypatch, command if tracked_before else command[:-2], command
    )
    client = MlflowClient(f"sqlite:///{tmp_path / 'smoke' / 'mlflow' / 'mlflow.db'}")  # the job's store
    run = client.get_run((run_dir / "mlflow" / "run_id").read_text().strip())
    assert run.info.status == "FINISHED"
    assert run.info.run_name == str(run_dir.relative_to(tmp_path / "smoke"))
    metrics, timings = _lines(run_dir / "metrics.jsonl"), _lines(run_dir / "timings.jsonl")
    for key, log, field in (("test/acc", metrics, "test/acc"), ("time/round_time", timings, "round_time")):
        history = sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
        assert [m.step for m in history] == [1, 2, 3]  # no round twice, none missing
        assert [m.value for m in history] == pytest.approx([r[field] for r in log], rel=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/best_acc"] == pytest.approx(summary["best_acc"], rel=1e-6)
    assert run.data.params["train.rounds"] == "3" and run.data.params["method.name"] == "fedavg"


@pytest.mark.parametrize("tracked_before", [True, False], ids=["tracked-throughout", "tracking-from-resume"])
def test_a_stopped_and_resumed_run_writes_each_round_once_for_tensorboards_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracked_before: bool
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    command = ["run", SMOKE, "--out-dir", str(tmp_path), *ARGS, "--set", "tracking=[tensorboard]"]
    first = command if tracked_before else command[:-2]
    run_dir = _stop_after_round_2_and_resume(tmp_path, monkeypatch, first, command)
    event_files = sorted((run_dir / "tensorboard").iterdir())
    assert len(event_files) == (2 if tracked_before else 1)  # one per process that tracked
    reader = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    reader.Reload()
    metrics, timings = _lines(run_dir / "metrics.jsonl"), _lines(run_dir / "timings.jsonl")
    for tag, key, log in (("test/acc", "test/acc", metrics), ("train/loss", "train/loss", metrics)):
        events = reader.Scalars(tag)
        assert [e.step for e in events] == [
            1,
            2,
            3,
        ]  # round 2 written by both processes (or rounds 1-2 by the
        # resume, from the logs), read once
        assert [e.value for e in events] == pytest.approx([r[key] for r in log], rel=1e-6)
    round_times = reader.Scalars("time/round_time")
    assert [e.step for e in round_times] == [1, 2, 3]
    assert [e.value for e in round_times] == pytest.approx([t["round_time"] for t in timings], rel=1e-6)
    summary = json.loads((run_dir / "summary.json").read_text())
    (best,) = reader.Scalars("summary/best_acc")
    assert (best.step, best.value) == (3, pytest.approx(summary["best_acc"], rel=1e-6))
    hparams = reader.PluginTagToContent("hparams")
    assert hparams  # the experiment, the session's hyper-parameters and its end
    session = next(content for tag, content in hparams.items() if "session_start" in tag)
    assert b"train.lr" in session and b"method.name" in session
    assert "config/text_summary" in reader.Tags()["tensors"]


SWEEP = """extends: {smoke}
name: sw
out_dir: {out}
train: {{rounds: 2}}
engine: {{num_threads: 1}}
tracking: [mlflow, tensorboard]
grid:
  method: [fedavg, fedprox]
  partition.num_clients: [4, 6]
"""


@pytest.mark.slow  # 73 s on a loaded 2-core host: two worker processes, each importing MLflow
def test_a_sweeps_runs_are_one_mlflow_experiment_and_one_tensorboard_log_dir(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    pytest.importorskip("sqlalchemy")
    pytest.importorskip("tensorboard")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_multiplexer import EventMultiplexer

    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(SWEEP.format(smoke=SMOKE, out=tmp_path))
    assert main(["sweep", str(sweep), "--workers", "2"]) == 0
    # MLflow: one store and one experiment for the sweep, each run tagged with its grid point
    client = MlflowClient(f"sqlite:///{tmp_path / 'sw' / 'mlflow' / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sw")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    points = sorted((r.data.tags["fedaug.method"], r.data.tags["fedaug.setting"]) for r in runs)
    assert points == [
        ("fedavg", "synthetic-dirichlet0.5_2-K4"),
        ("fedavg", "synthetic-dirichlet0.5_2-K6"),
        ("fedprox", "synthetic-dirichlet0.5_2-K4"),
        ("fedprox", "synthetic-dirichlet0.5_2-K6"),
    ]
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["fedaug.sweep"] for r in runs} == {"sw"}
    fedprox_runs = client.search_runs([experiment.experiment_id], "tags.`fedaug.method` = 'fedprox'")
    assert sorted(r.data.params["partition.num_clients"] for r in fedprox_runs) == ["4", "6"]
    assert all(len(client.get_metric_history(r.info.run_id, "test/acc")) == 2 for r in runs)
    # TensorBoard: the sweep's folder is one log dir, a run per run dir
    multiplexer = EventMultiplexer().AddRunsFromDirectory(str(tmp_path / "sw"))
    multiplexer.Reload()
    assert sorted(multiplexer.Runs()) == sorted(
        f"{r.info.run_name}/tensorboard".replace("/", os.sep) for r in runs
    )
    assert all(len(multiplexer.Scalars(run, "test/acc")) == 2 for run in multiplexer.Runs())


PROBE = """
import json, sys
from fedaug.cli.main import main
code = main(["run", sys.argv[2], "--out-dir", sys.argv[1], "--set", "train.rounds=1"])
loaded = sorted(m for m in sys.modules if "tensorboard" in m or "mlflow" in m)
print(json.dumps({"code": code, "loaded": loaded}))
"""


def test_a_run_without_tracking_imports_no_tracker_and_writes_no_events(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(tmp_path), SMOKE],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "loaded": []}
    assert not list(tmp_path.rglob("tensorboard"))
