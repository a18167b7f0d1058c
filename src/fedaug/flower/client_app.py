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
state (``ClientUpdate.client_state``, e.g. MOON's previous model) is kept in ``context.state`` instead of
being sent to the server, tagged with the experiment it belongs to: a node that serves several experiments
in one Flower run (``compare``, several methods or seeds) starts each one's clients without state, as the
engine does, instead of handing one method's state (SCAFFOLD's c_i) to the next (FedDyn's g_k); the loaded
data and models are cached per process.

A node computes on the experiment's ``engine.device`` resolved on the node (``auto``: its GPU if it has one),
or on its own ``device`` node config (``fedaug flower client --device``); its data and workspace models live
there, and the tensors of every message (and of the client state it keeps) are moved there on arrival.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedaug.api import ClientContext, Method, Payload
from fedaug.config.load import config_from_dict
from fedaug.engine.simulation import SimulationSpec, client_context, on_device
from fedaug.errors import ConfigError
from fedaug.flower.logs import quiet_actor
from fedaug.flower.records import decode, encode
from fedaug.models.base import SplitModel
from fedaug.runtime.lazy_dynamo import defer_dynamo_import
from fedaug.runtime.machine import use_threads
from fedaug.runtime.memory_format import apply_channels_last
from fedaug.runtime.precision import flush_denormals

HEADER = "fedaug.run"
STATE_PREFIX = "fedaug.client_state/"
STATE_RUN = "fedaug.client_state.run"  # the experiment (run_key) the kept client state belongs to

app = ClientApp()
T = TypeVar("T")


@dataclasses.dataclass
class ClientHost:
    """One experiment's resolved pieces on a node: spec (data, partition, run), method, workspace models."""

    spec: SimulationSpec
    method: Method
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


@functools.lru_cache(maxsize=2)
def client_host(config_text: str, data_dir: str | None, device: str | None = None) -> ClientHost:
    """The host of the experiment ``config_text`` (cached: Flower rebuilds the app for every message), its
    data on the node's device: ``device`` (the node's ``device`` config) if given, else ``engine.device``."""
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
        spec=prepared.spec, method=prepared.method, flush_denormals=config.engine.flush_denormals
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


def run_key(msg: Message) -> str:
    """Which experiment a message belongs to: a digest of the config it carries (every run of a Flower run
    differs in it: method, seed, options or name)."""
    config_text = str(msg.content.config_records[HEADER]["config"])
    return hashlib.sha256(config_text.encode()).hexdigest()[:16]


def _open(msg: Message, context: Context) -> tuple[ClientHost, int, int]:
    quiet_actor()  # in a simulation's Ray actor: no shutdown notice outside fedaug's format at the end
    header = msg.content.config_records[HEADER]
    client_id, round_num = int(str(header["client-id"])), int(str(header["round"]))
    if client_id != partition_id(context):
        raise ConfigError(f"a message for client {client_id} reached partition {partition_id(context)}")
    data_dir, device = context.node_config.get("data-dir"), context.node_config.get("device")
    host = client_host(
        str(header["config"]), str(data_dir) if data_dir else None, str(device) if device else None
    )
    return host, client_id, round_num


def _run_phase(
    msg: Message, context: Context, phase: str, call: Callable[[Method, Any, ClientContext], T]
) -> T:
    """``call(method, payload, ctx)`` for the message's client and round, with the engine's own context."""
    host, client_id, round_num = _open(msg, context)
    ctx = client_context(
        host.spec,
        client_id,
        round_num,
        phase,
        workspace=host.workspace,
        client_state=load_client_state(context, host.device, run=run_key(msg)),
    )
    payload = decode(msg.content, device=host.device)
    # engine.cuda_graphs: the server resolved it for its own device; the node trains by what its device allows
    if isinstance(payload, Payload):
        payload = dataclasses.replace(
            payload, train=dataclasses.replace(payload.train, cuda_graphs=host.spec.cuda_graphs)
        )
    with flush_denormals(host.flush_denormals):
        return call(host.method, payload, ctx)


def load_client_state(context: Context, device: torch.device | None = None, run: str | None = None) -> Any:
    """The client state saved by :func:`save_client_state` (None before the first one, and when it belongs
    to another experiment than ``run``, a :func:`run_key`; None: whichever it is), its tensors on ``device``
    (None: the CPU)."""
    if run is not None and (STATE_RUN not in context.state or context.state[STATE_RUN]["run"] != run):
        return None
    records = {k[len(STATE_PREFIX) :]: v for k, v in context.state.items() if k.startswith(STATE_PREFIX)}
    return decode(RecordDict(records), device=device) if records else None


def save_client_state(context: Context, state: Any, run: str = "") -> None:
    """Keeps ``state`` as the client state of experiment ``run`` (a :func:`run_key`), replacing whatever the
    node kept before (of this experiment or another: a node keeps one)."""
    for key in [k for k in context.state if k.startswith(STATE_PREFIX)]:
        del context.state[key]
    for key, record in encode(state).items():
        context.state[STATE_PREFIX + key] = record
    context.state[STATE_RUN] = ConfigRecord({"run": run})


@app.query("partition")
def query_partition(msg: Message, context: Context) -> Message:
    """Tells the server which client this node holds."""
    return Message(RecordDict({HEADER: ConfigRecord({"partition-id": partition_id(context)})}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training: ``method.client_update`` on this node's partition."""
    update = _run_phase(
        msg, context, "client", lambda method, payload, ctx: method.client_update(payload, ctx)
    )
    if update.client_state is not None:
        save_client_state(context, update.client_state, run_key(msg))
    return Message(encode(dataclasses.replace(update, client_state=None)), reply_to=msg)


@app.query("share")
def share(msg: Message, context: Context) -> Message:
    """The share phase: ``method.client_share`` on this node's partition."""
    shared = _run_phase(msg, context, "share", lambda method, request, ctx: method.client_share(request, ctx))
    return Message(encode(shared), reply_to=msg)
