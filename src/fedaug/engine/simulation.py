"""The in-process simulator: the round loop, written once for every method.

One process holds all client data as tensors (each client is a list of indices into the train set) and one
workspace model that clients load the broadcast weights into, so nothing is copied per client and memory does
not grow with the number of idle clients. Every round::

    sample -> payload -> client_update x k -> server_update -> share phase -> evaluate -> log -> checkpoint
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch
from torch import Tensor
from tqdm import tqdm

from fedaug.api import (
    ClientContext,
    ClientData,
    ClientShare,
    ClientUpdate,
    Method,
    Payload,
    RunContext,
    ServerState,
    ShareRequest,
    TrainSettings,
    client_eval_states_of,
    fedavg_rounds_of,
)
from fedaug.engine.batched.modes import BATCHED_MODES
from fedaug.engine.batched.stacked import batching_refusal, round_clients, train_round_batched
from fedaug.engine.checkpoint import RunStore, check_run_checkpoint, read_jsonl, summarize, write_json
from fedaug.engine.eval_cache import ClientEvalCache
from fedaug.engine.evaluation import evaluate, evaluate_weights
from fedaug.engine.fairness import (
    client_accuracies,
    fairness_summary,
    local_metrics,
    mean_client,
    own_model_accuracies,
)
from fedaug.engine.progress import JobEta, LaterRun, RoundClock, format_duration
from fedaug.engine.round_log import log_digest
from fedaug.engine.sampling import sample_clients
from fedaug.errors import ClientError, FedaugError
from fedaug.models.base import SplitModel
from fedaug.plugins import changed_inputs
from fedaug.runtime import startup
from fedaug.runtime.memory_format import apply_channels_last
from fedaug.runtime.seeding import seed_for, torch_generator
from fedaug.training.client import keeps_client_state
from fedaug.training.loop import load_weights, snapshot_state
from fedaug.types import ClientId, Metrics, StateDict

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class SimulationSpec:
    """Everything the simulator needs, already resolved from the config.

    ``train_settings`` is the local training schedule (the round's lr decay included); ``precision``
    (``engine.precision``) is the one source of the run's precision: the engine sets it into every round's
    :class:`~fedaug.api.TrainSettings` (:func:`round_train_settings`) and evaluates in it.
    """

    method: Method
    model_fn: Callable[[], SplitModel]
    train_x: Tensor
    train_y: Tensor
    test_x: Tensor
    test_y: Tensor
    client_indices: list[Tensor]
    run: RunContext
    train_settings: Callable[[int], TrainSettings]
    clients_per_round: int
    run_dir: Path
    eval_batch_size: int = 1024
    progress: bool = True
    keep_checkpoints: tuple[int, ...] = ()
    precision: str = "float32"
    batched_clients: bool | str = False  # engine.batched_clients: False, True (vmap) or "padded"
    cuda_graphs: bool = False  # engine.cuda_graphs, resolved: only on a CUDA device
    channels_last: str = "none"  # resolved engine.channels_last: none, eval or all (engine/memory_format.py)
    # Per-client local test sets (indices into train_x) for client-level fairness, evaluated every
    # local_eval_every rounds and at the last round (engine/fairness.py).
    local_test_indices: list[Tensor] | None = None
    local_eval_every: int = 1
    # What the command runs after this run (fedaug run of several methods): the progress line ends with the
    # whole job's time left, so that the time left of its first run does not read as the job's.
    job: JobEta | None = None
    # Who else hears of each round (an experiment tracker's writer, fedaug.runs.tracking): the engine knows
    # only this protocol, and imports no tracking library.
    observers: tuple[RoundObserver, ...] = ()
    # The run's result config, kept in every checkpoint (fedaug.runs.verify.check_checkpoint_identity)
    identity: Mapping[str, Any] | None = None
    # The SHA-256 of the plugin and data files it reads (fedaug.runs.verify.input_digests): kept in every
    # checkpoint; a resume whose files changed says which, as a WARNING
    inputs: Mapping[str, str] | None = None


class RoundObserver(Protocol):
    """Told of a run's rounds as the engine records them (after a round's checkpoint and log lines)."""

    def start(self, first_round: int, records: list[dict[str, Any]]) -> None:
        """Before round ``first_round`` (1, or the round after a resumed run's checkpoint); ``records``: the
        metrics of the rounds before it, as ``metrics.jsonl`` holds them."""

    def round(self, record: dict[str, Any], timing: dict[str, Any]) -> None:
        """A round recorded: its ``metrics.jsonl`` and ``timings.jsonl`` lines."""

    def finish(self, summary: dict[str, Any]) -> None:
        """The run finished with ``summary`` (``summary.json``)."""


class Simulation:
    """Runs (or resumes) one federated run and writes its run directory."""

    client_state_on_nodes = False
    """Whether the clients' state lives where they train (Flower's nodes), not in the checkpoint: recorded
    in it, so that an in-process resume of such a run is refused (:meth:`_check_client_state_home`)."""

    def __init__(self, spec: SimulationSpec) -> None:
        self.spec = on_device(replace(spec, run=replace(spec.run, workspace=self.workspace)))
        startup.mark("to_device")
        self.store = RunStore(spec.run_dir)
        self._workspaces: dict[str, SplitModel] = {}
        self.client_states: dict[ClientId, Any] = {}
        self._clock = RoundClock()
        self._batching_fallback: str | None = None  # the reason last logged for not batching clients
        # a model per client (KeepsClientModels): each client's last results, computed again once it changed
        self._test_cache: ClientEvalCache[Metrics] = ClientEvalCache()
        self._local_cache: ClientEvalCache[Tensor] = ClientEvalCache()

    def _now(self) -> float:
        """The clock of ``timings.jsonl``: on a GPU it first waits for the queued work, so each phase is
        charged with its own kernels (a few syncs per round, not per step)."""
        if self.spec.run.device.type == "cuda":
            torch.cuda.synchronize(self.spec.run.device)
        return time.perf_counter()

    def workspace(self, key: str) -> SplitModel:
        """A model of the run's architecture, built once per key and reused by every client."""
        if key not in self._workspaces:
            model = self.spec.model_fn().to(self.spec.run.device)
            self._workspaces[key] = apply_channels_last(model, self.spec.channels_last, key)
        return self._workspaces[key]

    def run(self) -> dict[str, Any]:
        """Runs rounds until ``num_rounds``, resuming from the last checkpoint; returns the summary."""
        spec, store = self.spec, self.store
        store.prepare()
        state, records = self._start()
        startup.mark("engine_init")
        cold_start = startup.take()  # this process's start-up, into its first round's timings
        first = state.round_num + 1
        for observer in spec.observers:
            observer.start(first, records)
        bar = tqdm(
            total=spec.run.num_rounds,
            initial=first - 1,
            disable=not self._use_bar(),
            unit="round",
            desc=spec.method.name if spec.job else None,
        )
        on_cpu = spec.run.device.type == "cpu"
        for round_num in range(first, spec.run.num_rounds + 1):
            start, cpu_start = self._now(), time.process_time()
            state, record, timing = self._round(state, round_num)
            records.append(record)
            store.append(store.metrics_path, record)
            tick = self._now()
            # the round's timings so far ride in the checkpoint: a kill before timings.jsonl gets its line
            # loses no round (_start writes it from there)
            startup_entry = {} if cold_start is None else {"startup": cold_start}  # the first round's only
            cold_start = None
            pending = {"round": round_num, **timing, **startup_entry, "round_time": tick - start}
            store.save_checkpoint(
                {
                    "state": vars(state),
                    "client_states": self.client_states,
                    "round_num": round_num,
                    "timing": pending,
                    "metrics_sha256": log_digest(records),  # rounds 1..round_num as metrics.jsonl has them
                    **({"client_state_on_nodes": True} if self.client_state_on_nodes else {}),
                    **({} if spec.identity is None else {"identity": dict(spec.identity)}),
                    **({} if spec.inputs is None else {"inputs": dict(spec.inputs)}),
                }
            )
            if round_num in spec.keep_checkpoints:
                store.keep_checkpoint(round_num)
            end = self._now()
            timing["checkpoint"] = end - tick
            timing["round_time"] = end - start
            if on_cpu:  # the process's CPU seconds: what other processes' load does not inflate (ratios)
                timing["cpu_time"] = time.process_time() - cpu_start
            store.append(store.timings_path, {"round": round_num, **startup_entry, **timing})
            for observer in spec.observers:
                observer.round(record, {"round": round_num, **timing})
            self._report(bar, record, timing, records)
        bar.close()
        summary = {**summarize(records), **fairness_summary(records)}
        write_json(store.summary_path, summary)
        for observer in spec.observers:
            observer.finish(summary)
        return summary

    def _start(self) -> tuple[ServerState, list[dict[str, Any]]]:
        ckpt = self.store.load_checkpoint(map_location=self.spec.run.device)
        if ckpt is not None:
            check_run_checkpoint(ckpt, self.store.ckpt_path)
            self._check_client_state_home(ckpt)
            self.client_states = ckpt["client_states"]
            state = ServerState(**ckpt["state"])
            logger.info("resuming %s after round %d", self.spec.run_dir, state.round_num)
            self._warn_changed_inputs(ckpt.get("inputs"), state.round_num)
            records = self.store.rewind(state.round_num)
            self._recover_timing(ckpt.get("timing"), state.round_num)
            return state, records
        self.store.rewind(0)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed_for(self.spec.run.seed, "init"))
            initial = self.spec.model_fn()  # on the CPU: the same initial weights on every device
        state = self.spec.method.init_server(snapshot_state(initial.to(self.spec.run.device)), self.spec.run)
        state = self._share(state, round_num=0, participants=[])
        return state, []

    def _check_client_state_home(self, ckpt: Mapping[str, Any]) -> None:
        """Refuses to resume in process a run whose clients' state its Flower nodes keep (the checkpoint
        holds none of it): the clients would start afresh, silently unlike the uninterrupted run."""
        if self.client_state_on_nodes or not ckpt.get("client_state_on_nodes"):
            return
        if keeps_client_state(self.spec.method):
            raise FedaugError(
                f"{self.spec.run_dir} was run on Flower: its {self.spec.method.name} clients' state is kept "
                "by the Flower nodes, not in its checkpoint, so resuming it here would start them afresh; "
                "resume it with the fedaug flower command that made it, or start over with --fresh"
            )

    def _warn_changed_inputs(self, recorded: Any, round_num: int) -> None:
        """A WARNING naming each plugin or data file whose content differs from the checkpoint's record."""
        if not isinstance(recorded, dict) or self.spec.inputs is None:
            return
        changed = changed_inputs(recorded, self.spec.inputs)
        if changed:
            logger.warning(
                "resuming %s: %s changed since its rounds 1..%d were trained; the rest are trained with the "
                "new content (--fresh starts over with it)",
                self.spec.run_dir,
                ", ".join(changed),
                round_num,
            )

    def _recover_timing(self, pending: Any, round_num: int) -> None:
        """Appends the checkpoint's timings of ``round_num`` when ``timings.jsonl`` lacks them (a kill between
        the checkpoint and the timings line; its checkpoint time is unknown, so it has none)."""
        timings = read_jsonl(self.store.timings_path)
        missing = not timings or timings[-1].get("round", 0) < round_num
        if missing and isinstance(pending, dict) and pending.get("round") == round_num:
            self.store.append(self.store.timings_path, pending)

    def _round(self, state: ServerState, round_num: int) -> tuple[ServerState, dict[str, Any], Metrics]:
        spec, method = self.spec, self.spec.method
        participants = sample_clients(spec.run.seed, round_num, spec.run.num_clients, spec.clients_per_round)
        train = round_train_settings(
            spec.train_settings, spec.precision, round_num, cuda_graphs=spec.cuda_graphs
        )
        timing: Metrics = {}
        clock = _PhaseClock(self._now)  # one sync per phase boundary on a GPU
        payload = method.payload(state, round_num, train)
        updates = self.run_client_updates(payload, participants, round_num)
        timing["train"] = clock.lap()
        state = method.server_update(state, updates, spec.run)
        timing["aggregate"] = clock.lap()
        state = self._share(state, round_num=round_num, participants=participants)
        timing["share"] = clock.lap()
        own_models = client_eval_states_of(method, state, spec.run)  # None: one global model
        test, client_acc = self._evaluate(state, own_models)
        local = self._evaluate_local(round_num, own_models)
        timing["eval"] = clock.lap()
        record = {"round": round_num, "lr": train.lr, "clients": participants}
        record.update(_mean_metrics(updates))
        record.update({f"test/{k}": v for k, v in test.items() if not k.startswith("class_acc/")})
        record["test/class_acc"] = [v for k, v in test.items() if k.startswith("class_acc/")]
        if client_acc is not None:
            record["test/client_acc"] = client_acc
        if local is not None:
            record.update(local_metrics(local))
            record["local/acc"] = local.tolist()
        record.update(method.round_metrics(state))
        return state, record, timing

    def _share(self, state: ServerState, *, round_num: int, participants: list[ClientId]) -> ServerState:
        method = self.spec.method
        request = method.share_request(
            state, round_num=round_num, participants=participants, run=self.spec.run
        )
        if request is None:
            return state
        shares = self.run_client_shares(request, round_num)
        return method.receive_shares(state, shares, self.spec.run)

    def run_client_updates(
        self, payload: Payload, participants: list[ClientId], round_num: int
    ) -> list[ClientUpdate]:
        """``client_update`` on every participant, in order (the Flower engine sends them to its nodes)."""
        if self.spec.batched_clients and participants:  # stacked weights (engine/batched_modes.py)
            batched = self._batched_updates(payload, participants, round_num)
            if batched is not None:
                self._keep_client_states(batched)
                return batched
        updates: list[ClientUpdate] = []
        for client_id in participants:
            ctx = self._client_context(client_id, round_num, "client")
            call = partial(self.spec.method.client_update, payload, ctx)
            updates.append(self._guard(call, round_num, client_id))
        self._keep_client_states(updates)
        return updates

    def _batched_updates(
        self, payload: Payload, participants: list[ClientId], round_num: int
    ) -> list[ClientUpdate] | None:
        """The round's updates trained at once by the ``engine.batched_clients`` mode, or None (logged once
        per reason) when that mode refuses the method, settings or loss hooks."""
        mode = BATCHED_MODES[self.spec.batched_clients]
        contexts = [self._client_context(c, round_num, "client") for c in participants]
        reason = batching_refusal(self.spec.method, payload, contexts[0])
        clients = None
        if reason is None and mode.refusal is not None:
            clients = round_clients(self.spec.method, payload, contexts)
            reason = mode.refusal(clients)
        if reason is None:
            return train_round_batched(self.spec.method, payload, contexts, mode.trainer, clients)
        if reason != self._batching_fallback:
            self._batching_fallback = reason
            logger.warning("engine.batched_clients: training clients one by one (%s)", reason)
        return None

    def _keep_client_states(self, updates: list[ClientUpdate]) -> None:
        """Stores the state each client keeps for its next participation (MOON's previous model)."""
        for update in updates:
            if update.client_state is not None:
                self.client_states[update.client_id] = update.client_state

    def run_client_shares(self, request: ShareRequest, round_num: int) -> list[ClientShare]:
        """``client_share`` on every client of ``request``, in order (overridden by the Flower engine)."""
        shares = []
        for client_id in request.client_ids:
            ctx = self._client_context(client_id, round_num, "share")
            call = partial(self.spec.method.client_share, request, ctx)
            shares.append(self._guard(call, round_num, client_id))
        return shares

    def _client_context(self, client_id: ClientId, round_num: int, phase: str) -> ClientContext:
        return client_context(
            self.spec,
            client_id,
            round_num,
            phase,
            workspace=self.workspace,
            client_state=self.client_states.get(client_id),
        )

    def _guard(self, call: Callable[[], T], round_num: int, client_id: ClientId) -> T:
        try:
            return call()
        except FedaugError:
            raise
        except Exception as exc:  # re-raised with the round and client attached (fedjax ForEachClientError)
            raise ClientError(
                f"{type(exc).__name__}: {exc}",
                round_num=round_num,
                client_id=client_id,
                method=self.spec.method.name,
            ) from exc

    def _evaluate(
        self, state: ServerState, own_models: list[StateDict] | None
    ) -> tuple[Metrics, list[float] | None]:
        """The test metrics of the global model; with ``own_models`` (a model per client), those of the mean
        client and every client's accuracy (:func:`~fedaug.engine.fairness.mean_client`)."""
        spec, model = self.spec, self.workspace("eval")
        test = partial(
            evaluate,
            x=spec.test_x,
            y=spec.test_y,
            num_classes=spec.run.num_classes,
            batch_size=spec.eval_batch_size,
            precision=spec.precision,
        )
        if own_models is None:
            load_weights(model, spec.method.eval_state(state))
            return test(model), None
        per_client = [  # only the clients whose model changed since its last evaluation (eval_cache.py)
            self._test_cache.get(client, weights, partial(evaluate_weights, model, weights, test))
            for client, weights in enumerate(own_models)
        ]
        return mean_client(per_client), [m["acc"] for m in per_client]

    def _evaluate_local(self, round_num: int, own_models: list[StateDict] | None) -> Tensor | None:
        """Every client's local test accuracy, when due: with the global model :meth:`_evaluate` just loaded,
        or with each client's own model (``own_models``)."""
        spec = self.spec
        due = round_num % spec.local_eval_every == 0 or round_num == spec.run.num_rounds
        if spec.local_test_indices is None or not due:
            if own_models is not None:
                self._local_cache.discard_changed(own_models)  # no trained-over model kept till it is due
            return None
        model, indices = self.workspace("eval"), spec.local_test_indices
        options: dict[str, Any] = {"batch_size": spec.eval_batch_size, "precision": spec.precision}
        if own_models is not None:
            return own_model_accuracies(
                model, own_models, spec.train_x, spec.train_y, indices, cache=self._local_cache, **options
            )
        return client_accuracies(model, spec.train_x, spec.train_y, indices, **options)

    def _use_bar(self) -> bool:
        return self.spec.progress and sys.stderr.isatty()

    def _report(
        self, bar: Any, record: dict[str, Any], timing: Metrics, records: list[dict[str, Any]]
    ) -> None:
        best = max((r["test/acc"] for r in records if "test/acc" in r), default=float("nan"))
        acc = record.get("test/acc", float("nan"))
        left = self._time_left(record["round"], timing["round_time"])  # feeds the clock the job's eta reads
        if self._use_bar():
            job = (
                {"job_eta": self._job_left(record["round"]).removeprefix("job eta ")} if self.spec.job else {}
            )
            bar.set_postfix(
                acc=f"{acc:.4f}", best=f"{best:.4f}", s_per_round=f"{timing['round_time']:.2f}", **job
            )
            bar.update(1)
        elif self.spec.progress:
            logger.info(
                "round %d/%d  acc %.4f  best %.4f  loss %.4f  %.2fs/round  eta %s",
                record["round"],
                self.spec.run.num_rounds,
                acc,
                best,
                record.get("train/loss", float("nan")),
                timing["round_time"],
                left + (f"  {self._job_left(record['round'])}" if self.spec.job else ""),
            )

    def _time_left(self, round_num: int, seconds: float) -> str:
        """The progress line's ``eta``. While a method is still FedAvg (Fed-ZDA's burn-in, FedGen's warm-up,
        CCVR before its calibration) its own rounds have not been timed, so the estimate stops at the last
        FedAvg round and says how many of its own rounds follow; the clock restarts at the first of them.
        """
        spec = self.spec
        burn_in = fedavg_rounds_of(spec.method, spec.run.num_rounds)
        if round_num == burn_in + 1:
            self._clock = RoundClock()  # FedAvg's round times do not cost the method's own rounds
        self._clock.add(seconds)
        if round_num <= burn_in < spec.run.num_rounds:
            own = f"{spec.run.num_rounds - burn_in} {spec.method.name} rounds not yet timed"
            if round_num == burn_in:
                return own
            return f"{format_duration(self._clock.eta(burn_in - round_num))} to round {burn_in}, then {own}"
        return format_duration(self._clock.eta(spec.run.num_rounds - round_num))

    def _job_left(self, round_num: int) -> str:
        """``job eta 38m``: this run's time left (its FedAvg rounds at their median, its own at that times its
        ratio, while it is still FedAvg) and the later runs' (:class:`~fedaug.engine.progress.JobEta`)."""
        spec, job = self.spec, self.spec.job or JobEta()
        burn_in = fedavg_rounds_of(spec.method, spec.run.num_rounds)
        typical = self._clock.typical()
        if round_num <= burn_in < spec.run.num_rounds:  # its own rounds are costed like a later run's
            own = LaterRun(spec.method.name, spec.run.num_rounds - burn_in, ratio=job.ratio)
            job = JobEta((own, *job.later), ratio=1.0)
            return job.text(self._clock.eta(burn_in - round_num), typical)
        return job.text(self._clock.eta(spec.run.num_rounds - round_num), typical)


