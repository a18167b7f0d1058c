"""engine.cuda_graphs (fedaug.training.step_graphs): on a CPU the recorded-step code runs unrecorded and must
equal the
eager loop bit for bit, for every registered method; which hooks are recorded, which are not and why."""

from __future__ import annotations

import gc
import logging
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch import Tensor, nn

from fedaug import registry
from fedaug.api import ClientData, Method, TrainSettings
from fedaug.config.load import load_config
from fedaug.config.schema import EngineConfig
from fedaug.engine.checkpoint import read_jsonl
from fedaug.engine.simulation import Simulation, round_train_settings
from fedaug.errors import ConfigError
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.methods.scaffold import Scaffold, ScaffoldConfig
from fedaug.runs import resolve
from fedaug.runs.runner import prepare, run_experiment
from fedaug.training import loop as local_training
from fedaug.training import step_graphs
from fedaug.training.loop import (
    BatchableLoss,
    ClientTensors,
    LossFn,
    LossOutput,
    cross_entropy_loss,
    snapshot_state,
    train_local,
)
from fedaug.training.step_graphs import StepGraphs, graph_refusal, graphs_for
from tests.conftest import SMOKE
from tests.helpers import image_spec
from tests.unit.engine.helpers import bn_mlp_float64, unequal_float64_spec
from tests.unit.replay_check import record_on_cpu

SETTINGS = TrainSettings(local_epochs=2, batch_size=8, lr=1e-3, weight_decay=1e-3, cuda_graphs=True)


def _clients() -> list[ClientData]:
    # 20, 13, 9 and 20 samples: batches of 8, 8, 4 / 8, 5 / 9 / 8, 8, 4 (a trailing single sample joins its
    # batch)
    gen = torch.Generator().manual_seed(0)
    data = []
    for cid, size in enumerate([20, 13, 9, 20]):
        y = torch.randint(0, 3, (size,), generator=gen)
        x = torch.randn(size, 8, generator=gen, dtype=torch.float64) + y.view(-1, 1)
        data.append(ClientData(cid, x, y, 3))
    return data


def _train(
    model: nn.Module,
    loss_for: Callable[[ClientData], LossFn],
    settings: TrainSettings,
    *,
    settings_per_client: bool = False,
) -> list[tuple[dict[str, float], Tensor]]:
    """Every client trained from the same start in two rounds (the second at a lower lr). As in the engine, a
    round's clients get one settings object, unless ``settings_per_client`` (as over Flower)."""
    start = snapshot_state(model)
    results = []
    for round_num in (1, 2):
        round_settings = replace(settings, lr=settings.lr * 0.5 ** (round_num - 1))
        for data in _clients():
            model.load_state_dict(start)
            metrics = train_local(
                model,
                data,
                loss_fn=loss_for(data),
                settings=replace(round_settings) if settings_per_client else round_settings,
                generator=torch.Generator().manual_seed(10 * round_num + data.client_id),
            )
            results.append((metrics, torch.cat([v.flatten().double() for v in model.state_dict().values()])))
    return results


def _assert_same(a: list[tuple[dict[str, float], Tensor]], b: list[tuple[dict[str, float], Tensor]]) -> None:
    for (metrics_a, state_a), (metrics_b, state_b) in zip(a, b, strict=True):
        assert metrics_a == metrics_b
        assert torch.equal(state_a, state_b)


def _fresh_model() -> nn.Module:
    torch.manual_seed(0)
    return bn_mlp_float64()


def test_recorded_steps_equal_the_eager_loop_bit_for_bit() -> None:
    eager = _train(_fresh_model(), lambda d: cross_entropy_loss, replace(SETTINGS, cuda_graphs=False))
    model = _fresh_model()
    graphed = _train(model, lambda d: cross_entropy_loss, SETTINGS)
    _assert_same(eager, graphed)
    counts = step_graphs._GRAPHS[model].counts
    # 2 rounds of 2 epochs of 3 + 2 + 1 + 3 batches; FedAvg's hook is one object for the whole run, so the
    # shapes 8, 4, 5 and 9 are each recorded once, when first met, and every step replays
    assert counts == {"captured": 4, "replayed": 2 * 2 * (3 + 2 + 1 + 3), "eager": 0}


def _objective(
    model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
) -> LossOutput:
    """A hook with per-client constants and per-step draws, like FedLC's shift and FLea's Beta weights."""
    logits = model(x * step["scale"][:, None]) + client["shift"]
    ce = nn.functional.cross_entropy(logits, y)
    return LossOutput(ce + 0.1 * logits.square().mean(), {"ce": ce.detach()})


