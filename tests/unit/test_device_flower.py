"""Devices on Flower: the simulation's client resources (``--cpus-per-client``, ``--gpus-per-client``),
``--device`` of the Flower commands, messages received onto the receiver's device, and a node's own device."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from fedaug.api import ClientUpdate, Payload
from fedaug.cli.main import main
from fedaug.config.load import dump_yaml
from fedaug.errors import ClientError, ConfigError
from fedaug.flower import client_app
from fedaug.flower import simulation as flower_simulation
from fedaug.flower.deploy import supernode_command
from fedaug.flower.loopback import LoopbackGrid, task_identity
from fedaug.flower.records import decode, encode
from fedaug.flower.server_app import NodeLink, Outcome
from fedaug.flower.simulation import backend_config
from fedaug.runs.runner import prepare
from fedaug.runtime.device import tensor_devices
from fedaug.training.loop import snapshot_state
from tests.unit.test_flower_engine import tiny_config

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")


@pytest.fixture(autouse=True)
def _task_identity() -> Iterator[None]:
    """Messages read the run/node identity that Flower's runtime sets per process."""
    client_app.client_host.cache_clear()
    with task_identity():
        yield
    client_app.client_host.cache_clear()


def _error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    return err[0]


# --- the simulation's backend config --------------------------------------------------------------------


def test_backend_config_carries_the_client_resources() -> None:
    assert backend_config(num_cpus=4, cpus_per_client=2.0, gpus_per_client=0.25) == {
        "client_resources": {"num_cpus": 2.0, "num_gpus": 0.25},
        "init_args": {"num_cpus": 4},
    }
    assert backend_config() == {"client_resources": {"num_cpus": 1.0, "num_gpus": 0.0}, "init_args": {}}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpus_per_client": 0.0}, "--cpus-per-client must be a finite number > 0, got 0"),
        ({"cpus_per_client": -1.0}, "--cpus-per-client must be a finite number > 0, got -1"),
        ({"cpus_per_client": math.nan}, "--cpus-per-client must be a finite number > 0, got nan"),
        ({"gpus_per_client": -0.5}, "--gpus-per-client must be a finite number >= 0, got -0.5"),
        ({"gpus_per_client": math.inf}, "--gpus-per-client must be a finite number >= 0, got inf"),
        ({"num_cpus": 0}, "--num-cpus must be >= 1, got 0"),
    ],
)
def test_bad_client_resources_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        backend_config(**kwargs)