class _PhaseClock:
    """Laps of a round's phases, each read from one call of ``now`` (the end of a phase is the start of the
    next: on a GPU that is one wait for the queued work per boundary, not two)."""

    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        self._last = now()

    def lap(self) -> float:
        """Seconds since the previous lap (or the clock's start)."""
        now = self._now()
        seconds, self._last = now - self._last, now
        return seconds


def round_train_settings(
    schedule: Callable[[int], TrainSettings], precision: str, round_num: int, *, cuda_graphs: bool = False
) -> TrainSettings:
    """The settings the method gets for ``round_num``: the schedule's, in the run's ``precision`` and with its
    ``engine.cuda_graphs``."""
    return replace(schedule(round_num), precision=precision, cuda_graphs=cuda_graphs)


def on_device(spec: SimulationSpec) -> SimulationSpec:
    """``spec`` with its data (train and test sets, client index lists) on ``spec.run.device``, moved once
    for the whole run: a client's batches are then gathered on the device, never copied from the host."""
    device = spec.run.device
    local = spec.local_test_indices
    return replace(
        spec,
        train_x=spec.train_x.to(device),
        train_y=spec.train_y.to(device),
        test_x=spec.test_x.to(device),
        test_y=spec.test_y.to(device),
        client_indices=[i.to(device) for i in spec.client_indices],
        local_test_indices=None if local is None else [i.to(device) for i in local],
    )


def client_context(
    spec: SimulationSpec,
    client_id: ClientId,
    round_num: int,
    phase: str,
    *,
    workspace: Callable[[str], SplitModel],
    client_state: Any,
) -> ClientContext:
    """The context of one client call (``phase``: ``"client"`` or ``"share"``); Flower's ClientApp uses it."""
    idx = spec.client_indices[client_id]
    data = ClientData(client_id, spec.train_x[idx], spec.train_y[idx], spec.run.num_classes)
    return ClientContext(
        client_id=client_id,
        round_num=round_num,
        data=data,
        model=workspace("client"),
        generator=torch_generator(spec.run.seed, phase, round_num, client_id),
        run=spec.run,
        client_state=client_state,
        workspace=workspace,
    )


def _mean_metrics(updates: list[ClientUpdate]) -> Metrics:
    """Client metrics averaged over the round's clients, weighted by local data size."""
    total = sum(u.num_examples for u in updates)
    keys = sorted({k for u in updates for k in u.metrics})
    return {
        key: sum(u.metrics.get(key, 0.0) * u.num_examples for u in updates) / max(total, 1) for key in keys
    }
