"""What does a round's checkpoint cost a method holding a shared data pool, inline vs in pool files? -> JSON.

Issue #65's campaign cost: FedData, FedMix, FedBR and ``centralized`` keep a pool in ``ServerState.extra``
that never changes after the share phase; before pool files (:mod:`fedaug.engine.pool_files`) every round's
checkpoint hashed it (SHA-256, :func:`~fedaug.engine.checkpoint.content_digest`) and serialised it again.
Per setting and method this builds the real server state after the share phase (the run's data, partition
and model; FLea and CCVR after round 1's share phase too, with the initial weights: their buffer and
calibration have the sizes of a real round's), then saves ``--rounds`` rounds of checkpoints the two ways in
one process, interleaved (the order swapped every round, so that load from others hits both alike):

* ``inline`` (format 2, as fedaug saved before): the pool in the checkpoint, hashed and written every round;
  split into ``digest`` (the hash), ``serialise`` (``torch.save`` into memory) and the rest (the file's
  write, fsync and rename);
* ``pool_files`` (format 3, :meth:`~fedaug.engine.checkpoint.RunStore.save_checkpoint`): the pool in round
  1's checkpoint (it is new there), written to its pool file in round 2, a reference after.

Each round gets new model weights (as training gives); FLea's buffer gets new content each round (it is
rebuilt every round: no saving expected). The seconds are medians over rounds 3.. (rounds 1 and 2 are
reported apart), and ``ratio`` is inline over pool files. ``resume_seconds`` reads the last checkpoint back
once each way (digests checked); ``same_state_read_back`` says both read back to the state saved.

Usage::

    python benchmarks/pool_checkpoint.py --data-dir ../shared/data --rounds 8 \\
        --out benchmarks/results/pool_checkpoint_cpu.json
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from fedaug.api import ServerState
from fedaug.config.presets import find
from fedaug.engine.checkpoint import (
    DIGEST_KEY,
    INLINE_POOL_FORMAT,
    RunStore,
    atomic_write,
    content_digest,
    read_checkpoint,
)
from fedaug.engine.simulation import Simulation
from fedaug.runs.runner import prepare
from fedaug.sweeps.sweep import expand_sweep
from machine import machine_facts, write_report

QUA = "partition=[{name: quantity, classes_per_client: %d}]"
SETTINGS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...], tuple[str, ...]]] = {
    # name: (preset, overrides, grid, methods)
    "fsdd_k27_qua3": (
        "flea_fsdd",
        (),
        ("partition.num_clients=[27]", QUA % 3),
        ("centralized", "feddata", "fedmix", "fedbr", "flea", "ccvr"),
    ),
    "cifar10_standin_k500_qua3": (
        "experiments/flea_cifar10_standin",
        ("data.variant=jpeg_lossy",),
        (QUA % 3,),
        ("fedmix",),
    ),
    "har_k75_qua2": ("experiments/flea_table1_har", (), ("partition.num_clients=[75]", QUA % 2), ("fedmix",)),
}
ROUND_SHARERS = {"flea", "ccvr"}
"""Methods whose server state fills in a round's share phase (after training), not before round 1."""


def server_state(setting: str, method: str, data_dir: str, out: Path) -> ServerState:
    """The server state of ``method`` on ``setting`` after its share phases (see the module doc)."""
    preset, overrides, grid, _ = SETTINGS[setting]
    path = find(preset)
    assert path is not None, preset
    entry = (
        "{name: ccvr, calibrate_every_round: true}" if method == "ccvr" else method
    )  # calibrates in round 1
    sets = [*overrides, f"data.data_dir={data_dir}", f"out_dir={out}", "seed=0"]
    (point,) = expand_sweep(path, sets, (*grid, f"method=[{entry}]", "seed=[0]"))
    sim = Simulation(prepare(point.config, point.run_dir).spec)
    sim.store.prepare()
    state, _ = sim._start()  # the engine's start: init_server and the share phase before round 1
    if method in ROUND_SHARERS:
        participants = list(range(sim.spec.clients_per_round))
        state = sim._share(replace(state, round_num=1), round_num=1, participants=participants)
    return state


def tensor_bytes(obj: Any) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, dict):
        return sum(tensor_bytes(v) for v in obj.values())
    if isinstance(obj, list | tuple):
        return sum(tensor_bytes(v) for v in obj)
    return 0