@pytest.fixture
def fake_flower(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Flower's simulation replaced: records ``run_simulation``'s arguments; the ServerApp "finishes"."""
    seen: dict[str, Any] = {}

    def fake_server_app(configs: Any, **kwargs: Any) -> tuple[object, Outcome]:
        del kwargs
        summary = {"best_acc": 0.5, "best_round": 1, "last10_acc": 0.5, "final_acc": 0.5}
        return object(), Outcome(summaries=[summary for _ in configs])

    monkeypatch.setattr(flower_simulation, "make_server_app", fake_server_app)
    monkeypatch.setattr(flower_simulation, "run_simulation", lambda **kwargs: seen.update(kwargs))
    monkeypatch.chdir(REPO)
    return seen


def test_gpus_per_client_reaches_flowers_backend(
    fake_flower: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Prepare: a machine that has a GPU, as far as the check before Ray is concerned
    monkeypatch.setattr(flower_simulation.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(flower_simulation, "resolve_device", lambda name: torch.device("cpu"))
    argv = ["flower", "simulate", "configs/smoke.yaml", "--out-dir", str(tmp_path)]
    # Execute
    code = main([*argv, "--gpus-per-client", "0.5", "--cpus-per-client", "2", "--num-cpus", "3"])
    # Assert
    assert code == 0
    assert fake_flower["backend_config"] == {
        "client_resources": {"num_cpus": 2.0, "num_gpus": 0.5},
        "init_args": {"num_cpus": 3},
    }


@NO_CUDA
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--gpus-per-client", "0.5"], ["--gpus-per-client 0.5 but this machine has no CUDA device", "cpu"]),
        (["--gpus-per-client", "-1"], ["--gpus-per-client must be a finite number >= 0, got -1"]),
        (["--cpus-per-client", "0"], ["--cpus-per-client must be a finite number > 0, got 0"]),
        (
            ["--device", "cuda"],
            ["engine.device='cuda' but this machine has no CUDA device", "available: cpu"],
        ),
        (["--device", "gpu"], ["engine.device='gpu' is not a device", "this machine has: cpu"]),
        (["--set", "engine.device=cuda:1"], ["engine.device='cuda:1' but", "available: cpu"]),
    ],
)
def test_simulate_refuses_bad_resources_and_devices_before_flower_starts(
    options: list[str],
    expected: list[str],
    fake_flower: dict[str, Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Execute
    argv = ["flower", "simulate", "configs/smoke.yaml", "--out-dir", str(tmp_path / "runs"), *options]
    line = _error_line(capsys, argv)
    # Assert
    assert all(part in line for part in expected), line
    assert fake_flower == {} and not (tmp_path / "runs").exists()


def test_simulate_device_option_sets_engine_device(
    fake_flower: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Prepare
    seen: list[str] = []
    check = flower_simulation.check_devices

    def record(configs: Any, gpus: float) -> torch.device:
        seen.extend(c.engine.device for c in configs)
        device: torch.device = check(configs, gpus)
        return device

    monkeypatch.setattr(flower_simulation, "check_devices", record)
    # Execute
    argv = ["flower", "simulate", "configs/smoke.yaml", "--out-dir", str(tmp_path), "--device", "cpu"]
    assert main([*argv, "--set", "compare=[fedavg, flea]"]) == 0
    # Assert
    assert seen == ["cpu", "cpu"]


# --- serve and client -----------------------------------------------------------------------------------


@NO_CUDA
def test_serve_refuses_a_missing_device_before_the_superlink_starts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Prepare
    started: list[Any] = []
    monkeypatch.setattr("fedaug.flower.deploy.serve", lambda config, options: started.append(config))
    monkeypatch.chdir(REPO)
    # Execute
    argv = [
        "flower",
        "serve",
        "configs/smoke.yaml",
        "--insecure",
        "--out-dir",
        str(tmp_path),
        "--device",
        "cuda",
    ]
    line = _error_line(capsys, argv)
    # Assert
    assert "engine.device='cuda' but this machine has no CUDA device" in line and "available: cpu" in line
    assert started == []


def test_client_device_becomes_the_nodes_device_config(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    calls: list[dict[str, Any]] = []

    def run_client(*args: Any, **kwargs: Any) -> int:
        calls.append(kwargs)
        return 0

    monkeypatch.setattr("fedaug.flower.deploy.run_client", run_client)
    base = ["flower", "client", "--superlink", "h:1", "--partition-id", "0", "--insecure"]
    # Execute
    assert main([*base, "--device", "cpu"]) == 0
    line = _error_line(capsys, [*base, "--device", "gpu"])
    command = supernode_command("h:1", 3, root_certificates=None, runtime_port=1, device="cuda:1")
    # Assert
    assert calls == [
        {
            "root_certificates": None,
            "runtime_port": None,
            "data_dir": None,
            "device": "cpu",
            "node_key": None,
            "register_timeout": 120.0,
            "state_dir": None,
        }
    ]
    assert "--device='gpu' is not a device" in line and "this machine has: cpu" in line
    assert command[command.index("--node-config") + 1] == 'partition-id=3 device="cuda:1"'


# --- messages and nodes ---------------------------------------------------------------------------------


def test_decoded_tensors_land_on_the_receivers_device() -> None:
    """``meta`` stands in for a device other than the sender's; numpy arrays stay numpy arrays."""
    # Prepare
    update = ClientUpdate(
        client_id=1,
        num_examples=3,
        model_state={"w": torch.ones(2, 2)},
        metrics={"train/loss": 0.5},
        extra={"features": torch.zeros(3, 4), "np": np.arange(3), "nested": [{"y": torch.tensor([1, 2])}]},
    )
    # Execute
    on_meta = decode(encode(update), device=torch.device("meta"))
    on_cpu = decode(encode(update))
    # Assert
    assert tensor_devices(on_meta) == {torch.device("meta")}
    assert isinstance(on_meta.extra["np"], np.ndarray)
    assert tensor_devices(on_cpu) == {torch.device("cpu")} and torch.equal(
        on_cpu.model_state["w"], torch.ones(2, 2)
    )


def _train_reply(config: Any, node_device: str | None, tmp_path: Path) -> ClientUpdate:
    """Client 0's reply to round 1's payload of ``config`` from a loopback node (``device`` node config)."""
    grid = LoopbackGrid(client_app.app, 4)
    for context in grid.contexts.values():
        if node_device is not None:
            context.node_config["device"] = node_device
    nodes = {int(c.node_config["partition-id"]): node for node, c in grid.contexts.items()}
    cpu_config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, device="cpu"))
    prepared = prepare(cpu_config, tmp_path / "server")
    spec, method = prepared.spec, prepared.method
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        initial = snapshot_state(spec.model_fn())
    payload: Payload = method.payload(method.init_server(initial, spec.run), 1, spec.train_settings(1))
    (update,) = NodeLink(grid, config, nodes).call("train", payload, [0], 1, device=torch.device("cpu"))
    return update


