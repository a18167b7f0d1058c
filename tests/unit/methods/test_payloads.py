"""Typed payloads: each writes the ``extra`` keys it reads; a missing key names itself and the method."""

from __future__ import annotations

import pytest
import torch

from fedaug.errors import FedaugError
from fedaug.methods.fedzda.method import ZDASMetrics
from fedaug.methods.flea.buffer import FLeaBuffer, FLeaServerState
from fedaug.methods.parts.data_pool import DataPool, PoolState, empty_pool
from fedaug.methods.parts.payloads import SharedSamples, read_extra
from fedaug.methods.qffl import QFFLStep, QFFLWeights


def test_each_payload_round_trips_through_its_extra_keys() -> None:
    # Prepare
    x, y = torch.ones(2, 3), torch.tensor([0, 1])
    cases = [
        (FLeaBuffer(x, y), ["buffer_x", "buffer_y"]),
        (DataPool(x, y), ["pool_x", "pool_y"]),
        (PoolState(DataPool(x, y), 1.0, 48.0), ["pool_x", "pool_y", "exposure", "bytes_up_per_client"]),
        (SharedSamples(x, y), ["x", "y"]),
        (QFFLWeights(2.0, 3.0), ["qffl_scale", "qffl_h"]),
        (QFFLStep(0.5), ["step"]),
        (ZDASMetrics({"zdas/synthetic": 60.0}), ["metrics"]),
    ]
    for payload, keys in cases:
        # Execute
        extra = payload.to_extra()
        # Assert: the wire/checkpoint keys, in order, and the same payload back
        assert list(extra) == keys, type(payload).__name__
        assert type(payload).from_extra(extra) == payload  # the same tensors: equal


def test_flea_server_state_keeps_the_checkpoint_layout() -> None:
    state = FLeaServerState.empty(num_clients=4, device=torch.device("cpu"))
    extra = state.to_extra()
    assert list(extra) == [
        "buffer_x",
        "buffer_y",
        "buffer_client",
        "buffer_round",
        "exposure_pairs",
        "num_clients",
    ]
    assert extra["buffer_y"].dtype == torch.long and extra["num_clients"] == 4
    with_stats = FLeaServerState.from_extra({**extra, "share_stats": {"dcor": 0.5}})
    assert list(with_stats.to_extra())[-1] == "share_stats" and with_stats.share_stats == {"dcor": 0.5}
    assert FLeaServerState.from_extra(extra).share_stats is None


def test_pool_state_before_sharing() -> None:
    extra = empty_pool((1, 2), (), torch.long, device=torch.device("cpu"))
    state = PoolState.from_extra(extra)
    assert state.pool.x.shape == (0, 1, 2) and state.pool.y.dtype == torch.long
    assert (state.exposure, state.bytes_up_per_client) == (0.0, 0.0)


def test_optional_payloads_are_none_when_absent() -> None:
    assert QFFLStep.from_extra({}) is None and ZDASMetrics.from_extra({"other": 1}) is None
    assert ZDASMetrics.cleared({"metrics": {}, "other": 1}) == {"other": 1}


@pytest.mark.parametrize(
    ("read", "extra", "message"),
    [
        (
            FLeaBuffer.from_extra,
            {"pool_x": 1, "pool_y": 2},
            r"flea: the message has no 'buffer_x'.*'pool_x', 'pool_y'",
        ),
        (DataPool.from_extra, {"pool_x": 1}, r"data pool \(feddata, fedmix, fedbr\): .* no 'pool_y'"),
        (SharedSamples.from_extra, {"x": 1}, r"share of samples .*: the message has no 'y'"),
        (QFFLWeights.from_extra, {"qffl_scale": 1.0}, r"qffl: the message has no 'qffl_h'"),
        (FLeaServerState.from_extra, {"buffer_x": 1, "buffer_y": 2}, r"flea: .* no 'buffer_client'"),
    ],
)
def test_missing_key_names_the_key_and_the_method(read, extra, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(FedaugError, match=message):
        read(extra)


def test_read_extra_of_an_empty_dict() -> None:
    with pytest.raises(FedaugError, match=r"keys: none"):
        read_extra({}, "x", "fedmix")