def _loss_with_state(shared_fn: bool) -> Callable[[ClientData], BatchableLoss]:
    """BatchableLoss of :func:`_objective` per client: draws from a stream of its own, its class counts as the
    shift; ``shared_fn=False`` wraps the objective in a new closure per client, as most methods do."""

    def loss_for(data: ClientData) -> BatchableLoss:
        gen = torch.Generator().manual_seed(data.client_id)

        def draws(batch: int) -> ClientTensors:
            return {"scale": 1 + torch.rand(batch, generator=gen, dtype=torch.float64)}

        shift = torch.bincount(data.y, minlength=3).double().log1p()

        def closure(
            model: nn.Module, x: Tensor, y: Tensor, client: ClientTensors, step: ClientTensors
        ) -> LossOutput:
            return _objective(model, x, y, client, step)

        return BatchableLoss(_objective if shared_fn else closure, {"shift": shift}, draws)

    return loss_for


def test_a_hook_with_client_constants_and_draws_is_recorded_once_and_fed_each_clients_values() -> None:
    eager = _train(_fresh_model(), _loss_with_state(True), replace(SETTINGS, cuda_graphs=False))
    model = _fresh_model()
    _assert_same(eager, _train(model, _loss_with_state(True), SETTINGS))
    assert step_graphs._GRAPHS[model].counts["captured"] == 4


@pytest.mark.parametrize(("per_client", "captured"), [(False, 2 * 4), (True, 2 * (2 + 2 + 1 + 2))])
def test_a_hook_built_anew_per_client_is_recorded_once_a_round_or_once_a_client(
    per_client: bool, captured: int
) -> None:
    # A closure per client (as FedProx, FLea and most methods build): its first client's recording serves the
    # round's other clients (same code, same settings object), fed their constants and draws; over Flower,
    # where every client brings its own settings, each client records its own shapes.
    eager = _train(_fresh_model(), _loss_with_state(False), replace(SETTINGS, cuda_graphs=False))
    model = _fresh_model()
    graphed = _train(model, _loss_with_state(False), SETTINGS, settings_per_client=per_client)
    _assert_same(eager, graphed)
    assert step_graphs._GRAPHS[model].counts == {"captured": captured, "replayed": 36, "eager": 0}


def _fake_capture(fail: bool) -> Callable[[StepGraphs, Callable[[], LossOutput]], Callable[[], LossOutput]]:
    """What ``_capture`` does on a GPU, without one: warm-up steps that change the weights and the optimizer
    state (which ``_record`` must undo), then the step itself as the replay, or a capture error."""

    def capture(
        self: StepGraphs, body: Callable[[], LossOutput], *, warm_up: bool
    ) -> Callable[[], LossOutput]:
        for _ in range(step_graphs.WARMUP_STEPS if warm_up else 0):
            body()
        if fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return body

    return capture


@pytest.mark.parametrize("fail", [False, True])
def test_warm_up_steps_are_undone_and_a_failed_capture_falls_back_to_eager(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, fail: bool
) -> None:
    eager = _train(_fresh_model(), _loss_with_state(True), replace(SETTINGS, cuda_graphs=False))
    model = _fresh_model()
    graphs = graphs_for(model, list(model.parameters()), SETTINGS)
    graphs.capture = True  # the GPU code path: warm up, capture, restore
    monkeypatch.setattr(StepGraphs, "_capture", _fake_capture(fail))
    with caplog.at_level(logging.WARNING, logger="fedaug.training.step_graphs"):
        graphed = _train(model, _loss_with_state(True), SETTINGS)
    _assert_same(eager, graphed)
    warnings = [r.getMessage() for r in caplog.records]
    if fail:  # tried once, at client 1's first step; eager from then on
        assert graphs.counts == {"captured": 0, "replayed": 0, "eager": 36}
        assert warnings == [
            "engine.cuda_graphs: this loss hook could not be recorded, so it runs eagerly "
            "(operation not permitted when stream is capturing)"
        ]
    else:
        assert graphs.counts["captured"] == 4 and warnings == []


REFUSALS: list[tuple[TrainSettings, str]] = [
    (replace(SETTINGS, optimizer="sgd"), "optimizer 'sgd' (graphs implement adam)"),
    (replace(SETTINGS, reset_optimizer_every_step=True), "train.reset_optimizer_every_step"),
    (replace(SETTINGS, batchnorm_eval=True), "BatchNorm in eval mode while training"),
    (replace(SETTINGS, precision="bf16"), "engine.precision=bf16"),
]


