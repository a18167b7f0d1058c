"""The Flower ClientApp: our method's client side on one node, holding one client's partition.

Every message carries a header (``"fedaug.run"``: the experiment config as YAML, the client id and the round),
so the app is generic: the node loads the dataset, makes the same partition as the server (seeded, cached)
and keeps its own part. It answers three message types:

* ``query.partition``: its ``partition-id`` (node config), so the server can address clients by id;
* ``train``: ``method.client_update(payload, ctx)`` -> ClientUpdate;
* ``query.share``: ``method.client_share(request, ctx)`` -> ClientShare.

The :class:`~fedaug.api.ClientContext` is built by the engine's own :func:`client_context` (same data,
same keyed generator, same workspace models), so a client computes exactly what it computes in-process.
Flower rebuilds ClientApps per message (a new process per message in a deployment), so a client's persistent
state (``ClientUpdate.client_state``, e.g. SCAFFOLD's control variate) is never sent to the server: the node
writes it to its own state store (:mod:`fedaug.flower.client_store`; default ``<run dir>/client_state/``,
node config ``state-dir``) after each round its client trained, tagged with the run it belongs to, and reads
back the round the server names in the message header (``state-round``: the client's last training round up
to the server's checkpoint). So the runs of a ``compare`` list served on the same nodes each start without
state, as in the engine, and a run resumed from its checkpoint, by the same or a new Flower run, continues
exactly as the uninterrupted run; the loaded data and models are cached per process.

A node computes on the experiment's ``engine.device`` resolved on the node (``auto``: its GPU if it has one),
or on its own ``device`` node config (``fedaug flower client --device``); its data and workspace models live
there, and the tensors of every message (and of the client state it keeps) are moved there on arrival.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedaug.api import ClientContext, ClientUpdate, Method, Payload
from fedaug.config.load import config_from_dict
from fedaug.engine.simulation import SimulationSpec, client_context, on_device
from fedaug.errors import ConfigError
from fedaug.flower.client_store import ClientStateStore, run_tag, store_root
from fedaug.flower.logs import quiet_actor
from fedaug.flower.records import decode, encode
from fedaug.models.base import SplitModel
from fedaug.runtime.lazy_dynamo import defer_dynamo_import
from fedaug.runtime.machine import use_threads
from fedaug.runtime.memory_format import apply_channels_last
from fedaug.runtime.precision import flush_denormals
from fedaug.training.client import keeps_client_state
from fedaug.types import ClientId

HEADER = "fedaug.run"
STATE_ROUND = "state-round"  # header: the round whose kept state the client starts from (0: none)
STATE_DIR_KEY = "state-dir"  # node config: the folder of the node's state store (default: in the run dir)

app = ClientApp()
T = TypeVar("T")


@dataclasses.dataclass
class ClientHost:
    """One experiment's resolved pieces on a node: spec (data, partition, run), method, workspace models."""

    spec: SimulationSpec
    method: Method
    state_root: Path
    run_tag: str
    flush_denormals: bool = False
    workspaces: dict[str, SplitModel] = dataclasses.field(default_factory=dict)

    @property
    def device(self) -> torch.device:
        """Where this node computes (the experiment's ``engine.device``, or the node's own, resolved here)."""
        return self.spec.run.device

    def workspace(self, key: str) -> SplitModel:
        """A model of the run's architecture per key, on the node's device, in the memory format the engine
        gives that workspace (``engine.channels_last``)."""
        if key not in self.workspaces:
            model = self.spec.model_fn().to(self.device)
            self.workspaces[key] = apply_channels_last(model, self.spec.channels_last, key)
        return self.workspaces[key]

    def store(self, client_id: ClientId) -> ClientStateStore:
        """Where this node keeps ``client_id``'s state of this run."""
        return ClientStateStore(self.state_root / str(client_id), self.run_tag, client_id)


@functools.lru_cache(maxsize=2)
def client_host(
    config_text: str, data_dir: str | None, device: str | None = None, state_dir: str | None = None
) -> ClientHost:
    """The host of the experiment ``config_text`` (cached: Flower rebuilds the app for every message), its
    data on the node's device: ``device`` (the node's ``device`` config) if given, else ``engine.device``;
    its clients' state kept under ``state_dir`` (the node's ``state-dir`` config, then the run's own path
    below it) if given, else in the run dir's ``client_state/``."""
    from fedaug.runs.runner import prepare

    config = config_from_dict(yaml.safe_load(config_text))
    if data_dir:
        config = dataclasses.replace(config, data=dataclasses.replace(config.data, data_dir=data_dir))
    if device:
        config = dataclasses.replace(config, engine=dataclasses.replace(config.engine, device=device))
    use_threads(config.engine.num_threads)
    defer_dynamo_import()  # as a run does: the node's first optimizer imports no torch._dynamo
    prepared = prepare(config, Path(config.out_dir))
    host = ClientHost(
        spec=prepared.spec,
        method=prepared.method,
        state_root=store_root(config, state_dir),
        run_tag=run_tag(config),
        flush_denormals=config.engine.flush_denormals,
    )
    run = dataclasses.replace(prepared.spec.run, workspace=host.workspace)
    host.spec = on_device(dataclasses.replace(prepared.spec, run=run))
    return host


