"""``fedaug flower simulate`` is quiet by default (``fedaug.flower.logs``): no alembic INFO lines, no Flower
DEBUG lines, no doubled lines, no ``run_simulation`` deprecation notice; its start-up names Flower's phases.

One small simulation (4 synthetic clients, 2 rounds, one Ray CPU: ~35 s on a loaded 2-core machine), run
by the CLI in a fresh process, so that the logging is set up as a user's command sets it up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytest.importorskip("flwr")
pytest.importorskip("ray")

SMALL = ["partition.num_clients=4", "train.clients_per_round=3", "train.rounds=2", "engine.num_threads=1"]
LINE = re.compile(r"^\d\d:\d\d:\d\d (INFO|WARNING|ERROR) ")


def test_a_simulation_actors_shutdown_notice_is_dropped_in_the_actor_unless_verbose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import logging

    from fedaug.flower.logs import ACTOR_SHUTDOWN, QUIET_ENV, quiet_actor

    flower = logging.getLogger("flwr")
    monkeypatch.setattr(flower, "filters", [])

    def kept(message: str) -> bool:
        return flower.filter(logging.LogRecord("flwr", logging.WARNING, __file__, 1, message, None, None))

    notice = f"{ACTOR_SHUTDOWN}ClientAppActor"
    monkeypatch.setenv(QUIET_ENV, "0")  # -v: every line
    quiet_actor()
    assert kept(notice)
    monkeypatch.setenv(QUIET_ENV, "1")
    quiet_actor()
    quiet_actor()  # idempotent: one filter
    assert not kept(notice) and kept("another warning of an actor")
    assert len(flower.filters) == 1


# Under load (a 2-core host at a load of 11-13) the simulation's Ray actor printed
# "(ClientAppActor pid=...) WARNING :   Manually terminating ClientAppActor" at the end of 2 runs of 2;
# with fedaug.flower.logs.quiet_actor, 0 of 3 (issue #69). Slow: ~70 s on that host.
@pytest.mark.slow
def test_a_flower_simulation_logs_once_per_message_without_debug_alembic_or_the_known_notice(
    tmp_path: Path,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "src"), "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "fedaug",
        "flower",
        "simulate",
        str(REPO_ROOT / "configs" / "smoke.yaml"),
    ]
    command += [arg for override in SMALL for arg in ("--set", override)]
    command += ["--num-cpus", "1", "--out-dir", str(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "alembic" not in done.stderr
    assert "DEBUG" not in done.stderr
    assert "DEPRECATED" not in done.stderr
    others = [line for line in lines if not LINE.match(line)]
    assert others == [], others  # fedaug's format only: nothing printed twice
    assert len({line[9:] for line in lines}) == len(lines)
    (timings,) = tmp_path.rglob("fedavg/seed0/timings.jsonl")
    phases = json.loads(timings.read_text().splitlines()[0])["startup"]["phases"]
    assert {"flower_imports", "flower_setup", "supernodes"} <= set(phases)
    assert any("round 2/2" in line for line in lines)
