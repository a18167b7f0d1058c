"""Our api messages <-> Flower ``RecordDict`` s, generically.

Every message of :mod:`fedaug.api` (Payload, ClientUpdate, ShareRequest, ClientShare) is a dataclass of
tensors, numbers, strings, lists, tuples and dicts. :func:`encode` lays one out as::

    "arrays"         ArrayRecord   the ``model_state`` field (Flower's convention: the state dict, in order)
    "metrics"        MetricRecord  the ``metrics`` field when all values are numbers, plus ``"num-examples"``
    "fedaug.tensors" ArrayRecord   every other tensor (FLea's buffer and features, FedMix's averages, ...)
    "fedaug"         ConfigRecord  ``"tree"``: the rest of the object as JSON, tensors replaced by references

:func:`decode` inverts it exactly (dtypes, shapes and values bit for bit; ints stay ints, tuples stay
tuples, dict keys keep their types). The JSON tree tags every non-list container, so user data can never be
mistaken for a tag. Only the api's dataclasses may appear; anything else (a module, an optimizer) is
refused with the path to the offending value. Flower's kebab-case keys (``"num-examples"``) appear only
here.

Tensors travel as CPU numpy arrays whatever device they were on (``.cpu()`` before ``.numpy()``);
``decode(content, device=...)`` puts the received tensors on the receiving side's device
(:func:`fedaug.runtime.device.to_device`), so the server and every node may compute on different devices.

Flower traps this module avoids: content is built per message (an :class:`~flwr.app.Array` shared between
two messages breaks the second); :func:`fedavg_view` strips a reply to the two records Flower's own FedAvg
accepts (it rejects replies with extra records).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from fedaug.api import ClientShare, ClientUpdate, Payload, ShareRequest, TrainSettings
from fedaug.runtime.device import to_device

ARRAYS = "arrays"
METRICS = "metrics"
TENSORS = "fedaug.tensors"
TREE = "fedaug"
NUM_EXAMPLES = "num-examples"

DATACLASSES: dict[str, type] = {
    cls.__name__: cls for cls in (Payload, ClientUpdate, ShareRequest, ClientShare, TrainSettings)
}
"""The dataclasses that may travel (by class name; nothing else is ever instantiated on decode)."""


class _Encoder:
    def __init__(self) -> None:
        self.tensors = ArrayRecord()
        self.arrays: ArrayRecord | None = None
        self.metrics: MetricRecord | None = None

    def tensor(self, value: torch.Tensor | np.ndarray, path: str) -> dict[str, Any]:
        kind = "$np" if isinstance(value, np.ndarray) else "$t"
        key = str(len(self.tensors))
        self.tensors[key] = _array(value, path)
        return {kind: key}

    def tree(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (torch.Tensor, np.ndarray)):
            return self.tensor(value, path)
        if isinstance(value, np.generic):
            return {"$nps": self.tensor(np.asarray(value), path)["$np"]}
        if isinstance(value, list):
            return [self.tree(v, f"{path}[{i}]") for i, v in enumerate(value)]
        if isinstance(value, tuple):
            return {"$tuple": [self.tree(v, f"{path}[{i}]") for i, v in enumerate(value)]}
        if isinstance(value, dict):
            return {"$dict": [[self.tree(k, path), self.tree(v, f"{path}[{k!r}]")] for k, v in value.items()]}
        if dataclasses.is_dataclass(value) and type(value).__name__ in DATACLASSES:
            return {"$dc": type(value).__name__, "fields": self.fields(value, path)}
        raise TypeError(
            f"cannot send {type(value).__name__} at {path or 'the top'} over Flower; messages hold tensors, "
            f"numbers, strings, lists, tuples, dicts and the api dataclasses ({', '.join(DATACLASSES)})"
        )

    def fields(self, obj: Any, path: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for field in dataclasses.fields(obj):
            value = getattr(obj, field.name)
            sub = f"{path}.{field.name}" if path else field.name
            if field.name == "model_state" and self.arrays is None:
                self.arrays = ArrayRecord()
                for key, tensor in value.items():
                    self.arrays[key] = _array(tensor, f"{sub}[{key!r}]")
                out[field.name] = {"$arrays": ARRAYS, "keys": list(value)}  # keeps the state-dict order
            elif field.name == "metrics" and self.metrics is None and _numeric(value):
                self.metrics = MetricRecord(dict(value))
                out[field.name] = {"$metrics": METRICS}
            else:
                out[field.name] = self.tree(value, sub)
        return out


def _numeric(metrics: Any) -> bool:
    return isinstance(metrics, dict) and all(
        isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) and k != NUM_EXAMPLES
        for k, v in metrics.items()
    )


def _array(value: torch.Tensor | np.ndarray, path: str) -> Array:
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bfloat16 or value.is_complex() or value.is_sparse:
            raise TypeError(f"cannot send a {value.dtype} tensor at {path} over Flower")
        value = value.detach().cpu().numpy()  # a device tensor is copied to the host first
    return Array(np.asarray(value))


def encode(obj: Any) -> RecordDict:
    """A fresh RecordDict holding ``obj`` (build one per message; never share it between messages)."""
    encoder = _Encoder()
    tree = encoder.tree(obj, "")
    records: dict[str, Any] = {}
    if encoder.arrays is not None:
        records[ARRAYS] = encoder.arrays
    if encoder.metrics is not None:
        if isinstance(obj, ClientUpdate):  # the weight Flower's strategies aggregate by
            encoder.metrics[NUM_EXAMPLES] = obj.num_examples
        records[METRICS] = encoder.metrics
    if len(encoder.tensors):
        records[TENSORS] = encoder.tensors
    records[TREE] = ConfigRecord({"tree": json.dumps(tree)})
    return RecordDict(records)


class _Decoder:
    def __init__(self, content: RecordDict) -> None:
        self.content = content

    def tensor(self, key: str) -> np.ndarray:
        return self.content.array_records[TENSORS][key].numpy()

    def tree(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.tree(v) for v in node]
        if not isinstance(node, dict):
            return node
        tag, value = next(iter(node.items()))
        if tag == "$t":
            return torch.from_numpy(self.tensor(value))
        if tag == "$np":
            return self.tensor(value)
        if tag == "$nps":
            return self.tensor(value)[()]
        if tag == "$tuple":
            return tuple(self.tree(v) for v in value)
        if tag == "$dict":
            return {self.tree(k): self.tree(v) for k, v in value}
        if tag == "$arrays":
            record = self.content.array_records[value]
            return {k: torch.from_numpy(record[k].numpy()) for k in node["keys"]}
        if tag == "$metrics":
            return {k: v for k, v in self.content.metric_records[value].items() if k != NUM_EXAMPLES}
        if tag == "$dc":
            cls = DATACLASSES[value]
            return cls(**{k: self.tree(v) for k, v in node["fields"].items()})
        raise ValueError(f"unknown tag {tag!r} in a fedaug message")


def decode(content: RecordDict, *, device: torch.device | str | None = None) -> Any:
    """The object :func:`encode` packed into ``content`` (extra records are ignored), its tensors on
    ``device`` (None: the CPU, as they arrive; numpy arrays stay numpy arrays)."""
    if TREE not in content.config_records:
        raise ValueError(f"not a fedaug message: no {TREE!r} config record (records: {list(content)})")
    obj = _Decoder(content).tree(json.loads(str(content.config_records[TREE]["tree"])))
    return obj if device is None else to_device(obj, device)


def fedavg_view(content: RecordDict) -> RecordDict:
    """The reply reduced to ``"arrays"`` and ``"metrics"``, the only records Flower's FedAvg accepts."""
    return RecordDict({ARRAYS: content.array_records[ARRAYS], METRICS: content.metric_records[METRICS]})
