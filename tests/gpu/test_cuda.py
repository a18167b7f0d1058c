"""The device seam on CUDA: every method, device-independent randomness, resume, cross-device checkpoints.

Skipped without a GPU (``tests/gpu/conftest.py``). On a GPU machine::

    PYTHONPATH=src:. python3 -m pytest -q tests/gpu
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import fedaug.training.loop as local_training
from fedaug import registry
from fedaug.api import ClientData, TrainSettings
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.models import build_model
from fedaug.runtime.device import host_to_device, resolve_device, set_deterministic, tensor_devices
from fedaug.script import load_config
from fedaug.sweeps import sweep
from fedaug.training import step_graphs
from tests.helpers import bn_model, image_spec, killed_in_round, run_files, run_on_device
from tests.unit.engine.helpers import assert_same_run, unequal_float64_spec


@pytest.fixture
def cuda() -> torch.device:
    return resolve_device("cuda")


@pytest.fixture
def deterministic() -> Iterator[None]:
    set_deterministic(True)
    yield
    set_deterministic(False)


@pytest.mark.parametrize("name", registry.available("method"))
def test_method_runs_two_rounds_on_cuda_with_its_state_there(
    tmp_path: Path, name: str, cuda: torch.device
) -> None:
    run_on_device(tmp_path, name, cuda)


@pytest.mark.parametrize("name", ["fedavg", "flea"])
def test_batched_clients_equal_the_sequential_loop_on_cuda_in_float64(
    tmp_path: Path, name: str, cuda: torch.device
) -> None:
    # The CPU test's three rounds of unequal clients (tests/unit/engine/test_batched.py), on CUDA: the vmapped
    # step and the functional Adam repeat the sequential loop there too (FLea: buffer draws and Beta weights)
    def spec(run_dir: Path, batched: bool) -> Any:
        base = unequal_float64_spec(run_dir, registry.get("method", name)())
        run = dataclasses.replace(base.run, device=cuda)
        return dataclasses.replace(base, run=run, batched_clients=batched)

    Simulation(spec(tmp_path / "seq", False)).run()
    Simulation(spec(tmp_path / "bat", True)).run()
    assert_same_run(tmp_path / "seq", tmp_path / "bat")


def _draws(
    run_dir: Path, device: torch.device, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[Any], list[list[int]], list[Tensor]]:
    """FLea for 3 rounds on ``device``: the sampled clients, every batch's sample order, every Beta draw."""
    orders: list[list[int]] = []
    lams: list[Tensor] = []
    batch_indices = local_training.batch_indices
    mix_weights = FLea._mix_weights

    def record_batches(order: Tensor, batch_size: int) -> Iterator[Tensor]:
        for idx in batch_indices(order, batch_size):
            orders.append(idx.cpu().tolist())
            yield idx

    def record_lam(self: FLea, size: int, rng: Any) -> Tensor:
        lam = mix_weights(self, size, rng)
        lams.append(lam.detach().cpu())
        return lam

    monkeypatch.setattr(local_training, "batch_indices", record_batches)
    monkeypatch.setattr(FLea, "_mix_weights", record_lam)
    Simulation(image_spec(run_dir, "flea", device, rounds=3)).run()
    monkeypatch.undo()
    clients = [r["clients"] for r in read_jsonl(run_dir / "metrics.jsonl")]
    return clients, orders, lams