@pytest.mark.parametrize(("settings", "reason"), REFUSALS)
def test_settings_graphs_do_not_repeat_are_refused_with_the_reason(
    settings: TrainSettings, reason: str
) -> None:
    assert graph_refusal(_fresh_model(), BatchableLoss(_objective), settings) == reason


def test_hooks_that_are_not_batchable_and_dropout_models_are_refused(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def plain(model: nn.Module, x: Tensor, y: Tensor) -> LossOutput:
        return cross_entropy_loss(model, x, y)

    assert graph_refusal(_fresh_model(), None, SETTINGS) == (
        "the loss hook is not a BatchableLoss (it may hide per-step state from the graph)"
    )
    dropout = nn.Sequential(nn.Linear(8, 3), nn.Dropout(0.5))
    assert graph_refusal(dropout, BatchableLoss(_objective), SETTINGS) == (
        "a model with dropout (randomness in the forward pass)"
    )
    # a refused client trains eagerly, with the results of cuda_graphs off, and the reason is logged once
    monkeypatch.setattr(local_training, "_graph_refusals", set())
    eager = _train(_fresh_model(), lambda d: plain, replace(SETTINGS, cuda_graphs=False))
    with caplog.at_level(logging.INFO, logger="fedaug.training.loop"):
        _assert_same(eager, _train(_fresh_model(), lambda d: plain, SETTINGS))
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        (
            "INFO",  # graphs are on by default on a GPU: a client they do not fit is not a problem
            "engine.cuda_graphs: training without CUDA graphs (the loss hook is not a BatchableLoss "
            "(it may hide per-step state from the graph))",
        )
    ]


def test_the_engine_hands_the_setting_to_every_round() -> None:
    spec = unequal_float64_spec(Path("unused"), FedAvg())
    assert round_train_settings(spec.train_settings, "float32", 3, cuda_graphs=True).cuda_graphs
    assert not round_train_settings(spec.train_settings, "float32", 3).cuda_graphs


def _final_state(run_dir: Path) -> dict[str, Tensor]:
    return torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)["state"]["model_state"]  # type: ignore[no-any-return]


EAGER_BY_DESIGN = {  # method -> why its default trains without recorded steps
    "scaffold": "its default control update reads every step's gradient by parameter hooks",
}
TRAINED_ON = {"centralized": "centralized"}
"""The workspace a method's training runs in, where not the clients' (centralized trains on the server)."""


