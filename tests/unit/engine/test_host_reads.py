"""Host reads (GPU synchronisations): the counter itself, and the budget of a FedAvg and a FLea round.

On a GPU each read waits for the queued work, and for the run's turn when runs share the GPU (issue #32), so
the engine reads once per client and once per evaluation. These budgets are exact: a new read in the round
loop fails them and says on which line it is.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

import fedaug
from fedaug import registry
from fedaug.api import fedavg_rounds_of
from fedaug.engine.evaluation import evaluate
from fedaug.engine.simulation import SimulationSpec
from fedaug.methods.fedavg import FedAvg
from fedaug.methods.flea.method import FLea, FLeaConfig
from fedaug.models import build_model
from fedaug.runtime.device import host_to_device
from tests.conftest import make_spec
from tests.helpers import image_spec
from tools.host_reads import HostReadCounter, RoundReads


def _count(block: Any) -> Counter[str]:
    counter = HostReadCounter()
    with counter.counting():
        block()
    return counter.counts


def test_counts_each_kind_of_read_once() -> None:
    x = torch.arange(6.0)
    assert sum(_count(lambda: x.sum().item()).values()) == 1
    assert sum(_count(lambda: float(x[0])).values()) == 1
    assert sum(_count(lambda: bool(x.sum() > 0)).values()) == 1
    assert sum(_count(lambda: x[x > 2]).values()) == 1  # the mask's size depends on the values
    assert sum(_count(lambda: torch.nonzero(x)).values()) == 1
    assert sum(_count(lambda: x.tolist()).values()) == 1
    assert sum(_count(lambda: x.cpu()).values()) == 1
    assert sum(_count(lambda: torch.bincount(x.long())).values()) == 1
    assert sum(_count(lambda: (x * 2 + 1).sum()).values()) == 0  # arithmetic stays on the device


def test_a_tensor_read_to_the_host_is_not_counted_again() -> None:
    x = torch.arange(6.0)

    def block() -> None:
        host = x.cpu()  # 1
        a, b = host[:3], host[3:]
        float(a.sum() / b.sum())
        a.tolist()
        x.sum().item()  # 1: x itself still lives "on the device"

    assert sum(_count(block).values()) == 2


def test_optimizer_step_counters_are_not_reads() -> None:
    """Adam reads its step counters with .item(); they stay on the host in a GPU run too."""
    p = torch.nn.Parameter(torch.ones(3))
    optimizer = torch.optim.Adam([p])
    p.sum().backward()
    assert sum(_count(optimizer.step).values()) == 0


def test_patches_are_undone_and_counts_add_up() -> None:
    original = torch.Tensor.tolist
    counter = HostReadCounter()
    x = torch.ones(2)
    for _ in range(2):
        with counter.counting():
            x.tolist()
    assert torch.Tensor.tolist is original
    assert counter.total() == 2


def test_reads_are_attributed_to_fedaug_source_lines() -> None:
    model = build_model("mlp", num_classes=3, input_shape=(8,))
    x, y = torch.randn(10, 8), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    counts = _count(lambda: evaluate(model, x, y, num_classes=3))
    assert len(counts) == 1 and sum(counts.values()) == 1  # one read for accuracy, loss and classes
    (where,) = counts
    assert where.startswith("fedaug/engine/evaluation.py:")


def test_host_to_device_on_the_cpu_is_to() -> None:
    x = torch.arange(4)
    assert host_to_device(x, "cpu") is x
    y = host_to_device(x, torch.device("cpu"), dtype=torch.float32)
    assert y.dtype == torch.float32 and torch.equal(y, torch.arange(4.0))


def _reads_per_round(spec: SimulationSpec) -> tuple[list[Counter[str]], HostReadCounter]:
    """Each round's reads by line, and the counter (its counts: the whole run's)."""
    counter = HostReadCounter()
    sim = RoundReads(spec, lambda: Counter(counter.counts))
    with counter.counting():
        sim.run()
    return list(sim.per_round().values()), counter


@pytest.mark.parametrize("graphs", [False, True])  # engine.cuda_graphs: recording adds no read
def test_a_fedavg_round_reads_once_per_client_and_once_to_evaluate(tmp_path: Path, graphs: bool) -> None:
    spec = replace(make_spec(tmp_path, method=FedAvg(), rounds=3, per_round=3), cuda_graphs=graphs)
    per_round, counter = _reads_per_round(spec)
    assert [reads.total() for reads in per_round] == [3 + 1] * 3, counter.counts
    assert {where.partition(":")[0] for where in counter.counts} == {
        "fedaug/training/loop.py",
        "fedaug/engine/evaluation.py",
    }


@pytest.mark.parametrize("graphs", [False, True])
def test_a_flea_round_read_budget(tmp_path: Path, graphs: bool) -> None:
    """3 clients: one read each after training, 1 for every client's shared dCors, 1 to evaluate, 1 to keep
    the buffer's young entries, 2 for the exposure (torch.unique) and 1 for the buffer's class counts."""
    flea = FLea(FLeaConfig(share_fraction=0.25))
    spec = replace(make_spec(tmp_path, method=flea, rounds=3, per_round=3), cuda_graphs=graphs)
    per_round, counter = _reads_per_round(spec)
    # round 1: the buffer is empty when the exposure is updated, so it reads nothing
    expected = [3 + 1 + 1 + 1 + 0 + 1, *[3 + 1 + 1 + 1 + 2 + 1] * 2]
    assert [reads.total() for reads in per_round] == expected, counter.counts


def test_host_draws_reach_the_device_through_host_to_device() -> None:
    """`x.to(device, non_blocking=True)` from ordinary host memory may still wait for the GPU's queue; fedaug
    copies what it draws on the host with `host_to_device`, which pins it first. A new such call elsewhere
    fails here, naming its file and line."""
    src = Path(fedaug.__file__).parent
    found = [
        f"{path.relative_to(src)}:{number}"
        for path in sorted(src.rglob("*.py"))
        if path.name != "device.py"
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "non_blocking=True" in line and not line.lstrip().startswith("#")
    ]
    assert found == []


# AugMix groups a batch's rows by operation where its draws are, on the host (fedaug.augment.ops.apply_op):
# reads of CPU tensors even in a GPU run, which a count on a CPU cannot tell from reads of device values.
HOST_SIDE = ("fedaug/augment/ops.py",)


# Methods that are FedAvg in their first rounds start their own at round 2 here.
OWN_FROM_ROUND_2 = {
    "fedgen": {"warmup_rounds": 2},
    "fedzdac": {"start_round": 2},
    "fedzdas": {"start_round": 2},
}


def _reads_of_a_round(tmp_path: Path, name: str, epochs: int) -> Counter[str]:
    """Reads of round 2 of method ``name`` on the image blobs, with ``epochs`` local epochs."""
    spec = image_spec(tmp_path, name, torch.device("cpu"), rounds=2)
    if name in OWN_FROM_ROUND_2:
        cls = registry.get("method", name)
        spec = replace(spec, method=cls(cls.config_cls(**OWN_FROM_ROUND_2[name])))
    assert fedavg_rounds_of(spec.method, 2) < 2, "round 2 would be FedAvg's"
    schedule = spec.train_settings
    spec = replace(spec, train_settings=lambda r: replace(schedule(r), local_epochs=epochs))
    last = _reads_per_round(spec)[0][-1]
    return Counter({k: v for k, v in last.items() if not k.startswith(HOST_SIDE)})


@pytest.mark.parametrize("name", registry.available("method"))
def test_no_method_reads_per_step(tmp_path: Path, name: str) -> None:
    """A round with 2 local epochs reads as often as one with 1: nothing waits for the GPU every step."""
    one = _reads_of_a_round(tmp_path / "one", name, epochs=1)
    two = _reads_of_a_round(tmp_path / "two", name, epochs=2)
    assert two == one, {k: (one[k], two[k]) for k in one.keys() | two.keys() if one[k] != two[k]}