def test_cpu_and_cuda_draw_the_same_clients_batches_and_beta_weights(
    tmp_path: Path, cuda: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cpu = _draws(tmp_path / "cpu", torch.device("cpu"), monkeypatch)
    on_cuda = _draws(tmp_path / "cuda", cuda, monkeypatch)
    assert on_cpu[0] == on_cuda[0]
    assert on_cpu[1] == on_cuda[1] and len(on_cpu[1]) > 0
    assert len(on_cpu[2]) == len(on_cuda[2]) > 0
    assert all(torch.equal(a, b) for a, b in zip(on_cpu[2], on_cuda[2], strict=True))


def test_cuda_run_killed_and_resumed_equals_uninterrupted(
    tmp_path: Path, cuda: torch.device, deterministic: None
) -> None:
    Simulation(image_spec(tmp_path / "full", "flea", cuda, rounds=4)).run()
    cut = image_spec(tmp_path / "cut", "flea", cuda, rounds=4)
    killed = killed_in_round(FLea, kill_round=3, calls_before_kill=1)  # at the second client of round 3
    with pytest.raises(KeyboardInterrupt):
        Simulation(dataclasses.replace(cut, method=killed)).run()
    Simulation(cut).run()
    assert run_files(tmp_path / "cut") == run_files(tmp_path / "full")


@pytest.mark.parametrize("first", ["cpu", "cuda"])
def test_checkpoint_resumes_on_the_other_device(tmp_path: Path, cuda: torch.device, first: str) -> None:
    devices = {"cpu": torch.device("cpu"), "cuda": cuda}
    second = devices["cuda" if first == "cpu" else "cpu"]
    Simulation(image_spec(tmp_path, "flea", devices[first], rounds=2)).run()
    sim = Simulation(image_spec(tmp_path, "flea", second, rounds=4))
    summary = sim.run()
    assert [r["round"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]
    assert summary["rounds"] == 4
    ckpt = torch.load(tmp_path / "ckpt" / "latest.pt", weights_only=True)
    assert tensor_devices(ckpt["state"]) == {second}


def test_bf16_autocasts_on_cuda(tmp_path: Path, cuda: torch.device) -> None:
    from fedaug.runtime.precision import autocast

    model = bn_model().to(cuda)
    with autocast(model, "bf16"):
        hidden = model.encode(torch.randn(4, 1, 2, 4, device=cuda), 0)
        logits = model(torch.randn(4, 1, 2, 4, device=cuda))
    assert hidden.dtype == torch.bfloat16
    assert logits.dtype == torch.float32  # the classifier's output is cast back


def _sync_warnings(block: Any) -> list[str]:
    """``file:line`` of every synchronising CUDA call PyTorch makes in ``block`` (sync debug mode "warn")."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            block()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    # not the notice the first "warn" of a process gives ("Synchronization debug mode is a prototype feature")
    return [
        f"{w.filename}:{w.lineno}"
        for w in caught
        if "synchroniz" in str(w.message) and "prototype" not in str(w.message)
    ]


def test_host_to_device_does_not_wait_for_the_gpu(cuda: torch.device) -> None:
    x = torch.arange(1000)
    torch.cuda._sleep(10_000_000)  # queued work that a waiting copy would have to wait for
    moved: list[Tensor] = []
    assert _sync_warnings(lambda: moved.append(host_to_device(x, cuda, dtype=torch.float32))) == []
    assert moved[0].device.type == "cuda" and torch.equal(moved[0].cpu(), x.float())


def test_local_training_waits_for_the_gpu_once_per_client(cuda: torch.device) -> None:
    """Five epochs of batches, the batch orders drawn on the CPU: the one wait is the final read of the losses
    (the non-finite check and the logged means)."""
    model = build_model("mlp", num_classes=3, input_shape=(8,)).to(cuda)
    data = ClientData(0, torch.randn(40, 8, device=cuda), torch.randint(0, 3, (40,), device=cuda), 3)

    def train() -> None:
        settings = TrainSettings(local_epochs=5, batch_size=8)
        generator = torch.Generator().manual_seed(0)
        local_training.train_local(
            model, data, loss_fn=local_training.cross_entropy_loss, settings=settings, generator=generator
        )

    syncs = _sync_warnings(train)
    assert len(syncs) == 1, syncs


def test_evaluation_waits_for_the_gpu_once(cuda: torch.device) -> None:
    from fedaug.engine.evaluation import evaluate

    model = build_model("mlp", num_classes=3, input_shape=(8,)).to(cuda)
    x, y = torch.randn(50, 8, device=cuda), torch.randint(0, 3, (50,), device=cuda)
    results: list[dict[str, float]] = []
    syncs = _sync_warnings(lambda: results.append(evaluate(model, x, y, num_classes=3, batch_size=16)))
    assert len(syncs) == 1, syncs
    assert 0.0 <= results[0]["acc"] <= 1.0


@pytest.mark.parametrize("name", ["fedavg", "flea", "flea_constant_lambda2"])
def test_cuda_graphs_train_as_the_eager_loop_on_cuda(tmp_path: Path, name: str, cuda: torch.device) -> None:
    # engine.cuda_graphs on the CPU test's three float64 rounds of unequal clients: recorded steps (FedAvg
    # once per run, FLea's warm-up in round 1 and its mixing steps once, in round 2, replayed in round 3 with
    # that round's buffer and lambda2 as client tensors) equal the eager loop up to the fused Adam's rounding.
    def method() -> Any:
        if name == "flea_constant_lambda2":  # the same, with lambda2 the same every round
            return FLea(FLeaConfig(decor_schedule="constant"))
        return registry.get("method", name)()

    def spec(run_dir: Path, graphs: bool) -> Any:
        base = unequal_float64_spec(run_dir, method())
        return dataclasses.replace(base, run=dataclasses.replace(base.run, device=cuda), cuda_graphs=graphs)

    Simulation(spec(tmp_path / "eager", False)).run()
    sim = Simulation(spec(tmp_path / "graphs", True))
    sim.run()
    counts = step_graphs._GRAPHS[sim.workspace("client")].counts
    assert counts["captured"] > 0 and counts["replayed"] > 0 and counts["eager"] == 0, counts
    eager = read_jsonl(tmp_path / "eager" / "metrics.jsonl")
    graphed = read_jsonl(tmp_path / "graphs" / "metrics.jsonl")
    for e, g in zip(eager, graphed, strict=True):
        assert g["clients"] == e["clients"] and g["train/steps"] == e["train/steps"]
        for key in e:
            if key.startswith(("train/", "test/acc", "test/loss")):
                assert g[key] == pytest.approx(e[key], rel=1e-6, abs=1e-6), key
    final = {
        d: torch.load(tmp_path / d / "ckpt" / "latest.pt", weights_only=True)["state"]["model_state"]
        for d in ("eager", "graphs")
    }
    for key, value in final["eager"].items():
        torch.testing.assert_close(final["graphs"][key], value, rtol=1e-6, atol=1e-6)


def test_recorded_local_training_waits_for_the_gpu_once_per_client(cuda: torch.device) -> None:
    """With engine.cuda_graphs: the client that records (warm-up, capture) and the one that replays each wait
    once, for the final read; recording must not stall runs that share the GPU."""
    model = bn_model().to(cuda)
    data = ClientData(0, torch.randn(40, 1, 2, 4, device=cuda), torch.randint(0, 3, (40,), device=cuda), 3)
    settings = TrainSettings(local_epochs=5, batch_size=8, cuda_graphs=True)

    def train() -> None:
        generator = torch.Generator().manual_seed(0)
        local_training.train_local(
            model, data, loss_fn=local_training.cross_entropy_loss, settings=settings, generator=generator
        )

    recording, replaying = _sync_warnings(train), _sync_warnings(train)
    assert step_graphs._GRAPHS[model].counts["captured"] == 1
    assert len(recording) == 1, recording
    assert len(replaying) == 1, replaying


def test_a_hook_that_reads_on_the_host_falls_back_to_eager_on_cuda(
    cuda: torch.device, caplog: pytest.LogCaptureFixture
) -> None:
    # .item() inside a capture is an error on the GPU: the hook trains eagerly instead, with a warning, and
    # the weights the warm-up steps changed are put back (the same result as the eager loop, to rounding).
    # float64: in float32 the gradient of the bias before BatchNorm is rounding noise, which Adam scales to
    # steps of about lr, differently in the fused and the foreach Adam (0.0025 apart after 10 steps, H100).
    def reads(model: torch.nn.Module, x: Tensor, y: Tensor, client: Any, step: Any) -> Any:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        if loss.item() > 1e9:  # a host read of a device value
            raise AssertionError("unreachable")
        return local_training.LossOutput(loss, {})

    results = {}
    for graphs in (False, True):
        torch.manual_seed(0)
        model = bn_model().to(cuda, torch.float64)
        data = ClientData(
            0,
            torch.randn(40, 1, 2, 4, device=cuda, dtype=torch.float64),
            torch.randint(0, 3, (40,), device=cuda),
            3,
        )
        with caplog.at_level("WARNING", logger="fedaug.training.step_graphs"):
            local_training.train_local(
                model,
                data,
                loss_fn=local_training.BatchableLoss(reads),
                settings=TrainSettings(local_epochs=2, batch_size=8, cuda_graphs=graphs),
                generator=torch.Generator().manual_seed(0),
            )
        results[graphs] = torch.cat([v.flatten().double() for v in model.state_dict().values()])
    assert step_graphs._GRAPHS[model].counts["captured"] == 0
    messages = [r.getMessage() for r in caplog.records if "could not be recorded" in r.getMessage()]
    assert len(messages) == 1 and "captur" in messages[0], messages
    torch.testing.assert_close(results[True], results[False], rtol=1e-9, atol=1e-9)
    # the failed capture left the random generator in capture mode: the process's next draw on the GPU failed
    assert torch.randn(3, device=cuda).isfinite().all()


def _reserved_per_round(cuda: torch.device, rounds: int) -> list[int]:
    """Memory the process reserves after each of ``rounds`` rounds of one client whose hook is a new closure
    every round (as FLea's is): each round drops the last round's recordings and records again."""
    model = bn_model().to(cuda)
    data = ClientData(0, torch.randn(44, 1, 2, 4, device=cuda), torch.randint(0, 3, (44,), device=cuda), 3)

    def closure() -> Any:
        def fn(model: torch.nn.Module, x: Tensor, y: Tensor, client: Any, step: Any) -> Any:
            return local_training.LossOutput(torch.nn.functional.cross_entropy(model(x), y), {})

        return fn

    reserved = []
    for round_num in range(rounds):
        local_training.train_local(  # batches of 8 and one of 4: two shapes recorded per round
            model,
            data,
            loss_fn=local_training.BatchableLoss(closure()),
            settings=TrainSettings(local_epochs=1, batch_size=8, cuda_graphs=True),  # new object: new round
            generator=torch.Generator().manual_seed(round_num),
        )
        torch.cuda.synchronize(cuda)
        reserved.append(torch.cuda.memory_reserved(cuda))
    assert step_graphs._GRAPHS[model].counts["captured"] == 2 * rounds
    return reserved


def test_dropped_recordings_give_their_memory_back_on_cuda(
    cuda: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each capture has a memory pool of its own, which the process kept after the recording was dropped: FLea
    # reserved 7 GiB in 20 rounds and 16 packed FLea runs filled an 80 GiB H100. Released when a round's new
    # hook drops them, the reserved memory stops growing after the first rounds; kept (the check that this
    # test can fail), it grows every round.
    torch.cuda.empty_cache()
    released = _reserved_per_round(cuda, 12)
    assert released[-1] <= released[2], [r >> 20 for r in released]
    monkeypatch.setattr(step_graphs, "release_memory", lambda: None)
    torch.cuda.empty_cache()
    kept = _reserved_per_round(cuda, 12)
    assert kept[-1] > kept[2], [r >> 20 for r in kept]


@pytest.mark.parametrize("name", registry.available("method"))
def test_every_method_records_its_steps_on_cuda(
    tmp_path: Path, name: str, cuda: torch.device, caplog: pytest.LogCaptureFixture
) -> None:
    # tests/unit/test_step_graphs.py runs the recording code unrecorded on the CPU; here every method's hook
    # is really captured (no host read, no copy from host memory, no CPU tensor inside a step) and replayed.
    spec = dataclasses.replace(image_spec(tmp_path, name, cuda, rounds=2), cuda_graphs=True)
    with caplog.at_level("WARNING", logger="fedaug.training.step_graphs"):
        sim = Simulation(spec)
        sim.run()
    assert [r.getMessage() for r in caplog.records if r.name == "fedaug.training.step_graphs"] == []
    counts = step_graphs._GRAPHS[sim.workspace("client")].counts
    assert counts["captured"] > 0 and counts["eager"] == 0, counts


def test_a_sweep_worker_gives_its_cached_memory_back_on_cuda(
    tmp_path: Path, cuda: torch.device, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A sweep's worker process outlives its runs: after each one, what the allocator keeps cached goes back to
    # the GPU for the runs beside it. Without the release (the check that this test can fail) it stays.
    def reserved_after_a_run(seed: int) -> int:
        overrides = {"engine.device": "cuda", "out_dir": str(tmp_path), "seed": seed, "method": "flea"}
        overrides["engine.cuda_graphs"] = False  # a round that records again empties the cache too
        outcome = sweep.execute(load_config("smoke", overrides=overrides), quiet=True)
        assert outcome.status == "finished", outcome.error
        torch.cuda.synchronize(cuda)
        return torch.cuda.memory_reserved(cuda)

    # Whether a run left cached memory behind also depends on what earlier tests left in the process (its
    # tensors can fit in their segments' free space), so the release itself is counted too.
    emptied = []
    empty_cache = torch.cuda.empty_cache
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1) or empty_cache())
    reserved_after_a_run(0)  # what stays for the process (cuBLAS's workspace, the CUDA context's) is made
    empty_cache()
    before = torch.cuda.memory_reserved(cuda)
    emptied.clear()
    assert reserved_after_a_run(1) <= before
    assert emptied == [1]
    monkeypatch.setattr(sweep, "release_cached_memory", lambda: False)
    reserved_after_a_run(2)
    assert emptied == [1]