def partition_id(context: Context) -> int:
    """This node's client id: ``partition-id`` of its node config (set by Flower's simulation or by hand)."""
    if "partition-id" not in context.node_config:
        raise ConfigError(
            "this SuperNode has no partition-id; start it with --node-config 'partition-id=<i>' "
            "(fedaug flower client --partition-id <i>)"
        )
    return int(context.node_config["partition-id"])


@dataclasses.dataclass(frozen=True)
class Opened:
    """A message's experiment host, client, round and the round of the client state it starts from."""

    host: ClientHost
    client_id: ClientId
    round_num: int
    state_round: int


def _open(msg: Message, context: Context) -> Opened:
    """The message's host, client and rounds (its header), checked against the node's partition."""
    quiet_actor()  # in a simulation's Ray actor: no shutdown notice outside fedaug's format at the end
    header = msg.content.config_records[HEADER]
    client_id, round_num = int(str(header["client-id"])), int(str(header["round"]))
    if client_id != partition_id(context):
        raise ConfigError(f"a message for client {client_id} reached partition {partition_id(context)}")
    node = {key: context.node_config.get(key) for key in ("data-dir", "device", STATE_DIR_KEY)}
    text = {key: str(value) if value else None for key, value in node.items()}
    host = client_host(str(header["config"]), text["data-dir"], text["device"], text[STATE_DIR_KEY])
    return Opened(host, client_id, round_num, int(str(header.get(STATE_ROUND, 0))))


def _run_phase(
    msg: Message, opened: Opened, phase: str, call: Callable[[Method, Any, ClientContext], T]
) -> tuple[T, Any]:
    """``call(method, payload, ctx)`` for the message's client and round, with the engine's own context;
    its result and the client state it started from."""
    host = opened.host
    required = keeps_client_state(host.method)  # its clients keep a state every round they train
    kept = host.store(opened.client_id).load(opened.state_round, required=required, device=host.device)
    ctx = client_context(
        host.spec,
        opened.client_id,
        opened.round_num,
        phase,
        workspace=host.workspace,
        client_state=kept,
    )
    payload = decode(msg.content, device=host.device)
    # engine.cuda_graphs: the server resolved it for its own device; the node trains by what its device allows
    if isinstance(payload, Payload):
        payload = dataclasses.replace(
            payload, train=dataclasses.replace(payload.train, cuda_graphs=host.spec.cuda_graphs)
        )
    with flush_denormals(host.flush_denormals):
        return call(host.method, payload, ctx), kept


def keep_client_state(opened: Opened, update: ClientUpdate, kept: Any) -> None:
    """Writes the state the client keeps after this round (the one it started from when the update holds
    none, as the engine keeps it) and deletes its files of other rounds than these two."""
    state = kept if update.client_state is None else update.client_state
    store = opened.host.store(opened.client_id)
    if state is not None:
        store.save(opened.round_num, state)
    if store.root.exists():
        store.keep_only({opened.state_round, opened.round_num})


@app.query("partition")
def query_partition(msg: Message, context: Context) -> Message:
    """Tells the server which client this node holds."""
    return Message(RecordDict({HEADER: ConfigRecord({"partition-id": partition_id(context)})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training: ``method.client_update`` on this node's partition."""
    opened = _open(msg, context)
    update, kept = _run_phase(
        msg, opened, "client", lambda method, payload, ctx: method.client_update(payload, ctx)
    )
    keep_client_state(opened, update, kept)
    return Message(encode(dataclasses.replace(update, client_state=None)), reply_to=msg)


@app.query("share")
def share(msg: Message, context: Context) -> Message:
    """The share phase: ``method.client_share`` on this node's partition."""
    opened = _open(msg, context)
    shared, _ = _run_phase(
        msg, opened, "share", lambda method, request, ctx: method.client_share(request, ctx)
    )
    return Message(encode(shared), reply_to=msg)
