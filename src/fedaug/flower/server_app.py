"""The Flower ServerApp: the engine's own round loop, with every client call sent to a Flower node.

:class:`FlowerEngine` is the in-process :class:`~fedaug.engine.simulation.Simulation` (sampling, lr schedule,
payload, aggregation, share phase, evaluation, metrics, checkpoints, run directory) with its two client
seams, :meth:`run_client_updates` and :meth:`run_client_shares`, replaced by messages through Flower's
``Grid``: one ``train`` / ``query.share`` message per client, content built per message, replies put back in
the engine's client order. Same config and seed, same numbers as ``fedaug run``.

Departure from STYLE 6.8 (one Strategy subclass): Flower's ``Strategy.start`` loop has no place for the share
phase (a second exchange after aggregation, which FLea, FedMix, FedData and CCVR need) and would duplicate our
round loop; reusing the engine's loop instead is what makes the per-round accuracy identical.

The server computes on its own ``engine.device`` (the engine's); replies arrive as CPU tensors and are moved
there before the method aggregates them, whatever device each node trained on.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import torch
import yaml
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.serverapp import Grid, ServerApp

from fedaug.api import ClientShare, ClientUpdate, Payload, ServerState, ShareRequest
from fedaug.config.load import config_from_dict, dump_yaml
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.simulation import Simulation, SimulationSpec
from fedaug.errors import ClientError, FedaugError
from fedaug.flower.client_app import HEADER, STATE_ROUND
from fedaug.flower.client_store import state_rounds
from fedaug.flower.records import decode, encode
from fedaug.runtime import startup
from fedaug.types import ClientId

CONFIG_KEY = "fedaug-config"
"""Run-config key (``[tool.flwr.app.config]``) holding the experiment config as YAML."""
FRESH_KEY = "fedaug-fresh"
NODE_TIMEOUT_KEY = "fedaug-node-timeout"


class NodeLink:
    """Sends one experiment's messages to the nodes that hold its clients."""

    def __init__(self, grid: Grid, config: ExperimentConfig, nodes: dict[ClientId, int]) -> None:
        self.grid = grid
        self.config_text = dump_yaml(config)
        self.method = config.method.name
        self.nodes = nodes
        self.clients = {node: client for client, node in nodes.items()}

    def call(
        self,
        message_type: str,
        obj: Any,
        client_ids: Sequence[ClientId],
        round_num: int,
        *,
        device: torch.device | None = None,
        state_rounds: Mapping[ClientId, int] | None = None,
    ) -> list[Any]:
        """Sends ``obj`` to each client (encoded afresh per message); the decoded replies in client order,
        their tensors on ``device`` (None: the CPU). ``state_rounds``: each client's last training round
        so far, whose kept state it starts from (missing: 0, none)."""
        rounds = state_rounds or {}
        messages = []
        for client_id in client_ids:
            content = encode(obj)
            content[HEADER] = ConfigRecord(
                {
                    "config": self.config_text,
                    "client-id": client_id,
                    "round": round_num,
                    STATE_ROUND: rounds.get(client_id, 0),
                }
            )
            messages.append(
                Message(
                    content,
                    dst_node_id=self.nodes[client_id],
                    message_type=message_type,
                    group_id=str(round_num),
                )
            )
        replies: dict[ClientId, Message] = {}
        for reply in self.grid.send_and_receive(messages):
            replies[self.clients[reply.metadata.src_node_id]] = reply
        results = []
        for client_id in client_ids:
            answer = replies.get(client_id)
            if answer is None or answer.has_error():
                reason = "no reply" if answer is None else str(answer.error.reason)
                raise ClientError(reason, round_num=round_num, client_id=client_id, method=self.method)
            results.append(decode(answer.content, device=device))
        return results


