"""Re-checks issue 68's bad inputs as its reliability tester ran them: every case through the real command
line (``python -m fedaug ...``, a process of its own) in a temporary folder, on tiny data and one round.

For each case it records the exit code, whether stderr's last line is one ``fedaug: error:`` line naming the
bad value (no traceback, no other lines beside the log's), the files left behind (run dirs, partial caches),
the wall time (a case past ``--timeout`` seconds is a hang) and, for caches, resumes and identities, whether a
``WARNING`` (a logged recompute) or a refusal came. A case passes when it is refused in that one line and
leaves nothing behind, or (where a recompute is the repair) when it warns, naming what changed, and its
result is the recomputed one.

Usage::

    PYTHONPATH=src:. python scripts/recheck_bad_inputs.py                 # every case, a table at the end
    PYTHONPATH=src:. python scripts/recheck_bad_inputs.py --only csv-label-among-features,shard-empty
    PYTHONPATH=src:. python scripts/recheck_bad_inputs.py --json recheck.json --keep /tmp/recheck

The whole table (40 cases) took 8 minutes on a 2-core machine at a load of 5 to 10, mostly the start-up of
some 60 processes; at such a load a fedaug start-up alone can take 20 s, so ``--timeout 60`` tells a hang
from a slow start there. It exits 1 when a case fails.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMOKE = str(ROOT / "configs" / "smoke.yaml")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
BIG_SEED = str(2**64)  # needs 65 bits
PREPARING_TIMEOUT = 600.0
"""Seconds a good command before the bad one may take (a loaded machine's start-up alone can take 20 s)."""


class StepFailed(RuntimeError):
    """A preparing step (a good command before the bad one) did not succeed."""


@dataclass
class Done:
    """One finished process."""

    code: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    seconds: float


class Work:
    """One case's folder: the current folder of its commands, its FEDAUG_CACHE and its files."""

    def __init__(self, root: Path, timeout: float, base: Path | None) -> None:
        self.root, self.timeout, self.base = root, timeout, base
        self.cache = root / "cache"
        self.env: dict[str, str] = {}

    def path(self, relative: str) -> Path:
        return self.root / relative

    def write(self, relative: str, text: str | bytes) -> Path:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        return path

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        env = {**os.environ, "FEDAUG_CACHE": str(self.cache), "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
        env["FEDAUG_HOST_PROBE_S"] = "0.01"  # the campaign's host probe: given, not measured
        env.update(self.env)
        env.update(extra or {})
        return env

    def fedaug(self, argv: list[str], *, timeout: float | None = None, check: bool = False) -> Done:
        """``python -m fedaug ARGV`` in the case's folder."""
        start = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "fedaug", *argv],
                cwd=self.root,
                env=self.environ(),
                capture_output=True,
                text=True,
                timeout=timeout or (PREPARING_TIMEOUT if check else self.timeout),
                check=False,
            )
            result = Done(done.returncode, done.stdout, done.stderr, time.monotonic() - start)
        except subprocess.TimeoutExpired as expired:
            result = Done(None, _text(expired.stdout), _text(expired.stderr), time.monotonic() - start)
        if check and result.code != 0:
            raise StepFailed(f"fedaug {' '.join(argv)} -> {result.code}: {_last_line(result.stderr)}")
        return result

    def interrupted(self, argv: list[str]) -> None:
        """Starts ``fedaug ARGV``, sends SIGTERM once the run's first round is in its ``metrics.jsonl`` (the
        only one under ``runs/``) and waits: an interrupted run, as Ctrl-C or a cluster's time limit leave
        it."""
        process = subprocess.Popen(
            [sys.executable, "-m", "fedaug", *argv],
            cwd=self.root,
            env=self.environ(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline, metrics = time.monotonic() + PREPARING_TIMEOUT, list[Path]()
        while process.poll() is None and time.monotonic() < deadline:
            metrics = list((self.root / "runs").rglob("metrics.jsonl"))
            if metrics and (metrics[0].parent / "ckpt" / "latest.pt").is_file():  # round 1 is checkpointed
                process.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        _, err = process.communicate(timeout=PREPARING_TIMEOUT)
        run_dir = metrics[0].parent if metrics else self.root
        if (run_dir / "summary.json").exists():
            raise StepFailed(f"the run finished before it could be interrupted: {_last_line(err)}")
        if not (run_dir / "ckpt" / "latest.pt").exists():
            raise StepFailed(f"the interrupted run kept no checkpoint: {_last_line(err)}")


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def _last_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else ""


def _is_log_line(line: str) -> bool:
    """A line of fedaug's log (``05:47:05 INFO ...``)."""
    words = line.split(" ", 2)
    return len(words) >= 2 and len(words[0]) == 8 and words[0][2] == ":" and words[1] in LOG_LEVELS


@dataclass(frozen=True)
class Case:
    """One bad input. ``prepare`` makes its files (running any good commands first) and returns the bad
    command's arguments; ``needle`` is what the error line or the WARNING must say (the bad value); ``check``
    (after the bad command) returns a problem with its result, or None."""

    id: str
    group: str
    expect: str  # "refuse", "warn" (a logged recompute, or a refusal), or "succeed" (a hang that must not be)
    needle: str
    prepare: Callable[[Work], list[str]]
    check: Callable[[Work], str | None] | None = None


@dataclass
class Outcome:
    id: str
    group: str
    expect: str
    outcome: str = ""  # refused / warned / accepted / traceback / hang / unclear / setup failed
    ok: bool = False
    code: int | None = None
    seconds: float = 0.0
    last_line: str = ""
    names_value: bool = False
    other_lines: list[str] = field(default_factory=list)
    left_behind: list[str] = field(default_factory=list)
    cache_entries: list[str] = field(default_factory=list)  # complete cache files written (not a failure)
    warning: str = ""
    problem: str = ""


# --- files the cases use --------------------------------------------------------------------------------


def _npz(work: Work, name: str = "data.npz", *, classes: int = 4, shift: float = 0.0) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    y = np.arange(200) % classes
    x = (rng.normal(size=(4, 6)) * 3)[y % 4] + rng.normal(size=(200, 6)) + shift
    work.path(name).parent.mkdir(parents=True, exist_ok=True)
    np.savez(work.path(name), x=x.astype(np.float32), y=y)


NET = """from torch import nn
import fedaug
from fedaug.models.base import SplitModel


@fedaug.register_model("rc_net")
def rc_net(*, num_classes, input_shape, width=16):
    encoder = nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0] + {extra_in}, width), nn.{act}())
    return SplitModel.from_encoder_head(encoder, nn.Linear(width, num_classes + {extra_out}))
"""

PARTITIONER = """import numpy as np
import fedaug


@fedaug.register_partitioner("rc_sorted")
def rc_sorted(labels, *, num_clients, num_classes, rng):
    order = np.argsort(labels, kind="stable"){change}
    return list(np.array_split(order, num_clients))
"""


def _net(work: Work, *, act: str = "ReLU", extra_in: int = 0, extra_out: int = 0) -> None:
    work.write("net.py", NET.format(act=act, extra_in=extra_in, extra_out=extra_out))


def _arrays_config(work: Work, *, plugins: str = "[./net.py]") -> str:
    work.write(
        "exp.yaml",
        f"extends: {SMOKE}\nname: rc\nplugins: {plugins}\ndata: {{name: arrays, path: data.npz}}\n"
        "partition: {name: iid, num_clients: 4}\nmodel: {name: rc_net}\ntrain: {rounds: 1}\n",
    )
    return "exp.yaml"


def _csv(work: Work, rows: list[list[str]], *, features: str = "") -> str:
    work.write("table.csv", "\n".join(",".join(row) for row in rows) + "\n")
    option = f", features: {features}" if features else ""
    work.write(
        "csv.yaml",
        f"extends: {SMOKE}\nname: rc\ndata: {{name: csv, path: table.csv, label: label{option}}}\n"
        "partition: {name: iid, num_clients: 4}\ntrain: {rounds: 1}\n",
    )
    return "csv.yaml"


def _table(header: list[str], *, label: Callable[[int], str] = lambda i: str(i % 4)) -> list[list[str]]:
    rows = [header]
    for i in range(120):
        rows.append([f"{(i * 7 + j * 3) % 11 + i % 4 * 5}.5" for j in range(len(header) - 1)] + [label(i)])
    return rows


def _png(width: int, height: int) -> bytes:
    """A PNG whose header says ``width`` x ``height`` (8-bit RGB) over a few bytes of data: what a
    decompression bomb looks like to Pillow's open()."""

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))


