"""Reading the CIFAR python releases (CIFAR-10, CIFAR-100): pickles md5-checked before they are unpickled.

Both releases are a ``tar.gz`` holding one folder of pickled dicts (``b"data"``: uint8 ``[N, 3072]``,
channel-major RGB, plus label lists). The loaders read the folder if it is unpacked under
``<data_dir>/<dataset>/`` and otherwise the archive itself, which they md5-check first (and download when
asked); every member is md5-checked against the published value before ``pickle.loads`` sees it, so only
the genuine files are ever unpickled. ``verify=False`` skips only the archive's check (cached per file
version, :mod:`fedaug.data.checksums`): the members' check cannot be skipped, since unpickling a modified
file could run code.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import tarfile
import zlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedaug.data.base import LoadContext
from fedaug.data.checksums import Official, verify_files
from fedaug.data.download import RemoteFile, download_file
from fedaug.errors import DatasetError

logger = logging.getLogger(__name__)

Members = dict[str, tuple[bytes, str]]  # member name -> (bytes, where it came from, for messages)


def unpickle_verified(data: bytes, expected_md5: str, what: str) -> Any:
    """Unpickles ``data`` after checking its md5 (``what`` names the file in the error)."""
    actual = hashlib.md5(data, usedforsecurity=False).hexdigest()
    if actual != expected_md5:
        raise DatasetError(
            f"checksum mismatch for {what}: expected md5 {expected_md5}, got {actual}; the file is corrupt "
            "or not the official one: delete it and re-download with --set data.download=true (pickles are "
            "always checked, even with data.verify=false, since unpickling a modified file could run code)"
        )
    return pickle.loads(data, encoding="bytes")  # safe: md5 verified against the official file above


def read_members(
    ctx: LoadContext,
    root: Path,
    folder_name: str,
    archive_file: RemoteFile,
    md5s: Mapping[str, str],
    title: str,
    *,
    verify: bool = True,
) -> tuple[Members, str] | None:
    """Bytes of every member named in ``md5s``, from ``root/folder_name/`` or the archive; None if absent.

    Args:
        ctx: the load context (``download`` allows fetching the archive).
        root: ``<data_dir>/<dataset>``.
        folder_name: the unpacked folder's name (``cifar-10-batches-py``, ``cifar-100-python``).
        archive_file: the official archive and its md5.
        md5s: member name -> published md5 (only the names are used here).
        title: the dataset's name in messages.
        verify: check an existing archive against its official md5 (cached per file version).

    Returns:
        The members and a description of where they came from.
    """
    folder = root / folder_name
    if all((folder / name).exists() for name in md5s):
        return {name: ((folder / name).read_bytes(), str(folder / name)) for name in md5s}, f"{folder}"
    archive = root / archive_file.filename
    if not archive.exists() and not ctx.download:
        return None
    if archive.exists():
        if verify:
            official = Official(
                archive_file.filename, archive_file.checksum, algorithm=archive_file.algorithm
            )
            verify_files([(archive, official)], dataset=title)
        else:
            logger.info(
                "%s: archive %s not verified (data.verify=false); its pickles are still md5-checked",
                title,
                archive,
            )
    else:
        archive = download_file(archive_file, root)
    return _read_archive(archive, md5s, title), f"official archive {archive}"


def load_pickles(
    ctx: LoadContext,
    *,
    dataset_dir: str,
    folder_name: str,
    archive_file: RemoteFile,
    md5s: Mapping[str, str],
    title: str,
    kind: str,
    verify: bool = True,
    missing_hint: Callable[[], str] | None = None,
) -> tuple[dict[str, Any], str]:
    """Every file named in ``md5s``, md5-checked and unpickled, and a description of where they came from.

    Args:
        ctx: the load context.
        dataset_dir: the dataset's folder in the data dir (``cifar10``, ``cifar100``).
        folder_name: the unpacked folder's name in it (see :func:`read_members`).
        archive_file: the official archive and its md5.
        md5s: file name -> published md5, checked before the file is unpickled.
        title: the dataset's name in messages.
        kind: what one file is called in a checksum error (``"batch"``: "CIFAR-10 batch <where>").
        verify: check an existing archive against its official md5 (cached per file version).
        missing_hint: gives the hint of the error raised when neither the folder nor the archive is there.

    Raises:
        DatasetError: the files are absent, the archive is unreadable or a file is not the official one.
    """
    root = ctx.data_dir / dataset_dir
    found = read_members(ctx, root, folder_name, archive_file, md5s, title, verify=verify)
    if found is None:
        hint = missing_hint() if missing_hint is not None else ""
        raise ctx.missing([f"{folder_name}/{{{', '.join(md5s)}}}", archive_file.filename], [root], hint=hint)
    files, origin = found
    contents = {
        name: unpickle_verified(data, md5s[name], f"{title} {kind} {shown}")
        for name, (data, shown) in files.items()
    }
    return contents, origin


def _read_archive(archive: Path, md5s: Mapping[str, str], title: str) -> Members:
    found: Members = {}
    try:
        with tarfile.open(archive, "r:gz") as tf:
            for member in tf:
                name = member.name.rsplit("/", 1)[-1]
                handle = tf.extractfile(member) if member.isfile() and name in md5s else None
                if handle is not None:
                    found[name] = (handle.read(), f"{archive}:{member.name}")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise DatasetError(f"cannot read {title} archive {archive}: {exc}") from exc
    missing = sorted(set(md5s) - set(found))
    if missing:
        raise DatasetError(f"{title} archive {archive} lacks {', '.join(missing)}")
    return found


def images_of(content: Mapping[bytes, Any]) -> np.ndarray:
    """The ``b"data"`` rows of an unpickled CIFAR dict as uint8 ``[N, 3, 32, 32]``."""
    return np.asarray(content[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)


def to_float(
    images: np.ndarray, mean: tuple[float, float, float], std: tuple[float, float, float], normalize: bool
) -> torch.Tensor:
    """uint8 ``[N, 3, 32, 32]`` -> float32 in [0, 1], standardised per channel when ``normalize``."""
    x = torch.from_numpy(images).float().div_(255.0)
    if normalize:
        x = (x - torch.tensor(mean).view(1, 3, 1, 1)) / torch.tensor(std).view(1, 3, 1, 1)
    return x
