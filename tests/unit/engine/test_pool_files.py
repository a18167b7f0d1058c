"""Pool files (fedaug.engine.pool_files): a method's large server-state tensors written once per run, the
checkpoints referring to them; cached digests equal fresh ones; resumes stay byte-identical; a damaged,
foreign or missing pool file is refused in one line; format-2 checkpoints (the pool inline) still resume."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedaug.api import Method
from fedaug.cli.main import main
from fedaug.engine import pool_files
from fedaug.engine.checkpoint import DIGEST_KEY, INLINE_POOL_FORMAT, RunStore, content_digest
from fedaug.engine.pool_files import REFERENCE_KEY, DigestCache, references
from fedaug.engine.simulation import Simulation
from fedaug.errors import CheckpointError
from fedaug.methods.ccvr.method import CCVR, CCVRConfig
from fedaug.methods.centralized import Centralized
from fedaug.methods.fedbr import FedBR, FedBRConfig
from fedaug.methods.feddata import FedData
from fedaug.methods.fedmix import FedMix
from fedaug.methods.flea.method import FLea
from tests.conftest import make_spec
from tests.helpers import killed_in_round, run_files
from tests.unit import run_dirs

POOL_METHODS: dict[str, Callable[[], Method]] = {
    "centralized": Centralized,
    "feddata": FedData,
    "fedmix": FedMix,
    "fedbr": lambda: FedBR(FedBRConfig(num_pseudo=5, average_size=5)),  # a pool from 20 samples a client
}
"""Methods whose pool never changes after the share phase: one pool file per pool tensor, written once."""

OTHER_METHODS: dict[str, Callable[[], Method]] = {
    "flea": FLea,  # its buffer is rebuilt every round
    "ccvr": lambda: CCVR(CCVRConfig(calibrate_every_round=True, virtual_per_class=20, calibration_epochs=1)),
}

SPEC: dict[str, Any] = {"rounds": 4, "per_round": 2}


@pytest.fixture(autouse=True)
def small_pools(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every non-empty tensor of ``state.extra`` goes to a pool file (the tests' pools are a few KB)."""
    monkeypatch.setattr(pool_files, "POOL_MIN_BYTES", 1)
    yield


def run(run_dir: Path, method: Method) -> None:
    Simulation(make_spec(run_dir, method=method, **SPEC)).run()


def saved(run_dir: Path) -> dict[str, Any]:
    """``latest.pt`` as it is on disk (references, not tensors)."""
    ckpt: dict[str, Any] = torch.load(run_dir / "ckpt" / "latest.pt", weights_only=True)
    return ckpt


def pool_names(run_dir: Path) -> set[str]:
    return {p.stem for p in (run_dir / "ckpt" / pool_files.POOL_DIR).glob("*.pt")}


