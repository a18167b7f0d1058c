"""``torch._dynamo`` is not imported by a CPU run (``fedaug.runtime.lazy_dynamo``): a smoke run's process
never imports it, and the deferred optimizers step exactly as PyTorch's own, before and after anything
imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

SMOKE = str(REPO_ROOT / "configs" / "smoke.yaml")
RUN_PROBE = """
import json, sys
from fedaug.cli.main import main
out = sys.argv[1]
args = ["run", sys.argv[2], "--out-dir", out, "--set", "train.rounds=2", "--set", "compare=[fedavg, flea]"]
codes = [main(args), main(args)]  # the second finds both finished: checkpoints and logs verified, skipped
print(json.dumps({"codes": codes, "dynamo": sorted(m for m in sys.modules if m.startswith("torch._dynamo"))}))
"""


def _python(code: str, *args: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_cpu_smoke_comparison_and_its_rerun_never_import_torch_dynamo(tmp_path: Path) -> None:
    result = _python(RUN_PROBE, str(tmp_path), SMOKE)
    assert result == {"codes": [0, 0], "dynamo": []}
    assert len(list(tmp_path.rglob("summary.json"))) == 2


STEP_PROBE = """
import json, sys
import torch
from fedaug.runtime.lazy_dynamo import defer_dynamo_import, _UntilDynamo

def train(optimizer_name):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    if optimizer_name == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=1e-4)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    for step in range(4):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if step == 1:
            opt.load_state_dict(opt.state_dict())
    grad_mode = torch.is_grad_enabled()
    return [p.detach().flatten().tolist() for p in model.parameters()], grad_mode

deferred = defer_dynamo_import()
again = defer_dynamo_import()
before = {name: train(name) for name in ("adam", "sgd")}
imported_before = "torch._dynamo" in sys.modules
import torch._dynamo
breaks = []
real_break = torch._dynamo.graph_break
torch._dynamo.graph_break = lambda *a, **k: breaks.append(1)
after = {name: train(name) for name in ("adam", "sgd")}
zero_grad_fn = torch.optim.Optimizer.zero_grad.__wrapped__
cached = getattr(zero_grad_fn, "__dynamo_disable")
print(json.dumps({
    "deferred": deferred, "again": again, "imported_before": imported_before,
    "same": before == after, "graph_breaks": len(breaks),
    "cache_is_torchs": not isinstance(cached, _UntilDynamo) and cached is not zero_grad_fn,
    "after_import": defer_dynamo_import(),
}))
"""


def test_deferred_optimizers_step_as_pytorchs_and_hand_over_once_dynamo_is_imported() -> None:
    result = _python(STEP_PROBE)
    assert result["deferred"] >= 6  # type: ignore[operator]  # 4 Optimizer methods, Adam's and SGD's steps
    assert result["again"] == 0  # idempotent
    assert result["imported_before"] is False
    assert result["same"] is True  # the same weights to the last bit, grad mode restored
    assert result["graph_breaks"] == 2 * 4 * 2  # after the import: PyTorch's own step, graph breaks and all
    assert result["cache_is_torchs"] is True  # the disabled wrappers are torch._dynamo.disable's from then on
    assert result["after_import"] == 0