def _image_folder(work: Work) -> str:
    from PIL import Image

    for label in ("cat", "dog"):
        for i in range(12):
            path = work.path(f"photos/{label}/{i}.png")
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (8, 8), (i * 20, 100 if label == "cat" else 10, 50)).save(path)
    work.write(
        "img.yaml",
        f"extends: {SMOKE}\nname: rc\ndata: {{name: image_folder, path: photos}}\n"
        "partition: {name: iid, num_clients: 4}\ntrain: {rounds: 1}\n",
    )
    return "img.yaml"


def _run(config: str, *sets: str) -> list[str]:
    argv = ["run", config, "--out-dir", "runs", "--set", "engine.num_threads=1"]
    for item in sets:
        argv += ["--set", item]
    return argv


def _smoke(*sets: str) -> list[str]:
    return _run(SMOKE, "train.rounds=1", *sets)


# --- runs the cases start from ---------------------------------------------------------------------------

BASE_RUNS = "base/runs"
"""The finished smoke runs (seeds 0 and 1, 2 rounds) that report, identity and zsdg cases copy."""


def _base_run(seed: int) -> Path:
    return Path("smoke/synthetic-dirichlet0.5_2-K6/fedavg") / f"seed{seed}"


def make_base(root: Path, timeout: float) -> Path:
    work = Work(root / "base", timeout, None)
    work.root.mkdir(parents=True)
    work.write("seeds.yaml", f"extends: {SMOKE}\ngrid: {{seed: [0, 1]}}\n")
    work.fedaug(
        ["sweep", "seeds.yaml", "--out-dir", "runs", "--set", "engine.num_threads=1"], timeout=300, check=True
    )
    for seed in (0, 1):
        if not (work.path("runs") / _base_run(seed) / "summary.json").is_file():
            raise StepFailed(f"the base sweep made no run dir {_base_run(seed)}")
    return work.path("runs")