def cut_and_resumed(tmp_path: Path, method_fn: Callable[[], Method], name: str) -> tuple[Path, Path]:
    """The full run and one killed in round 3 (after one client), then resumed: (full, cut) run dirs."""
    full, cut = tmp_path / "full", tmp_path / "cut"
    run(full, method_fn())
    method = method_fn()
    killed = killed_in_round(type(method), method.config, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run(cut, killed)
    assert saved(cut)["round_num"] == 2, name
    run(cut, method_fn())
    return full, cut


# --- the digest cache ---

EDITS: list[Callable[[torch.Tensor], Any]] = [
    lambda t: t.add_(1.0),
    lambda t: t.mul_(1.0),  # the same values: a new version all the same
    lambda t: t.view(-1)[0].fill_(7.0),  # through a view
    lambda t: t[: max(1, t.shape[0] // 2)].neg_(),
    lambda t: t.detach().zero_(),  # detach() shares the version counter
    lambda t: t.copy_(torch.arange(t.numel(), dtype=t.dtype).reshape(t.shape)),
    lambda t: t.transpose(0, 1).contiguous(),  # out of place: no change
    lambda t: t.resize_(max(1, t.shape[0] - 1), t.shape[1]),  # a new shape, the same storage
    lambda t: t.set_(torch.ones(2, 3)),  # another storage
    lambda t: None,
]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 5),
    edits=st.lists(st.tuples(st.integers(0, len(EDITS) - 1), st.booleans()), max_size=12),
)
def test_a_cached_digest_equals_a_fresh_one_after_any_in_place_edits(
    rows: int, edits: list[tuple[int, bool]]
) -> None:
    # Prepare
    tensor = torch.randn(rows, 3)
    cache, seen = DigestCache(), DigestCache()
    assert cache.digest(tensor) == content_digest(tensor)
    assert not seen.unchanged(tensor)
    before = tensor.clone()
    for edit, under_no_grad in edits:
        # Execute
        if under_no_grad:
            with torch.no_grad():
                EDITS[edit](tensor)
        else:
            EDITS[edit](tensor)
        # Assert: the cached digest is the fresh one; "unchanged" means the same content
        assert cache.digest(tensor) == content_digest(tensor)
        if seen.unchanged(tensor):
            assert tensor.shape == before.shape and torch.equal(tensor, before)
        before = tensor.clone()


def test_an_unchanged_tensor_is_hashed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    hashed = pool_files.content_digest
    monkeypatch.setattr(pool_files, "content_digest", lambda t: calls.append(1) or hashed(t))
    tensor, cache = torch.randn(4, 3), DigestCache()
    digests = {cache.digest(tensor) for _ in range(5)}
    assert len(digests) == 1 and len(calls) == 1
    tensor.add_(1)
    assert cache.digest(tensor) != digests.pop() and len(calls) == 2


def test_an_inference_tensor_is_never_cached() -> None:
    with torch.inference_mode():
        tensor = torch.randn(4, 3)
        cache = DigestCache()
        first = cache.digest(tensor)
        tensor.add_(1)  # no version counter records this
        assert cache.digest(tensor) != first and cache.digest(tensor) == content_digest(tensor)


# --- runs ---


@pytest.mark.parametrize("name", [*POOL_METHODS, *OTHER_METHODS])
def test_a_resumed_run_is_byte_identical(tmp_path: Path, name: str) -> None:
    methods = {**POOL_METHODS, **OTHER_METHODS}
    full, cut = cut_and_resumed(tmp_path, methods[name], name)
    assert run_files(cut) == run_files(full)
    assert references(saved(cut)) == references(saved(full)) == pool_names(full) == pool_names(cut)


@pytest.mark.parametrize("name", list(POOL_METHODS))
def test_an_unchanged_pool_is_written_once_and_referred_to(tmp_path: Path, name: str) -> None:
    # Prepare: count the pool files written
    written: list[Path] = []
    write = pool_files.atomic_write

    def counted(path: Path, fill: Any) -> None:
        written.append(path)
        write(path, fill)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool_files, "atomic_write", counted)
        # Execute
        run(tmp_path, POOL_METHODS[name]())
    # Assert: the pool (pool_x, pool_y) written in round 1 only, the checkpoint's extra refers to it
    extra = saved(tmp_path)["state"]["extra"]
    assert extra["pool_x"].keys() == extra["pool_y"].keys() == {REFERENCE_KEY}
    assert {p.stem for p in written} == pool_names(tmp_path) == references(saved(tmp_path))
    assert len(written) == len(pool_names(tmp_path)) >= 2
    pool = RunStore(tmp_path).load_checkpoint()
    assert pool is not None and isinstance(pool["state"]["extra"]["pool_x"], torch.Tensor)


def test_a_buffer_rebuilt_every_round_stays_in_the_checkpoint(tmp_path: Path) -> None:
    run(tmp_path, FLea())
    extra = saved(tmp_path)["state"]["extra"]
    assert isinstance(extra["buffer_x"], torch.Tensor) and extra["buffer_x"].numel() > 0
    assert pool_names(tmp_path) == set()


def test_pool_files_no_checkpoint_refers_to_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: pool a in rounds 1-3 (kept after round 2), pool b from round 4 on
    store = RunStore(tmp_path)
    store.prepare()
    pool_a, pool_b = torch.randn(5, 3), torch.randn(6, 3)

    def save(round_num: int, pool: torch.Tensor) -> set[str]:
        store.save_checkpoint({"state": {"extra": {"pool_x": pool}}, "round_num": round_num})
        return references(saved(tmp_path))

    # Execute / Assert: a is referred to from its second save on, b likewise; a stays while round 2 is kept
    assert save(1, pool_a) == set()
    in_a = save(2, pool_a)
    store.keep_checkpoint(2)
    assert len(in_a) == 1 and save(3, pool_a) == in_a == pool_names(tmp_path)
    assert save(4, pool_b) == set() and pool_names(tmp_path) == in_a
    in_b = save(5, pool_b)
    assert in_b != in_a and pool_names(tmp_path) == in_a | in_b  # round_0002.pt refers to a
    (tmp_path / "ckpt" / "round_0002.pt").unlink()
    pool_c = torch.randn(2, 3)
    save(6, pool_c)
    assert save(7, pool_c) != in_b and pool_names(tmp_path) == references(saved(tmp_path))
    # a process killed between a pool file and its checkpoint leaves a stray file: the next one removes it
    stray = tmp_path / "ckpt" / pool_files.POOL_DIR / f"{'0' * 64}.pt"
    torch.save(torch.zeros(1), stray)
    resumed = RunStore(tmp_path)
    ckpt = resumed.load_checkpoint()
    assert ckpt is not None and torch.equal(ckpt["state"]["extra"]["pool_x"], pool_c)
    monkeypatch.setattr(pool_files, "content_digest", lambda _: pytest.fail("the pool was hashed again"))
    resumed.save_checkpoint({**ckpt, "round_num": 8})  # the pool read back is not hashed again
    assert not stray.exists() and references(saved(tmp_path)) == pool_names(tmp_path)