class FlowerEngine(Simulation):
    """The in-process round loop with its client calls answered by Flower nodes."""

    client_state_on_nodes = True  # each node's own store (flower/client_store.py), never the checkpoint

    def __init__(self, spec: SimulationSpec, *, link: NodeLink) -> None:
        super().__init__(spec)
        self.link = link
        self.state_rounds: dict[ClientId, int] = {}  # each client's last training round (its kept state)

    def _start(self) -> tuple[ServerState, list[dict[str, Any]]]:
        state, records = super()._start()
        # a resumed run's clients start from the state their nodes kept in their last round up to the
        # checkpoint's (newer files, of a round the checkpoint never recorded, are not read)
        self.state_rounds = state_rounds(records)
        return state, records

    def run_client_updates(
        self, payload: Payload, participants: list[ClientId], round_num: int
    ) -> list[ClientUpdate]:
        device = self.spec.run.device
        updates: list[ClientUpdate] = self.link.call(
            "train", payload, participants, round_num, device=device, state_rounds=self.state_rounds
        )
        self.state_rounds.update(dict.fromkeys(participants, round_num))
        return updates

    def run_client_shares(self, request: ShareRequest, round_num: int) -> list[ClientShare]:
        device = self.spec.run.device
        shares: list[ClientShare] = self.link.call(
            "query.share",
            request,
            request.client_ids,
            round_num,
            device=device,
            state_rounds=self.state_rounds,
        )
        return shares


def discover_nodes(grid: Grid, num_clients: int, *, timeout: float) -> dict[ClientId, int]:
    """Waits for ``num_clients`` nodes and asks each for its partition id; returns client id -> node id."""
    deadline = time.monotonic() + timeout
    node_ids = list(grid.get_node_ids())
    while len(node_ids) < num_clients:
        if time.monotonic() > deadline:
            raise FedaugError(
                f"only {len(node_ids)} of {num_clients} SuperNodes connected within {timeout:g}s; start one "
                f"'fedaug flower client --partition-id <i>' for every i in 0..{num_clients - 1}"
            )
        time.sleep(0.5)
        node_ids = list(grid.get_node_ids())
    messages = [Message(RecordDict(), dst_node_id=n, message_type="query.partition") for n in node_ids]
    nodes: dict[ClientId, int] = {}
    for reply in grid.send_and_receive(messages, timeout=timeout):
        if reply.has_error():
            raise FedaugError(f"node {reply.metadata.src_node_id} failed: {reply.error.reason}")
        nodes[int(str(reply.content.config_records[HEADER]["partition-id"]))] = reply.metadata.src_node_id
    missing = sorted(set(range(num_clients)) - set(nodes))
    if missing:
        raise FedaugError(f"no SuperNode holds partition(s) {missing} (nodes hold {sorted(nodes)})")
    return nodes


def serve(grid: Grid, configs: Sequence[ExperimentConfig], *, fresh: bool, node_timeout: float) -> list[Any]:
    """Runs each config (methods compared on one setting) on the grid's nodes; returns their summaries."""
    from fedaug.runs.resolve import load_data_and_partition
    from fedaug.runs.runner import run_experiment

    _, partition = load_data_and_partition(configs[0])
    nodes = discover_nodes(grid, len(partition.train_indices), timeout=node_timeout)
    startup.mark("supernodes")  # Flower's runtime up (a simulation: Ray started), every SuperNode registered
    summaries = []
    for config in configs:
        engine = partial(FlowerEngine, link=NodeLink(grid, config, nodes))
        summaries.append(run_experiment(config, fresh=fresh, engine=engine))
    return summaries


@dataclasses.dataclass
class Outcome:
    """What a ServerApp run produced (read by the caller of Flower's simulation after it returns)."""

    summaries: list[Any] = dataclasses.field(default_factory=list)
    error: BaseException | None = None


def make_server_app(
    configs: Sequence[ExperimentConfig], *, fresh: bool = False, node_timeout: float = 600.0
) -> tuple[ServerApp, Outcome]:
    """A ServerApp running ``configs`` (for Flower's in-process simulation) and where its outcome lands."""
    server = ServerApp()
    outcome = Outcome()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        del context
        try:
            outcome.summaries = serve(grid, configs, fresh=fresh, node_timeout=node_timeout)
        except BaseException as exc:  # handed to the caller: Flower's runtime only logs it
            outcome.error = exc
            raise

    return server, outcome


app = ServerApp()
"""The deployed ServerApp (``fedaug.flower.server_app:app``): the config comes in the run config."""


@app.main()
def main(grid: Grid, context: Context) -> None:
    from fedaug.runs.runner import comparison_configs

    config = config_from_dict(yaml.safe_load(str(context.run_config[CONFIG_KEY])))
    fresh = bool(context.run_config.get(FRESH_KEY, False))
    timeout = float(context.run_config.get(NODE_TIMEOUT_KEY, 600.0))
    serve(grid, comparison_configs(config), fresh=fresh, node_timeout=timeout)