def _copy_base(work: Work, seed: int) -> Path:
    assert work.base is not None
    target = work.path("runs") / _base_run(seed)
    shutil.copytree(work.base / _base_run(seed), target)
    return target


# --- the cases -----------------------------------------------------------------------------------------


def plugin_partitioner_changed(work: Work) -> list[str]:
    _npz(work)
    _net(work)
    work.write("part.py", PARTITIONER.format(change=""))
    config = _arrays_config(work, plugins="[./net.py, ./part.py]")
    work.fedaug(
        [*_run(config, "partition=rc_sorted", "partition.num_clients=4"), "--out-dir", "first"], check=True
    )
    work.write("part.py", PARTITIONER.format(change="[::-1]"))  # the same clients in the other order
    return [*_run(config, "partition=rc_sorted", "partition.num_clients=4"), "--out-dir", "second"]


def _metrics(folder: Path) -> str:
    (path,) = folder.rglob("metrics.jsonl")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def partitioner_recomputed(work: Work) -> str | None:
    """The new code's partition, not the old one's: the run's metrics equal a run on an empty cache."""
    config = "exp.yaml"
    work.cache = work.root / "fresh_cache"
    work.fedaug(
        [*_run(config, "partition=rc_sorted", "partition.num_clients=4"), "--out-dir", "third"], check=True
    )
    if _metrics(work.path("second")) != _metrics(work.path("third")):
        return "its metrics differ from a run of the new partitioner on an empty cache"
    if _metrics(work.path("first")) == _metrics(work.path("second")):
        return "its metrics are the old partitioner's"
    return None


SLOW = ("train.rounds=2", "train.local_epochs=100")  # rounds of a second or more: SIGTERM lands in round 2


def _resumable(work: Work) -> str:
    _npz(work)
    _net(work)
    config = _arrays_config(work)
    work.interrupted(_run(config, *SLOW))
    return config


def plugin_model_changed_at_resume(work: Work) -> list[str]:
    config = _resumable(work)
    _net(work, act="Tanh")
    return _run(config, *SLOW)


def data_changed_at_resume(work: Work) -> list[str]:
    config = _resumable(work)
    _npz(work, shift=0.5)
    return _run(config, *SLOW)


def finished_then_plugin_changed(work: Work) -> list[str]:
    _npz(work)
    _net(work)
    config = _arrays_config(work)
    work.fedaug(_run(config), check=True)
    _net(work, act="Tanh")
    return _run(config)


