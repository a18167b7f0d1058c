"""The node-local store of a client's persistent state on Flower (MOON's previous model, SCAFFOLD's control
variate, FedDyn's gradient state, ``local``'s own model).

A client's state is private to it: it never travels to the server, so the server's checkpoint cannot hold
it. Each node writes it instead, after every round its client trained, to a folder of its own::

    <run dir>/client_state/<client>/round_NNNN.pt      (default: the run dir as the node resolves it)
    <state-dir>/<name>/<dataset-partition>/<method>/seed<k>/<client>/round_NNNN.pt   (node config state-dir)

Each file holds the state a client kept after training in round NNNN, tagged with the run's identity (the
digest of its result config, :func:`fedaug.runs.verify.identity_of`), the client id and the round, and
carries the SHA-256 of that content; it is written atomically (temporary file, fsync, rename).

The server says, in each message, which round's state the client must start from: the last round, up to
the server's checkpoint, in which the client trained (:func:`state_rounds`). So a run resumed from its
checkpoint of round r, after a kill in round r + 1 that some nodes had already trained and saved, starts
every client from the state it had at round r, exactly as the uninterrupted run did, whatever newer files
the interrupted round left. A node keeps two files per client: the one it started the round from and the
one it wrote (the first is what a resume of that round needs).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from fedaug.config.identity import run_dir_for
from fedaug.config.schema import ExperimentConfig
from fedaug.engine.checkpoint import (
    DIGEST_KEY,
    atomic_write,
    content_digest,
    load_torch_file,
    short_reason,
)
from fedaug.errors import CheckpointError, PathError
from fedaug.types import ClientId

logger = logging.getLogger(__name__)

STORE_FORMAT = 1
STATE_DIR = "client_state"
"""The store's folder in the run dir (when the node config names no ``state-dir``)."""

FRESH_HINT = "or start the run over with --fresh (fedaug flower simulate/serve ... --fresh)"


def store_root(config: ExperimentConfig, state_dir: str | None = None) -> Path:
    """The folder of ``config``'s run in a node's store: below ``state_dir`` (the node config's) at the run
    dir's own path under ``out_dir``, or the run dir's ``client_state/`` (None)."""
    run_dir = run_dir_for(config)
    if state_dir:
        return Path(state_dir) / run_dir.relative_to(config.out_dir)
    return run_dir / STATE_DIR


def run_tag(config: ExperimentConfig) -> str:
    """What a state file of ``config``'s run is tagged with: its identity (the result config's digest)."""
    from fedaug.runs.verify import identity_of

    return str(identity_of(config)["sha256"])[:16]


def state_rounds(records: Iterable[Mapping[str, Any]]) -> dict[ClientId, int]:
    """Each client's last training round in ``records`` (the rounds' ``metrics.jsonl`` lines, ``clients``)."""
    last: dict[ClientId, int] = {}
    for record in records:
        for client in record["clients"]:
            last[int(client)] = int(record["round"])
    return last


@dataclasses.dataclass(frozen=True)
class ClientStateStore:
    """One client's state files of one run on its node.

    Attributes:
        root: the client's folder (``.../<client>``).
        run: the run's identity digest; a file tagged with another is refused.
        client_id: the client.
    """

    root: Path
    run: str
    client_id: ClientId

    def path(self, round_num: int) -> Path:
        """The file of the state kept after ``round_num``."""
        return self.root / f"round_{round_num:04d}.pt"

    def rounds(self) -> list[int]:
        """The rounds with a state file, ascending."""
        names = (p.stem.removeprefix("round_") for p in self.root.glob("round_*.pt"))
        return sorted(int(n) for n in names if n.isdigit())

    def load(self, round_num: int, *, required: bool, device: torch.device | None = None) -> Any:
        """The state the client kept after ``round_num`` (0: before its first round, None), its tensors on
        ``device`` (None: the CPU); None when there is no such file and it is not ``required``.

        Raises:
            CheckpointError: the file is missing while ``required``, damaged (unreadable, its digest
                wrong) or not this client's state of this run and round (one line: which client, which file
                and what to do).
        """
        path = self.path(round_num)
        if round_num == 0 or (not required and not path.exists()):
            return None
        if not path.exists():
            raise CheckpointError(
                f"client {self.client_id} trained in round {round_num}, but its state of that round is "
                f"missing ({path} does not exist): the node keeps it in {self.root.parent} (its node config "
                f"state-dir, default the run dir's {STATE_DIR}/); restore that folder, {FRESH_HINT}"
            )
        try:
            content = load_torch_file(path, map_location=device or "cpu")
        except CheckpointError as exc:  # torch cannot read it
            empty = path.stat().st_size == 0
            raise self._refused(
                path, "the file is empty" if empty else short_reason(exc.__cause__ or exc)
            ) from exc
        self._check(path, content, round_num)
        return content["state"]

    def _check(self, path: Path, content: Any, round_num: int) -> None:
        if not isinstance(content, dict) or content.get("format") != STORE_FORMAT:
            raise self._refused(path, "not a fedaug client state file")
        digest = content.pop(DIGEST_KEY, None)
        if digest != content_digest(content):
            raise self._refused(path, "its content does not match its SHA-256 digest")
        found = (content.get("run"), content.get("client"), content.get("round"))
        if found != (self.run, self.client_id, round_num):
            raise self._refused(
                path,
                f"it is the state of run {found[0]}, client {found[1]}, round {found[2]}; expected run "
                f"{self.run}, client {self.client_id}, round {round_num}",
            )

    def _refused(self, path: Path, problem: str) -> CheckpointError:
        return CheckpointError(
            f"client {self.client_id}'s state file {path} cannot be used ({problem}); restore it from a "
            f"copy, {FRESH_HINT}"
        )

    def save(self, round_num: int, state: Any) -> None:
        """Writes the state kept after ``round_num`` atomically, with its tag and digest.

        Raises:
            PathError: the folder cannot be written (it says to give the node a ``state-dir``).
        """
        content: dict[str, Any] = {
            "format": STORE_FORMAT,
            "run": self.run,
            "client": self.client_id,
            "round": round_num,
            "state": state,
        }
        content[DIGEST_KEY] = content_digest(content)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.path(round_num), lambda handle: torch.save(content, handle))
        except (OSError, PathError) as exc:
            raise PathError(
                f"client {self.client_id} cannot keep its state in {self.root} ({exc}); give the node a "
                "writable folder: fedaug flower client --state-dir DIR (node config state-dir)"
            ) from exc

    def keep_only(self, rounds: set[int]) -> None:
        """Deletes the client's state files of every other round (older ones, and newer ones left by an
        interrupted round that the server's checkpoint never recorded)."""
        for round_num in self.rounds():
            if round_num not in rounds:
                self.path(round_num).unlink(missing_ok=True)