@pytest.mark.parametrize("gpu_path", [False, True], ids=["unrecorded", "checked-replays"])
@pytest.mark.parametrize("name", registry.available("method"))
def test_every_method_trains_with_the_setting_exactly_as_without(
    tmp_path: Path,
    name: str,
    gpu_path: bool,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # On a CPU, recorded or not, a run with engine.cuda_graphs must be the run without it, to the last bit.
    # gpu_path: the GPU's code path (warm-ups undone, capture, replays) with tests/unit/replay_check.py's
    # stand-in for capture, which fails if any replay would not issue the captured step's operations on the
    # captured memory, or if the step reads the device on the host, draws, or makes tensors from host values.
    runs = {}
    replays: list[int] = []
    for graphs in (False, True):
        if graphs and gpu_path:
            record_on_cpu(monkeypatch, replays)
        spec = replace(
            image_spec(tmp_path / str(graphs), name, torch.device("cpu"), rounds=2), cuda_graphs=graphs
        )
        with caplog.at_level(logging.WARNING):
            sim = Simulation(spec)
            sim.run()
        runs[graphs] = (
            read_jsonl(tmp_path / str(graphs) / "metrics.jsonl"),
            _final_state(tmp_path / str(graphs)),
        )
        if graphs:
            recorded = step_graphs._GRAPHS.get(sim.workspace(TRAINED_ON.get(name, "client")))
    (eager_metrics, eager_state), (graph_metrics, graph_state) = runs[False], runs[True]
    assert [{k: v for k, v in r.items() if k != "time"} for r in graph_metrics] == [
        {k: v for k, v in r.items() if k != "time"} for r in eager_metrics
    ]
    for key, value in eager_state.items():
        assert torch.equal(graph_state[key], value), key
    # Every method's local steps are recorded here: each client's 20 samples make batches of 8, 8 and 4, so
    # two shapes, recorded once per run (plain cross-entropy) or once per round (closures, the first client's
    # recording serving the round's other two); FedBR and FedGen are plain CE in these rounds (later their
    # hooks are not BatchableLoss and train eagerly); centralized's pool of 60 makes batches of 8 and 4.
    if name in EAGER_BY_DESIGN:
        assert recorded is None or recorded.counts["captured"] == 0
        return
    assert recorded is not None and recorded.counts["eager"] == 0
    assert recorded.counts["captured"] in (2, 2 * 2), recorded.counts
    if gpu_path:  # every step was a checked replay
        assert len(replays) == recorded.counts["captured"] and sum(replays) == recorded.counts["replayed"] > 0


@pytest.mark.parametrize(("name", "releases"), [("fedavg", 0), ("fedprox", 0), ("flea", 1)])
def test_a_new_rounds_hook_gives_the_dropped_recordings_memory_back(
    tmp_path: Path, name: str, releases: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On the GPU's path (tests/unit/replay_check.py's capture): a new hook drops the recordings of the last
    # one at its round's first client and gives their memory pools back: FLea's mixing hook replaces its
    # warm-up round's once; FedAvg's one hook, and FedProx's with its rounds_key, keep their recordings for
    # the run. tests/gpu checks the memory itself, with a hook recorded again every round.
    record_on_cpu(monkeypatch, [])
    released: list[int] = []
    monkeypatch.setattr(step_graphs, "release_memory", lambda: released.append(1))
    spec = replace(image_spec(tmp_path, name, torch.device("cpu"), rounds=3), cuda_graphs=True)
    sim = Simulation(spec)
    sim.run()
    assert len(released) == releases
    assert step_graphs._GRAPHS[sim.workspace("client")].counts["captured"] == 2 * (releases + 1)


def _registered(name: str) -> Callable[[], Method]:
    """A maker of the registered method ``name`` with its defaults."""
    return lambda: registry.get("method", name)()


ACROSS_ROUNDS = {  # method (as built) -> the rounds whose hooks are recorded, in a 4-round run
    "feddecorr": (_registered("feddecorr"), 1),
    "fedlc": (_registered("fedlc"), 1),
    "fedrs": (_registered("fedrs"), 1),
    "fedntd": (_registered("fedntd"), 1),
    "moon": (_registered("moon"), 1),
    "fedprox": (_registered("fedprox"), 1),
    "fedprox_augmix": (_registered("fedprox_augmix"), 1),
    "fedmix": (_registered("fedmix"), 1),
    # the corrections c - c_i come as client tensors; the default control update reads the steps' gradients by
    # hooks and trains eagerly, so the recorded path is the paper's displacement form
    "scaffold": (lambda: Scaffold(ScaffoldConfig(control_update="displacement")), 1),
    "feddyn": (_registered("feddyn"), 1),  # g_k and the broadcast weights come as client tensors
    "fedntd_augmix": (_registered("fedntd_augmix"), 1),
    "fedaugmix": (_registered("fedaugmix"), 1),  # AugMix on plain cross-entropy
    "flea, constant lambda2": (lambda: FLea(FLeaConfig(decor_schedule="constant")), 2),  # warm-up, then mix
    # lambda2 reaches the step as a tensor: the official schedule's changing lambda2 needs no new recording
    "flea, official lambda2": (lambda: FLea(FLeaConfig(decor_schedule="official")), 2),
    "flea, no decorrelation": (lambda: FLea(FLeaConfig(decor_weight=0.0)), 2),
}


@pytest.mark.parametrize("case", list(ACROSS_ROUNDS))
def test_hooks_with_a_rounds_key_are_recorded_once_for_every_round(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # BatchableLoss.rounds_key: a hook whose round state reaches it as client tensors (FLea's buffer, padded
    # to a power of two; MOON's previous model) or lives in workspace models loaded in place (the teachers) is
    # recorded once and replayed in later rounds, unless the key changes (FLea under bf16, where lambda2 is in
    # the key; in float32 it reaches the step as a tensor). On the GPU's path (replays checked), 4 rounds, the
    # run must be the eager run bit for bit: a replay reading a stale round's tensors would change it.
    make, recording_rounds = ACROSS_ROUNDS[case]
    runs = {}
    released: list[int] = []
    monkeypatch.setattr(step_graphs, "release_memory", lambda: released.append(1))
    for graphs in (False, True):
        if graphs:
            record_on_cpu(monkeypatch, [])
        spec = image_spec(tmp_path / str(graphs), "fedavg", torch.device("cpu"), rounds=4)
        sim = Simulation(replace(spec, method=make(), cuda_graphs=graphs))
        sim.run()
        runs[graphs] = (
            read_jsonl(tmp_path / str(graphs) / "metrics.jsonl"),
            _final_state(tmp_path / str(graphs)),
        )
    strip = [{k: v for k, v in r.items() if k != "time"} for r in runs[False][0]]
    assert [{k: v for k, v in r.items() if k != "time"} for r in runs[True][0]] == strip
    for key, value in runs[False][1].items():
        assert torch.equal(runs[True][1][key], value), key
    counts = step_graphs._GRAPHS[sim.workspace("client")].counts
    # two batch shapes per recording round (8 and 4 samples; with AugMix 24 and 12)
    assert counts["captured"] == 2 * recording_rounds and counts["eager"] == 0, counts
    assert len(released) == recording_rounds - 1


def test_recorded_steps_do_not_keep_their_model_alive() -> None:
    # A sweep worker runs one run after another: each run's workspace model, and on a GPU its graphs' memory,
    # must go with the run.
    model = _fresh_model()
    _train(model, lambda d: cross_entropy_loss, SETTINGS)
    assert model in step_graphs._GRAPHS
    alive = weakref.ref(model)
    del model
    gc.collect()
    assert alive() is None


def test_a_cpu_run_ignores_the_setting_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.cuda_graphs=true", "engine.device=cpu"])
    with caplog.at_level(logging.WARNING, logger="fedaug.runs.resolve"):
        run = prepare(config, tmp_path / "run")
    assert config.engine.cuda_graphs and not run.spec.cuda_graphs
    assert [r.getMessage() for r in caplog.records] == [
        "engine.cuda_graphs needs a CUDA device; this run trains on the CPU without graphs"
    ]


@pytest.mark.parametrize(
    ("value", "batched", "deterministic", "device", "on"),
    [
        ("auto", False, False, "cuda", True),  # the default records on a GPU
        ("auto", False, False, "cpu", False),
        ("auto", True, False, "cuda", False),  # batched rounds do not record
        ("auto", False, True, "cuda", False),  # resuming bit-exactly with graphs is untested on a GPU
        (True, True, True, "cuda", True),  # asked for: recorded wherever the engine can
        (True, False, False, "cpu", False),
        (False, False, False, "cuda", False),
    ],
)
def test_engine_cuda_graphs_resolves_per_device(
    value: bool | str, batched: bool, deterministic: bool, device: str, on: bool
) -> None:
    engine = EngineConfig(cuda_graphs=value, batched_clients=batched, deterministic=deterministic)
    assert resolve.cuda_graphs_on(engine, torch.device(device)) is on


def test_a_cpu_run_with_the_default_says_nothing_about_graphs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # "auto" is a true string: read as a bool it would warn "needs a CUDA device" on every CPU run
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.device=cpu"])
    with caplog.at_level(logging.INFO, logger="fedaug.runs.resolve"):
        run = prepare(config, tmp_path / "run")
    assert config.engine.cuda_graphs == "auto" and not run.spec.cuda_graphs
    assert [r.getMessage() for r in caplog.records if "graphs" in r.getMessage()] == []


def test_engine_cuda_graphs_accepts_auto_true_false_only(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^engine.cuda_graphs must be one of auto, True, False, got 'always'$"
    ):
        load_config([SMOKE], [f"out_dir={tmp_path}", "engine.cuda_graphs=always"])
    with pytest.raises(ConfigError, match=r"^engine.cuda_graphs must be one of auto, True, False, got 1$"):
        EngineConfig(cuda_graphs=1)  # type: ignore[arg-type]  # 1 is not True
    with pytest.raises(ConfigError, match=r"^engine.cuda_graphs must be of type bool or str, got 2 \(int\)$"):
        load_config([SMOKE], [f"out_dir={tmp_path}", "engine.cuda_graphs=2"])


def test_a_run_with_graphs_says_so_when_it_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config([SMOKE], [f"out_dir={tmp_path}", "engine.device=cpu", "train.rounds=1"])
    with caplog.at_level(logging.INFO, logger="fedaug.runs.runner"):
        run_experiment(config)
        monkeypatch.setattr(resolve, "cuda_graphs_on", lambda engine, device: True)  # as on a GPU
        run_experiment(config, fresh=True)
    starts = [r.getMessage() for r in caplog.records if r.getMessage().startswith("run ")]
    assert len(starts) == 2 and starts[0].endswith(", on cpu"), starts
    assert starts[1] == starts[0] + ", local steps as CUDA graphs"