def finished_then_data_changed(work: Work) -> list[str]:
    _npz(work)
    _net(work)
    config = _arrays_config(work)
    work.fedaug(_run(config), check=True)
    _npz(work, shift=0.5)
    return _run(config)


def identity_deleted_config_edited(work: Work) -> list[str]:
    run_dir = _copy_base(work, 0)
    (run_dir / "summary.json").unlink()  # interrupted after its last checkpoint
    (run_dir / "identity.json").unlink()
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.001", "lr: 0.01"))
    return ["run", str(config.relative_to(work.root)), "--out-dir", "runs"]


def identity_deleted_set_edited(work: Work) -> list[str]:
    run_dir = _copy_base(work, 0)
    (run_dir / "summary.json").unlink()
    (run_dir / "identity.json").unlink()
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("lr: 0.001", "lr: 0.01"))
    return ["run", SMOKE, "--out-dir", "runs", "--set", "engine.num_threads=1", "--set", "train.lr=0.01"]


def report_copied_numbers(work: Work) -> list[str]:
    run_dir = _copy_base(work, 0)
    other = _copy_base(work, 1)
    for name in ("metrics.jsonl", "summary.json"):
        shutil.copyfile(other / name, run_dir / name)
    return ["report", "runs"]


def zsdg_seed(work: Work) -> list[str]:
    run_dir = _copy_base(work, 0)
    return ["zsdg", str(run_dir.relative_to(work.root)), "--seed", BIG_SEED, "--out", "z"]


CAMPAIGN = """studies: .
workers: {{cpu: 1}}
grids:
  - name: {name}
    preset: {smoke}
    study: tiny
    set: [train.rounds=1, engine.num_threads=1]
    grid: {{seed: [0], method: [fedavg]}}
    cost_s: {{cpu: 10}}
    report: {{runs: [runs], plots: false}}
"""


def campaign_grid_escape(work: Work) -> list[str]:
    work.write("studies/campaign.yaml", CAMPAIGN.format(name="../escape", smoke=SMOKE))
    flags = [
        "--budget",
        "120",
        "--device",
        "cpu",
        "--workers",
        "1",
        "--out",
        "out",
        "--runs-dir",
        "camp/runs",
    ]
    return ["campaign", "run", "--campaign", "studies/campaign.yaml", *flags]


