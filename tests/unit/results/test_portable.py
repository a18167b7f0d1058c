"""Archives hold no absolute path of the machine that wrote them (:mod:`fedaug.results.portable`)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from fedaug.results.archive import archive_runs
from fedaug.results.portable import (
    absolute_paths,
    archive_files,
    portable_file,
    portable_text,
    read_text,
)
from fedaug.results.store import load_runs

REPOSITORY = Path(__file__).resolve().parents[3]
ARCHIVE_ROOTS = ("studies", "benchmarks/results")


def test_each_kind_of_path_gets_its_portable_form() -> None:
    text = (
        '"source": "FSDD recordings from /home/u/shared/data/fsdd/x.tar.xz; "\n'
        '"UCI-HAR from /home/u/.cache/fedaug/data/uci_har",\n'
        '"config": "/home/u/fedaug/configs/default.yaml", "run": "/srv/bg/runs/fa/seed0",\n'
        "launched /tmp/gpu_grid_runs/flea/K75/seed1 with /tmp/nvidia-mps/ and /home/u/shared/data\n"
        "kept: https://example.org/a/b, 3/4, best / last-10, <runs>/x, ./rel/path, ~/home/x\n"
    )
    assert portable_text(text) == (
        '"source": "FSDD recordings from <data_dir>/fsdd/x.tar.xz; "\n'
        '"UCI-HAR from <data_dir>/uci_har",\n'
        '"config": "configs/default.yaml", "run": "<runs>/fa/seed0",\n'
        "launched <runs>/flea/K75/seed1 with <abs>/nvidia-mps/ and <data_dir>\n"
        "kept: https://example.org/a/b, 3/4, best / last-10, <runs>/x, ./rel/path, ~/home/x\n"
    )


def test_a_run_config_drops_out_dir_and_data_dir_only_when_absolute() -> None:
    config = (
        "name: x\nout_dir: /tmp/r\ndata:\n  name: uci_har\n  data_dir: /d/data\nmodel:\n  data_dir: null\n"
    )
    assert portable_text(config, config=True) == "name: x\ndata:\n  name: uci_har\nmodel:\n  data_dir: null\n"
    assert portable_text("out_dir: runs\n", config=True) == "out_dir: runs\n"


@given(st.lists(st.sampled_from(["/home/a/data/x", "/tmp/q_runs/s", " ", "a/b", "/x", "\n", "<abs>/y"])))
def test_portable_text_is_idempotent_and_leaves_no_absolute_path(pieces: list[str]) -> None:
    once = portable_text("".join(pieces))
    assert portable_text(once) == once
    assert absolute_paths(once) == []


def test_a_gzipped_file_stays_gzip_with_a_fixed_header(tmp_path: Path) -> None:
    path = tmp_path / "timings.jsonl.gz"
    path.write_bytes(gzip.compress(b'{"dir": "/tmp/some_runs/a"}\n', mtime=1234))
    assert portable_file(path) is True
    first = path.read_bytes()
    assert gzip.decompress(first) == b'{"dir": "<runs>/a"}\n'
    assert first[4:8] == b"\0\0\0\0"  # no time in the header: the same text gives the same bytes
    assert portable_file(path) is False and path.read_bytes() == first
    image = tmp_path / "plot.png"
    image.write_bytes(b"/home/x")
    assert portable_file(image) is False and image.read_bytes() == b"/home/x"


def test_archive_writes_no_absolute_path_and_still_reads(
    tmp_path: Path, make_run: Callable[..., Path]
) -> None:
    run_dir = make_run(tmp_path / "runs", accs=[0.5, 0.7])  # its config's out_dir is absolute
    (run_dir / "env.json").write_text(json.dumps({"dataset_source": f"UCI-HAR from {tmp_path}/data/uci_har"}))
    (run_dir / "timings.jsonl").write_text(json.dumps({"dir": str(run_dir)}) + "\n")
    [target] = archive_runs(tmp_path / "runs", tmp_path / "archive")
    for path in target.iterdir():
        assert absolute_paths(read_text(path)) == [], path.name
    assert json.loads((target / "env.json").read_text()) == {
        "dataset_source": "UCI-HAR from <data_dir>/uci_har"
    }
    [run] = load_runs(tmp_path / "archive")
    assert run.summary["best_acc"] == 0.7 and run.config["out_dir"] == "runs"


def test_no_archived_file_holds_an_absolute_path() -> None:
    """Run ``python scripts/portable_archives.py`` to rewrite the ones this names."""
    files = archive_files(path for root in ARCHIVE_ROOTS for path in sorted((REPOSITORY / root).rglob("*")))
    assert len(files) > 100  # the archives are there to check
    found = []
    for path in files:
        for number, line in enumerate(read_text(path).splitlines(), 1):
            if absolute_paths(line):
                found.append(f"{path.relative_to(REPOSITORY)}:{number}: {line.strip()[:120]}")
    assert found == [], "absolute paths in archives:\n" + "\n".join(found[:20])


def test_a_benchmark_report_is_written_without_absolute_paths(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("bench_machine", REPOSITORY / "benchmarks" / "machine.py")
    assert spec is not None and spec.loader is not None
    machine = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(machine)
    out = tmp_path / "result.json"
    machine.write_report(out, {"config": "/home/u/fedaug/configs/default.yaml", "data": "/srv/x/data/mnist"})
    assert json.loads(out.read_text()) == {"config": "configs/default.yaml", "data": "<data_dir>/mnist"}