def round_states(state: ServerState, method: str, rounds: int) -> Iterator[ServerState]:
    """``rounds`` rounds' states: new weights each round; FLea's buffer new content too."""
    for round_num in range(1, rounds + 1):
        weights = {
            k: v + round_num if v.is_floating_point() else v.clone() for k, v in state.model_state.items()
        }
        extra = dict(state.extra)
        if method == "flea":
            extra["buffer_x"] = state.extra["buffer_x"] + round_num
        yield ServerState(round_num=round_num, model_state=weights, extra=extra)


def checkpoint(state: ServerState) -> dict[str, Any]:
    return {"state": vars(state), "client_states": {}, "round_num": state.round_num}


def save_inline(store: RunStore, ckpt: dict[str, Any]) -> dict[str, float]:
    """fedaug's save before pool files (format 2), timed in its parts."""
    start = time.perf_counter()
    content = {**ckpt, "format": INLINE_POOL_FORMAT}
    content[DIGEST_KEY] = content_digest(content)
    hashed = time.perf_counter()
    torch.save(content, io.BytesIO())
    serialised = time.perf_counter()
    atomic_write(store.ckpt_path, lambda handle: torch.save(content, handle))
    end = time.perf_counter()
    # the file's write is the whole save less the hash (it serialises again as it writes)
    return {
        "seconds": (hashed - start) + (end - serialised),
        "digest": hashed - start,
        "serialise": serialised - hashed,
    }


def save_pool_files(store: RunStore, ckpt: dict[str, Any]) -> dict[str, float]:
    start = time.perf_counter()
    store.save_checkpoint(ckpt)
    return {"seconds": time.perf_counter() - start}


def measure(state: ServerState, method: str, rounds: int, root: Path) -> dict[str, Any]:
    stores = {"inline": RunStore(root / "inline"), "pool_files": RunStore(root / "pool_files")}
    savers = {"inline": save_inline, "pool_files": save_pool_files}
    for store in stores.values():
        store.prepare()
    times: dict[str, list[dict[str, float]]] = {name: [] for name in stores}
    last: ServerState | None = None
    for state_r in round_states(state, method, rounds):
        order = list(stores) if state_r.round_num % 2 else list(reversed(stores))
        for name in order:
            times[name].append(savers[name](stores[name], checkpoint(state_r)))
        last = state_r
    assert last is not None
    resume, loaded = {}, {}
    for name, store in stores.items():
        start = time.perf_counter()
        loaded[name] = read_checkpoint(store.ckpt_path)
        resume[name] = time.perf_counter() - start
    same = content_digest(loaded["inline"]["state"]) == content_digest(loaded["pool_files"]["state"])
    same = same and content_digest(loaded["inline"]["state"]) == content_digest(vars(last))
    later = {name: rows[2:] for name, rows in times.items()}
    median = {name: statistics.median(r["seconds"] for r in rows) for name, rows in later.items()}
    pool_dir = root / "pool_files" / "ckpt" / "pool"
    return {
        "extra_tensor_bytes": tensor_bytes(state.extra),
        "model_bytes": tensor_bytes(state.model_state),
        "checkpoint_bytes": {name: s.ckpt_path.stat().st_size for name, s in stores.items()},
        "pool_file_bytes": sum(p.stat().st_size for p in pool_dir.glob("*.pt")),
        "round_seconds": median,
        "inline_parts": {
            part: statistics.median(r[part] for r in later["inline"]) for part in ("digest", "serialise")
        },
        "rounds_1_2_seconds": {name: [r["seconds"] for r in rows[:2]] for name, rows in times.items()},
        "ratio": median["inline"] / median["pool_files"],
        "saving_per_round_seconds": median["inline"] - median["pool_files"],
        "resume_seconds": resume,
        "same_state_read_back": same,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/pool_checkpoint_cpu.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for setting in args.settings:
        for method in SETTINGS[setting][3]:
            with tempfile.TemporaryDirectory() as tmp:
                state = server_state(setting, method, args.data_dir, Path(tmp) / "runs")
                row = measure(state, method, args.rounds, Path(tmp) / "ckpts")
            results[f"{setting}/{method}"] = row
            print(
                f"{setting}/{method}: extra {row['extra_tensor_bytes'] / 1e6:.1f} MB, "
                f"inline {row['round_seconds']['inline']:.3f} s, pool files "
                f"{row['round_seconds']['pool_files']:.3f} s a round ({row['ratio']:.1f}x)",
                flush=True,
            )
    report = {
        "benchmark": "pool_checkpoint",
        "rounds": args.rounds,
        "threads": 1,
        "machine": machine_facts(torch.device("cpu")),
        "results": results,
    }
    write_report(args.out, report)


if __name__ == "__main__":
    main()