def campaign_truncated_archive(work: Work) -> list[str]:
    work.write("studies/campaign.yaml", CAMPAIGN.format(name="tiny", smoke=SMOKE))
    source = work.path("src/tiny/runs/seed0")
    source.mkdir(parents=True)
    (source / "config.yaml").write_text("name: x\n" + "# pad\n" * 4000)
    with tarfile.open(work.path("whole.tar.gz"), "w:gz") as tar:
        tar.add(work.path("src/tiny"), arcname="tiny")
    whole = work.path("whole.tar.gz").read_bytes()
    work.write("out/tiny.tar.gz", whole[: len(whole) // 2])
    return ["campaign", "import", "out", "--campaign", "studies/campaign.yaml", "--runs-dir", "camp/runs"]


def image_bomb(pixels_side: int) -> Callable[[Work], list[str]]:
    def prepare(work: Work) -> list[str]:
        config = _image_folder(work)
        work.write("photos/cat/bomb.png", _png(pixels_side, pixels_side))
        return _run(config)

    return prepare


def image_fifo(work: Work) -> list[str]:
    config = _image_folder(work)
    os.mkfifo(work.path("photos/cat/stuck.png"))
    return _run(config)


PARTITIONER_OUT_OF_RANGE = """import numpy as np
import fedaug


@fedaug.register_partitioner("rc_beyond")
def rc_beyond(labels, *, num_clients, num_classes, rng):
    return list(np.array_split(np.arange(labels.size + 7), num_clients))
"""


def partitioner_out_of_range(work: Work) -> list[str]:
    work.write("beyond.py", PARTITIONER_OUT_OF_RANGE)
    return [*_smoke("partition=rc_beyond", "partition.num_clients=6"), "--plugin", "./beyond.py"]


def partitioner_reversed_views(work: Work) -> list[str]:
    """Found by this re-check: views with negative strides (``order[::-1]``) were a torch traceback."""
    work.write("part.py", PARTITIONER.format(change="[::-1]"))
    return [*_smoke("partition=rc_sorted", "partition.num_clients=6"), "--plugin", "./part.py"]


def plugin_exits(code: str) -> Callable[[Work], list[str]]:
    def prepare(work: Work) -> list[str]:
        work.write("quits.py", f"import sys\n\nsys.exit({code})\n")
        return [*_smoke(), "--plugin", "./quits.py"]

    return prepare


def plugin_argparse(work: Work) -> list[str]:
    work.write(
        "parses.py",
        "import argparse\n\nparser = argparse.ArgumentParser()\n"
        "parser.add_argument('--data', required=True)\nargs = parser.parse_args()\n",
    )
    return [*_smoke(), "--plugin", "./parses.py"]


def shard(value: str) -> Callable[[Work], list[str]]:
    def prepare(work: Work) -> list[str]:
        work.write("grid.yaml", f"extends: {SMOKE}\nname: sw\ngrid: {{seed: [0, 1]}}\n")
        return ["sweep", "grid.yaml", "--out-dir", "runs", "--set", "train.rounds=1", "--shard", value]

    return prepare


def csv_case(kind: str) -> Callable[[Work], list[str]]:
    header = ["f0", "f1", "f2", "label"]
    tables: dict[str, Callable[[], tuple[list[list[str]], str]]] = {
        "label-among-features": lambda: (_table(header), "[f0, f1, label]"),
        "empty-label": lambda: (_table(header, label=lambda i: "" if i == 5 else str(i % 4)), ""),
        "duplicate-column": lambda: (_table(["f0", "f1", "f1", "label"]), ""),
        "beyond-float32": lambda: (_with(_table(header), 3, 1, "1e300"), ""),
        "one-class": lambda: (_table(header, label=lambda i: "0"), ""),
    }

    def prepare(work: Work) -> list[str]:
        rows, features = tables[kind]()
        return _run(_csv(work, rows, features=features))

    return prepare


def _with(rows: list[list[str]], row: int, column: int, value: str) -> list[list[str]]:
    rows[row][column] = value
    return rows


def npz_one_class(work: Work) -> list[str]:
    _npz(work, classes=1)
    _net(work)
    return _run(_arrays_config(work))


def csv_columns(columns: int) -> Callable[[Work], list[str]]:
    def prepare(work: Work) -> list[str]:
        header = [f"f{j}" for j in range(columns)] + ["label"]
        lines = [",".join(header)]
        for i in range(24):
            lines.append(",".join(["1.5"] * columns) + f",{i % 2}")
        work.write("wide.csv", "\n".join(lines) + "\n")
        work.write(
            "wide.yaml",
            f"extends: {SMOKE}\nname: rc\n"
            "data: {name: csv, path: wide.csv, label: label, normalize: false}\n"
            "partition: {name: iid, num_clients: 2}\n",
        )
        return ["partition", "wide.yaml"]

    return prepare


def alias_bomb(work: Work) -> list[str]:
    lines = ["  l0: &l0 [" + ", ".join(["x"] * 9) + "]"]
    for level in range(1, 8):
        lines.append(f"  l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 9) + "]")
    work.write("bomb.yaml", f"extends: {SMOKE}\nmethod:\n  name: fedavg\n" + "\n".join(lines) + "\n")
    return _run("bomb.yaml", "train.rounds=1")


def model_mismatch(extra_in: int, extra_out: int) -> Callable[[Work], list[str]]:
    def prepare(work: Work) -> list[str]:
        _npz(work)
        _net(work, extra_in=extra_in, extra_out=extra_out)
        return _run(_arrays_config(work))

    return prepare


def empty_cache_env(work: Work) -> list[str]:
    work.env["FEDAUG_CACHE"] = ""
    return _smoke()


def sets(*items: str) -> Callable[[Work], list[str]]:
    return lambda work: _smoke(*items)


CASES = [
    # caches and resumes that outlive their inputs
    Case(
        "plugin-partitioner-changed",
        "cache",
        "warn",
        "made by other code of",
        plugin_partitioner_changed,
        partitioner_recomputed,
    ),
    Case(
        "plugin-model-changed-at-resume", "cache", "warn", "net.py (SHA-256", plugin_model_changed_at_resume
    ),
    Case("data-file-changed-at-resume", "cache", "warn", "data.npz (SHA-256", data_changed_at_resume),
    Case("finished-run-plugin-changed", "cache", "warn", "net.py", finished_then_plugin_changed),
    Case("finished-run-data-changed", "cache", "warn", "data.npz", finished_then_data_changed),
    # users' data accepted when wrong
    Case("csv-label-among-features", "data", "refuse", "label", csv_case("label-among-features")),
    Case("csv-empty-label-cell", "data", "refuse", "empty", csv_case("empty-label")),
    Case("csv-duplicate-column", "data", "refuse", "f1", csv_case("duplicate-column")),
    Case("csv-beyond-float32", "data", "refuse", "f1", csv_case("beyond-float32")),
    Case("csv-one-class", "data", "refuse", "class", csv_case("one-class")),
    Case("npz-one-class", "data", "refuse", "class", npz_one_class),
    # identity
    Case(
        "identity-deleted-config-yaml-edited",
        "identity",
        "refuse",
        "train.lr",
        identity_deleted_config_edited,
    ),
    Case("identity-deleted-set-edited", "identity", "refuse", "train.lr", identity_deleted_set_edited),
    # names that become paths
    Case("campaign-grid-named-escape", "path", "refuse", "../escape", campaign_grid_escape),
    # tracebacks
    Case(
        "campaign-import-truncated-tar-gz", "traceback", "refuse", "tiny.tar.gz", campaign_truncated_archive
    ),
    Case("image-decompression-bomb-2x", "traceback", "refuse", "bomb.png", image_bomb(20000)),
    Case("image-decompression-bomb-1.5x", "traceback", "refuse", "bomb.png", image_bomb(12000)),
    Case("plugin-partitioner-out-of-range", "traceback", "refuse", "rc_beyond", partitioner_out_of_range),
    Case("plugin-partitioner-reversed-views", "traceback", "succeed", "", partitioner_reversed_views),
    Case("shard-arabic-indic-digit", "traceback", "refuse", "\u0661/2", shard("\u0661/2")),
    Case("shard-fullwidth-digit", "traceback", "refuse", "0/\uff12", shard("0/\uff12")),
    Case("data-seed-beyond-64-bits", "traceback", "refuse", BIG_SEED, sets(f"data.seed={BIG_SEED}")),
    Case("data-seed-huge", "traceback", "refuse", "9" * 23, sets("data.seed=" + "9" * 23)),
    Case(
        "partition-seed-beyond-64-bits", "traceback", "refuse", BIG_SEED, sets(f"partition.seed={BIG_SEED}")
    ),
    Case("zsdg-seed-beyond-64-bits", "traceback", "refuse", BIG_SEED, zsdg_seed),
    # hangs and cliffs
    Case("image-fifo", "hang", "refuse", "stuck.png", image_fifo),
    Case("csv-25k-columns", "hang", "succeed", "", csv_columns(25_000)),
    Case("csv-100k-columns", "hang", "succeed", "", csv_columns(100_000)),
    Case("yaml-alias-bomb", "hang", "refuse", "alias", alias_bomb),
    # late failures
    Case("model-input-size-mismatch", "late", "refuse", "rc_net", model_mismatch(1, 0)),
    Case("model-output-size-mismatch", "late", "refuse", "rc_net", model_mismatch(0, -1)),
    Case("lr-overflows-first-step", "late", "refuse", "train.lr", sets("train.lr=1e30")),
    # also
    Case("plugin-sys-exit-0", "also", "refuse", "quits.py", plugin_exits("0")),
    Case("plugin-sys-exit-3", "also", "refuse", "quits.py", plugin_exits("3")),
    Case("plugin-argparse-at-import", "also", "refuse", "parses.py", plugin_argparse),
    Case("shard-empty", "also", "refuse", "--shard", shard("")),
    Case("hidden-sizes-quoted-empty", "also", "refuse", "model.hidden_sizes", sets("model.hidden_sizes=''")),
    Case("hidden-sizes-bare-empty", "also", "refuse", "model.hidden_sizes", sets("model.hidden_sizes=")),
    Case("fedaug-cache-empty", "also", "refuse", "FEDAUG_CACHE", empty_cache_env),
    Case("report-numbers-from-another-run", "also", "refuse", "metrics.jsonl", report_copied_numbers),
]


# --- running and judging -------------------------------------------------------------------------------


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if not p.is_fifo()
    }


def judge(case: Case, done: Done, left: list[str], problem: str | None) -> Outcome:
    lines = done.stderr.strip().splitlines()
    last = lines[-1] if lines else ""
    warnings = [line for line in lines if _is_log_line(line) and line.split(" ", 2)[1] == "WARNING"]
    named = [w for w in warnings if case.needle in w]
    result = Outcome(case.id, case.group, case.expect, code=done.code, seconds=round(done.seconds, 1))
    result.last_line, result.problem = last[:300], problem or ""
    result.warning = (named or warnings or [""])[0][:300]
    result.other_lines = [line[:200] for line in lines[:-1] if not _is_log_line(line)][:5]
    result.left_behind = left[:10]
    is_error_line = last.startswith("fedaug") and ": error: " in last
    result.names_value = is_error_line and case.needle in last
    if done.code is None:
        result.outcome = "hang"
    elif "Traceback" in done.stderr:
        result.outcome = "traceback"
    elif done.code != 0:
        result.outcome = "refused" if is_error_line else "unclear"
    else:
        result.outcome = "warned" if warnings else "accepted"
    clean = not result.other_lines and not left
    if case.expect == "refuse":
        result.ok = result.outcome == "refused" and result.names_value and clean and done.code == 2
    elif case.expect == "warn":
        refused = result.outcome == "refused" and result.names_value and clean
        result.ok = refused or (result.outcome == "warned" and bool(named) and not problem)
    else:
        result.ok = done.code == 0 and not problem
    return result


def run_case(case: Case, root: Path, timeout: float, base: Path | None) -> Outcome:
    work = Work(root / case.id, timeout, base)
    work.root.mkdir(parents=True)
    try:
        argv = case.prepare(work)
    except StepFailed as error:
        return Outcome(case.id, case.group, case.expect, outcome="setup failed", problem=str(error))
    before = _snapshot(work.root)
    done = work.fedaug(argv)
    after = _snapshot(work.root)
    new = sorted(p for p, stat in after.items() if before.get(p) != stat and (work.root / p).is_file())
    partial = [p for p in new if ".tmp" in Path(p).name or Path(p).name.endswith((".part", ".partial"))]
    # a complete cache entry (of a valid partition or dataset) is kept by design; a run dir, or anything
    # partial, is what a refused command must not leave
    cache = [p for p in new if p.startswith("cache/") and p not in partial]
    left = [p for p in new if p not in cache and not p.endswith(".lock")]
    if case.expect != "refuse":
        left = partial
    problem = None
    if case.check is not None and done.code == 0:
        try:
            problem = case.check(work)
        except StepFailed as error:
            problem = str(error)
    result = judge(case, done, left, problem)
    result.cache_entries = cache
    return result


def table(results: list[Outcome]) -> str:
    rows = [
        "| case | expected | outcome | ok | exit | s | last line / warning |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        text = r.warning if r.outcome == "warned" else r.last_line
        if r.left_behind:
            text += f" [left: {', '.join(r.left_behind[:3])}]"
        if r.other_lines:
            text += f" [other lines: {r.other_lines[0]}]"
        if r.problem:
            text += f" [{r.problem}]"
        text = text.replace("|", "\\|")
        verdict = "yes" if r.ok else "NO"
        rows.append(f"| {r.id} | {r.expect} | {r.outcome} | {verdict} | {r.code} | {r.seconds} | {text} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated case ids")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds a command may take (a hang)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument("--keep", type=Path, help="work in this (new) folder and keep it")
    args = parser.parse_args(argv)
    cases = CASES
    if args.only:
        wanted = args.only.split(",")
        unknown = sorted(set(wanted) - {c.id for c in CASES})
        if unknown:
            parser.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(c.id for c in CASES)}")
        cases = [c for c in CASES if c.id in wanted]
    root = args.keep or Path(tempfile.mkdtemp(prefix="recheck68-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        needs_base = any(
            c.prepare
            in (identity_deleted_config_edited, identity_deleted_set_edited, report_copied_numbers, zsdg_seed)
            for c in cases
        )
        base = make_base(root, args.timeout) if needs_base else None
        results = []
        for case in cases:
            result = run_case(case, root, args.timeout, base)
            print(
                f"{result.id}: {result.outcome} ({'ok' if result.ok else 'FAIL'}, {result.seconds} s)",
                flush=True,
            )
            results.append(result)
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1, ensure_ascii=False) + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
