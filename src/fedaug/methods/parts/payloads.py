"""Typed views of the ``extra`` dicts that methods exchange, and the one share several methods send.

``ServerState.extra``, ``Payload.extra``, ``ClientShare.extra`` and ``ClientUpdate.extra`` stay plain
string-keyed dicts: they are the wire and checkpoint format (checkpoints and Flower records serialise them key
by key). Method code does not index them with string keys; each payload is one small frozen dataclass that
writes itself with ``to_extra()`` and reads itself with ``from_extra(extra)``, so its keys are written in one
place, and a missing key is an error naming the key and the method. Each lives beside its method
(:class:`~fedaug.methods.flea.buffer.FLeaBuffer`, :class:`~fedaug.methods.parts.data_pool.DataPool`,
:class:`~fedaug.methods.qffl.QFFLWeights`, ...); this module holds the reader and :class:`SharedSamples`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from fedaug.errors import FedaugError
from fedaug.types import Extra


def read_extra(extra: Mapping[str, Any], key: str, owner: str) -> Any:
    """``extra[key]``.

    Raises:
        FedaugError: naming ``key``, ``owner`` (the method the payload belongs to) and the keys present.
    """
    if key not in extra:
        present = ", ".join(repr(name) for name in extra) or "none"
        raise FedaugError(f"{owner}: the message has no {key!r} in its extra (its keys: {present})")
    return extra[key]


@dataclass(frozen=True)
class SharedSamples:
    """Samples a client shares with their labels (``ClientShare.extra``: ``x``, ``y``).

    FedData sends raw samples, FedMix group means with averaged one-hot labels, FedBR label-free means with
    uniform label vectors, FLea and CCVR (``shared_features``) activations with labels.

    Attributes:
        x: the shared samples (or activations), ``[n, ...]``.
        y: their labels: class ids ``[n]`` or label distributions ``[n, num_classes]``.
    """

    x: Tensor
    y: Tensor

    def to_extra(self) -> Extra:
        return {"x": self.x, "y": self.y}

    @classmethod
    def from_extra(cls, extra: Mapping[str, Any]) -> SharedSamples:
        owner = "a client's share of samples (feddata, fedmix, fedbr, flea, ccvr)"
        return cls(read_extra(extra, "x", owner), read_extra(extra, "y", owner))
