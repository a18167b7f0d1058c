"""``engine.branch_from_fedavg``: a run whose first rounds are FedAvg's starts from FedAvg's checkpoint.

Fed-ZDAC/ZDAS train exactly as FedAvg before ``start_round`` (80 of 100 rounds in the paper), FedGen before
its generator's first round (after a 30-round warm-up) and post-hoc CCVR before its last round, with the same
seeds (:class:`~fedaug.api.BranchesFromFedAvg`): the engine draws every round's clients and batches from
``(seed, round, client)`` alone, never from the history. So the FedAvg run of the same setting already
computed those rounds, and each of these runs can start from its checkpoint instead of repeating them: the
finished run is the same, file for file except the copied rounds' wall times, as one run from round 1 (tested
for every method that declares FedAvg rounds).

The FedAvg run is the sibling run dir of the same name, setting and seed
(:func:`~fedaug.config.identity.fedavg_run_dir`); its config must equal this run's except for the
method and the engine settings. It needs a checkpoint at or before the method's last FedAvg round: the FedAvg
run keeps one with ``engine.keep_checkpoints`` (e.g. ``[79]`` for Fed-ZDA's ``start_round: 80``), or its
``latest.pt`` is early enough. Without one the run starts from round 1, with the same results.

:func:`start_from_fedavg` (the runner) writes the start into an empty run dir: the converted server state as
``ckpt/latest.pt``, FedAvg's metrics and timings of the copied rounds, and ``branch.json`` saying where they
came from; the engine then resumes after that round as after an interruption. :func:`branch_plan` (a sweep's
order and time estimate) says the same before any data is loaded.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from fedaug.api import ConvertsFedAvgState, Method, RunContext, ServerState, fedavg_rounds_of
from fedaug.config.identity import fedavg_run_dir
from fedaug.config.schema import ExperimentConfig, MethodSpec
from fedaug.engine.checkpoint import RunStore, read_jsonl, write_json
from fedaug.engine.round_log import log_digest
from fedaug.errors import ConfigError, FedaugError
from fedaug.runs.resolve import ResolvedRun, build_method
from fedaug.runs.resume import config_differences
from fedaug.runtime.device import device_facts, device_label
from fedaug.runtime.machine import cpu_model, other_recorded_cpu

logger = logging.getLogger(__name__)


def branch_plan(config: ExperimentConfig) -> tuple[Path, int] | None:
    """The FedAvg run dir that ``config`` would start from and the number of FedAvg rounds it would take from
    it, or None if it would not branch.

    Decided before any data is loaded (:meth:`~fedaug.api.BranchesFromFedAvg.fedavg_rounds` reads only the
    method's config and the number of rounds). A config the method cannot be built from is not held back (its
    run reports the error).
    """
    if not config.engine.branch_from_fedavg or config.method.name == "fedavg":
        return None
    try:
        method = build_method(config)
    except FedaugError:
        return None
    rounds = fedavg_rounds_of(method, config.train.rounds)
    if rounds == 0:
        return None
    return fedavg_run_dir(config), rounds


def branch_source(config: ExperimentConfig) -> Path | None:
    """The run dir of the FedAvg run that ``config`` would start from, or None if it would not branch."""
    plan = branch_plan(config)
    return None if plan is None else plan[0]


def start_from_fedavg(resolved: ResolvedRun) -> int:
    """Branches the run off its FedAvg run where ``engine.branch_from_fedavg`` is set and the method has
    FedAvg rounds; returns the round it starts after (0: from round 1).

    Raises:
        ConfigError: if the FedAvg run dir holds a run of another setting.
    """
    config, run_dir = resolved.config, resolved.run_dir
    if not config.engine.branch_from_fedavg:
        return 0
    fedavg_dir = fedavg_run_dir(config)
    no_rounds = fedavg_rounds_of(resolved.method, resolved.run.num_rounds) == 0
    if no_rounds or fedavg_dir.resolve() == run_dir.resolve():
        logger.debug("%s has no FedAvg rounds to branch from", config.method.name)
        return 0
    saved_path = fedavg_dir / "config.yaml"
    if saved_path.exists():
        diffs = config_differences(saved_path, replace(config, method=MethodSpec(name="fedavg")))
        if diffs:
            raise ConfigError(
                f"engine.branch_from_fedavg: {fedavg_dir} holds a FedAvg run of another setting (differs in: "
                f"{', '.join(diffs)}); run FedAvg with this run's settings there, or set "
                "engine.branch_from_fedavg=false"
            )
    method, run = resolved.method, resolved.run
    return branch_from_fedavg(fedavg_dir, run_dir, method, run, max_round=config.train.rounds)


def _start_round(kept_rounds: list[int], latest_round: int | None, last: int) -> int | str | None:
    """Which checkpoint a branch starts from: ``"latest"`` when ``ckpt/latest.pt`` is after every kept round
    ``<= last`` and not after ``last``, else the latest such kept round (None: none). The one rule of
    :func:`start_checkpoint` and :func:`has_start_checkpoint`."""
    kept = max((r for r in kept_rounds if r <= last), default=0)
    if latest_round is not None and kept <= latest_round <= last:
        return "latest"
    return kept or None


def start_checkpoint(
    source: RunStore, last_fedavg_round: int, *, map_location: torch.device | str = "cpu"
) -> dict[str, Any] | None:
    """The checkpoint of the latest round ``<= last_fedavg_round`` in ``source`` (None: none), loaded once,
    with its tensors on ``map_location`` (whatever device the FedAvg run computed on)."""
    latest = source.load_checkpoint(map_location=map_location)
    latest_round = None if latest is None else int(latest["round_num"])
    choice = _start_round(source.kept_rounds(), latest_round, last_fedavg_round)
    if choice == "latest":
        return latest
    return source.load_checkpoint(choice, map_location=map_location) if isinstance(choice, int) else None


def has_start_checkpoint(source_dir: Path, last_fedavg_round: int) -> bool:
    """Whether :func:`start_checkpoint` would find a checkpoint in ``source_dir``, loading none (the latest
    checkpoint's round taken as the number of rounds in ``metrics.jsonl``)."""
    source = RunStore(source_dir)
    latest_round = len(read_jsonl(source.metrics_path)) if source.ckpt_path.exists() else None
    return _start_round(source.kept_rounds(), latest_round, last_fedavg_round) is not None


def fedavg_start_state(method: Method, state: ServerState, run: RunContext) -> ServerState:
    """``method``'s server state after FedAvg's ``state``: its own conversion where it has one
    (:class:`~fedaug.api.ConvertsFedAvgState`), else :meth:`~fedaug.api.Method.init_server`'s with FedAvg's
    weights and round."""
    if isinstance(method, ConvertsFedAvgState):
        return method.from_fedavg_state(state, run)
    fresh = method.init_server(state.model_state, run)
    return ServerState(round_num=state.round_num, model_state=fresh.model_state, extra=fresh.extra)


def branch_from_fedavg(
    source_dir: Path, run_dir: Path, method: Method, run: RunContext, *, max_round: int
) -> int:
    """Starts ``run_dir`` from the FedAvg run in ``source_dir``; returns the round it starts after (0: none).

    The round is the latest one with a checkpoint in ``source_dir`` that is at most ``max_round`` and at most
    the method's FedAvg rounds of ``run``. Nothing is written when there is none (the run then starts from
    round 1) or when ``run_dir`` already has a checkpoint (it resumes from its own).
    """
    target = RunStore(run_dir)
    if target.ckpt_path.exists():
        return 0
    last = min(fedavg_rounds_of(method, run.num_rounds), max_round)
    source = RunStore(source_dir)
    # On the run's device: the method converts the state (fedavg_start_state) as it would its own.
    found = last > 0 and source_dir.is_dir()
    ckpt = start_checkpoint(source, last, map_location=run.device) if found else None
    if ckpt is None:
        logger.info(
            "no FedAvg checkpoint at or before round %d in %s (keep one with engine.keep_checkpoints: [%d]); "
            "%s starts from round 1",
            last,
            source_dir,
            last,
            method.name,
        )
        _warn_other_machine(source_dir, last, run.device)
        return 0
    round_num = int(ckpt["round_num"])
    state = fedavg_start_state(method, ServerState(**ckpt["state"]), run)
    target.prepare()
    for path, src in ((target.metrics_path, source.metrics_path), (target.timings_path, source.timings_path)):
        shutil.copyfile(src, path)
    copied = target.rewind(round_num)  # FedAvg's metrics and timings of the copied rounds
    write_json(run_dir / "branch.json", {"from": str(source_dir), "round": round_num})
    # last: a branch cut short leaves no checkpoint, and the next start branches again
    start = {
        "state": vars(state),
        "client_states": ckpt["client_states"],
        "round_num": round_num,
        "metrics_sha256": log_digest(copied),
    }
    target.save_checkpoint(start)
    logger.info(
        "%s starts after round %d of the FedAvg run %s (its rounds 1-%d are FedAvg's)",
        method.name,
        round_num,
        source_dir,
        fedavg_rounds_of(method, run.num_rounds),
    )
    return round_num


def _warn_other_machine(source_dir: Path, last: int, device: torch.device) -> None:
    """Warns when a run that repeats FedAvg's rounds 1-``last`` itself runs on another device (CPU vs a GPU
    model) or, both on the CPU, another CPU model than the FedAvg run in ``source_dir`` did (its ``env.json``;
    runs from before devices were recorded ran on the CPU; not checked where it records nothing).

    Kernels round differently on another kind of CPU (:mod:`fedaug.runtime.machine`) or device, so those
    rounds will
    not equal the FedAvg run's bit for bit (Fed-ZDA grid, Fashion-MNIST multimodal seed 2: from round 2 on,
    by -0.01 ± 0.35 points of accuracy over rounds 61-79), and a comparison paired by seed holds that drift.
    """
    env = _recorded_env(source_dir)
    was, now_on = device_label(env), device_label(device_facts(device))
    if env and was != now_on:
        logger.warning(
            "%s ran on %s and this run repeats its rounds 1-%d on %s: kernels round differently on another "
            "device, so those rounds will not be bit-identical to it (a gain paired by seed holds that "
            "drift)",
            source_dir,
            was,
            last,
            now_on,
        )
        return
    if now_on != "cpu":
        return  # the same GPU model: the host's CPU does not compute the rounds
    source_cpu = other_recorded_cpu(source_dir)
    if source_cpu is not None:
        logger.warning(
            "%s ran on %s and this run repeats its rounds 1-%d on %s: kernels round differently on another "
            "kind of CPU, so those rounds will not be bit-identical to it (a gain paired by seed holds that "
            "drift)",
            source_dir,
            source_cpu,
            last,
            cpu_model(),
        )


def _recorded_env(run_dir: Path) -> dict[str, Any]:
    """``run_dir``'s ``env.json`` ({} where there is none or it cannot be read)."""
    try:
        env = json.loads((run_dir / "env.json").read_text())
    except (OSError, ValueError):
        return {}
    return env if isinstance(env, dict) else {}