def test_a_nodes_own_device_wins_over_the_experiments(tmp_path: Path) -> None:
    """A CPU node (``device="cpu"`` node config) trains a GPU experiment's client as a CPU experiment's."""
    # Prepare
    config = tiny_config(tmp_path, "fedavg", **{"engine.device": "cpu"})
    on_gpu = dataclasses.replace(config, engine=dataclasses.replace(config.engine, device="cuda"))
    # Execute
    reference = _train_reply(config, None, tmp_path)
    client_app.client_host.cache_clear()
    overridden = _train_reply(on_gpu, "cpu", tmp_path)
    # Assert
    assert (
        isinstance(overridden.model_state, dict)
        and overridden.model_state.keys() == reference.model_state.keys()
    )
    for key, value in reference.model_state.items():
        assert torch.equal(overridden.model_state[key], value), key
    assert overridden.metrics == reference.metrics


@NO_CUDA
def test_a_node_without_the_experiments_device_answers_with_the_reason(tmp_path: Path) -> None:
    # Prepare
    config = tiny_config(tmp_path, "fedavg", **{"engine.device": "cuda"})
    # Execute / Assert
    with pytest.raises(
        ClientError, match=r"client 0, method 'fedavg': DeviceError: engine.device='cuda' but"
    ):
        _train_reply(config, None, tmp_path)


def test_the_host_keeps_data_and_models_on_its_device(tmp_path: Path) -> None:
    # Prepare
    config = tiny_config(tmp_path, "fedavg", **{"engine.device": "cuda"})
    # Execute
    host = client_app.client_host(dump_yaml(config), None, "cpu")
    # Assert
    assert host.device == torch.device("cpu")
    assert tensor_devices([host.spec.train_x, host.spec.test_x, *host.spec.client_indices]) == {host.device}
    assert tensor_devices(host.workspace("client")) == {host.device}


def test_a_nodes_workspaces_take_the_engines_memory_format(tmp_path: Path) -> None:
    """``engine.channels_last: all``: the nodes train channels-last as the engine does, so the runs agree."""
    from fedaug.flower.server_app import serve
    from fedaug.runs.runner import run_experiment
    from tests.unit.test_flower_engine import metrics

    # Prepare
    conv = {"model": "bn_cnn_mnist", "data.shape": "[1, 16, 16]", "engine.channels_last": "all"}
    config = tiny_config(tmp_path, "fedavg", **conv)
    flower = dataclasses.replace(config, name="smoke-flower")
    # Execute
    run_experiment(config)
    serve(LoopbackGrid(client_app.app, 4), [flower], fresh=False, node_timeout=5)
    # Assert
    assert metrics(flower) == metrics(config)
    host = client_app.client_host(dump_yaml(flower), None)
    weight = next(p for p in host.workspace("client").parameters() if p.dim() == 4)
    assert weight.is_contiguous(memory_format=torch.channels_last)


# --- on a GPU (skipped without one) ---------------------------------------------------------------------

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@CUDA
@pytest.mark.parametrize("method", ["fedavg", "flea"])
def test_flower_on_cuda_equals_the_engine_on_cuda(tmp_path: Path, method: str) -> None:
    """Deterministic kernels: the messages' trip through the CPU changes no bit."""
    from fedaug.config.identity import run_dir_for
    from fedaug.flower.server_app import serve
    from fedaug.runs.runner import run_experiment
    from tests.unit.test_flower_engine import metrics

    # Prepare
    config = tiny_config(tmp_path, method, **{"engine.device": "cuda", "engine.deterministic": "true"})
    flower = dataclasses.replace(config, name="smoke-flower")
    # Execute
    run_experiment(config)
    serve(LoopbackGrid(client_app.app, 4), [flower], fresh=False, node_timeout=5)
    # Assert
    assert metrics(flower) == metrics(config) and len(metrics(flower)) == 2
    final = torch.load(run_dir_for(flower) / "ckpt" / "latest.pt", weights_only=True, map_location="cpu")
    assert tensor_devices(final["state"]["model_state"]) == {torch.device("cpu")}


@CUDA
def test_cpu_server_with_cuda_nodes(tmp_path: Path) -> None:
    """The server on the CPU, every node on its GPU (``device`` node config): replies arrive on the CPU."""
    from fedaug.flower.server_app import serve
    from tests.unit.test_flower_engine import metrics

    # Prepare
    config = tiny_config(tmp_path, "flea", **{"engine.device": "cpu"})
    grid = LoopbackGrid(client_app.app, 4)
    for context in grid.contexts.values():
        context.node_config["device"] = "cuda"
    # Execute
    serve(grid, [config], fresh=False, node_timeout=5)
    # Assert: aggregation on the CPU would have failed on replies left on the GPU
    assert [r["round"] for r in metrics(config)] == [1, 2]
    host = client_app.client_host(dump_yaml(config), None, "cuda")
    assert host.device.type == "cuda" and tensor_devices(host.spec.train_x) == {host.device}
