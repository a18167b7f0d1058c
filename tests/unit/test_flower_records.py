"""The record codec: every api message survives encode -> (protobuf wire) -> decode exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

pytest.importorskip("flwr")

from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from fedaug.api import ClientShare, ClientUpdate, Payload, ShareRequest, TrainSettings
from fedaug.flower.records import decode, encode, fedavg_view


def _wire(content):
    """Through Flower's protobuf serialisation, as in a deployment."""
    proto = ProtoRecordDict()
    proto.ParseFromString(recorddict_to_proto(content).SerializeToString())
    return recorddict_from_proto(proto)


def _same(a, b) -> None:
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, np.ndarray | np.generic):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            _same(a[key], b[key])
    elif isinstance(a, list | tuple):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif hasattr(a, "__dataclass_fields__"):
        for name in a.__dataclass_fields__:
            _same(getattr(a, name), getattr(b, name))
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def _state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "block.0.weight": torch.randn(4, 3, generator=gen),
        "block.0.bias": torch.randn(4, generator=gen),
        "bn.running_mean": torch.randn(4, generator=gen).double(),
        "bn.num_batches_tracked": torch.tensor(7),
    }


MESSAGES = [
    Payload(
        round_num=3,
        model_state=_state(),
        train=TrainSettings(local_epochs=2, lr=1e-3 * 0.98**2, optimizer="sgd"),
        extra={
            "buffer_x": torch.randn(5, 2, 3),
            "buffer_y": torch.tensor([0, 1, 1, 2, 0]),
            "empty": torch.empty(0, 16),
            "mask": torch.tensor([True, False]),
            "transposed": torch.arange(6.0).reshape(2, 3).T,
            "nested": {"k": [1, 2.5, "s", None, (3, 4)], 7: torch.zeros(()), (1, "a"): float("inf")},
            "np": np.arange(6, dtype=np.int32).reshape(2, 3),
            "np_scalar": np.float32(0.25),
            "tag_lookalike": {"$t": "0", "$dict": []},
        },
    ),
    ClientUpdate(
        client_id=11,
        num_examples=97,
        model_state=_state(),
        metrics={"train/loss": 0.123456789, "train/steps": 16.0, "count": 3},
        extra={"features": torch.randn(3, 8)},
    ),
    ClientUpdate(client_id=0, num_examples=1, model_state={}, metrics={"odd": [1.0, 2.0]}),
    ShareRequest(round_num=0, client_ids=[0, 4, 9], model_state=_state(), extra={"lam": float("nan")}),
    ClientShare(client_id=4, extra={"x": torch.randn(2, 3), "y": torch.tensor([1, 2])}, metrics={}),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("wire", [False, True], ids=["in-memory", "protobuf"])
def test_round_trip_is_the_identity(message, wire) -> None:
    # Execute
    content = encode(message)
    back = decode(_wire(content) if wire else content)
    # Assert
    _same(message, back)


def test_layout_follows_flower_conventions() -> None:
    """Weights in "arrays", metrics plus num-examples in "metrics", other tensors in their own record."""
    # Prepare
    update = MESSAGES[1]
    # Execute
    content = encode(update)
    # Assert
    assert list(content.array_records["arrays"]) == list(update.model_state)
    assert dict(content.metric_records["metrics"]) == {**update.metrics, "num-examples": 97}
    assert len(content.array_records["fedaug.tensors"]) == 1
    view = fedavg_view(content)
    assert set(view) == {"arrays", "metrics"}


def test_each_encode_builds_fresh_records() -> None:
    """Content is built per message: two encodings share no record or Array object."""
    # Execute
    first, second = encode(MESSAGES[0]), encode(MESSAGES[0])
    # Assert
    assert first["arrays"] is not second["arrays"]
    assert all(first["arrays"][k] is not second["arrays"][k] for k in first["arrays"])


def test_decoded_tensors_are_writable_copies() -> None:
    # Prepare
    payload = MESSAGES[0]
    # Execute
    back = decode(encode(payload))
    back.model_state["block.0.bias"].add_(1.0)
    # Assert
    assert not torch.equal(back.model_state["block.0.bias"], payload.model_state["block.0.bias"])


def test_unsupported_values_name_their_path() -> None:
    # Prepare
    bad = ClientShare(client_id=1, extra={"model": torch.nn.Linear(2, 2)})
    # Execute / Assert
    with pytest.raises(TypeError, match=r"Linear at extra\['model'\]"):
        encode(bad)