# --- damaged pool files and old checkpoints ---


def one_pool_file(run_dir: Path) -> Path:
    return max((run_dir / "ckpt" / pool_files.POOL_DIR).glob("*.pt"), key=lambda p: p.stat().st_size)


def damage_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    path.write_bytes(bytes(data))


def foreign(path: Path) -> None:
    torch.save(torch.zeros_like(torch.load(path, weights_only=True)), path)


def not_a_tensor(path: Path) -> None:
    torch.save({"x": 1}, path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (damage_bytes, "is corrupt or not a fedaug pool file ("),
        (foreign, "(its content does not match the SHA-256 digest it is named by)"),
        (not_a_tensor, "(it holds a dict, not a tensor)"),
        (Path.unlink, "refers to the pool file"),
    ],
    ids=["damaged", "foreign", "not-a-tensor", "missing"],
)
def test_a_bad_pool_file_is_refused_in_one_line(
    tmp_path: Path, change: Callable[[Path], Any], expected: str
) -> None:
    run(tmp_path / "run", FedMix())
    path = one_pool_file(tmp_path / "run")
    change(path)
    with pytest.raises(CheckpointError) as error:
        Simulation(make_spec(tmp_path / "run", method=FedMix(), **{**SPEC, "rounds": 5})).run()
    message = str(error.value)
    assert expected in message and "\n" not in message, message
    assert path.name in message and "--fresh" in message


def test_a_format_2_checkpoint_with_its_pool_inside_still_resumes_identically(tmp_path: Path) -> None:
    # Prepare: the cut run's checkpoint rewritten as fedaug wrote it before pool files
    full, cut = tmp_path / "full", tmp_path / "cut"
    run(full, FedMix())
    killed = killed_in_round(FedMix, kill_round=3, calls_before_kill=1)
    with pytest.raises(KeyboardInterrupt):
        run(cut, killed)
    ckpt = RunStore(cut).load_checkpoint()
    assert ckpt is not None
    content = {**ckpt, "format": INLINE_POOL_FORMAT}
    content[DIGEST_KEY] = content_digest(content)
    torch.save(content, cut / "ckpt" / "latest.pt")
    for path in (cut / "ckpt" / pool_files.POOL_DIR).glob("*.pt"):
        path.unlink()
    # Execute
    run(cut, FedMix())
    # Assert: the same run; its checkpoints are format 3 from the first new round on
    assert run_files(cut) == run_files(full)
    assert saved(cut)["format"] == 3 and pool_names(cut) == pool_names(full)


def test_fedaug_run_refuses_a_damaged_pool_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Prepare: a FedMix smoke run cut back to round 2 (its pool in a pool file since round 2's checkpoint)
    argv = run_dirs.argv(tmp_path, "--set", "method=fedmix")
    assert main(argv) == 0
    run_dir = next((tmp_path / "smoke").glob("*/fedmix/seed0"))
    shutil.copyfile(run_dir / "ckpt" / "round_0002.pt", run_dir / "ckpt" / "latest.pt")
    for name in ("metrics.jsonl", "timings.jsonl"):
        lines = (run_dir / name).read_text().splitlines(keepends=True)
        (run_dir / name).write_text("".join(lines[:2]))
    (run_dir / "summary.json").unlink()
    damage_bytes(one_pool_file(run_dir))
    capsys.readouterr()
    # Execute
    code = main(argv)
    # Assert: exit 2, one line naming the pool file
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "is corrupt or not a fedaug pool file" in err[0] and one_pool_file(run_dir).name in err[0]
