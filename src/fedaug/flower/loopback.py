"""An in-process Flower ``Grid``: every message goes over Flower's wire format to a ClientApp in this process.

For tests and benchmarks of the adapter without Flower's runtimes: each node has its own persistent
``Context`` (as a SuperNode keeps it), messages are serialised to protobuf and back, replies come back in
reverse order (arrival order is not send order), and a ClientApp exception becomes an error reply as in
Flower's runtimes. Flower's ``Message`` reads the run identity a runtime sets per process, so use it inside
:func:`task_identity`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity


@contextlib.contextmanager
def task_identity(run_id: int = 1) -> Iterator[None]:
    """Sets Flower's per-process run identity (what its runtimes do) and restores it afterwards."""
    saved = (TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id)
    TaskIdentity.run_id, TaskIdentity.task_id, TaskIdentity.node_id = run_id, 1, 1
    try:
        yield
    finally:
        TaskIdentity._run_id, TaskIdentity._task_id, TaskIdentity._node_id = saved


class LoopbackGrid(Grid):
    """``num_nodes`` nodes with ``partition-id`` 0..n-1 (node ids differ from partition ids on purpose)."""

    def __init__(self, app: ClientApp, num_nodes: int, *, fail_on: str | None = None) -> None:
        self.app = app
        self.contexts = {
            1000 + 7 * i: Context(
                run_id=1,
                node_id=1000 + 7 * i,
                node_config={"partition-id": i, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for i in reversed(range(num_nodes))
        }
        self.fail_on = fail_on
        self.sent: list[str] = []

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        del timeout
        replies = []
        for msg in messages:
            meta = msg.metadata
            self.sent.append(meta.message_type)
            content = recorddict_from_proto(recorddict_to_proto(msg.content))
            wired = Message(
                content, dst_node_id=meta.dst_node_id, message_type=meta.message_type, group_id=meta.group_id
            )
            try:
                if meta.message_type == self.fail_on:
                    raise RuntimeError("disk full")
                reply = self.app(wired, self.contexts[meta.dst_node_id])
            except Exception as exc:  # Flower's runtimes answer a ClientApp exception with an error reply
                reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=wired)
            replies.append(reply)
        return list(reversed(replies))

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def set_run(self, run: Any) -> None:
        raise NotImplementedError

    @property
    def run(self) -> Any:
        raise NotImplementedError

    def create_message(self, *args: Any, **kwargs: Any) -> Message:
        raise NotImplementedError

    def push_messages(self, messages: Iterable[Message]) -> list[str]:
        raise NotImplementedError

    def pull_messages(self, message_ids: Iterable[str]) -> list[Message]:
        raise NotImplementedError
