"""The one-line errors :func:`fedaug.cli.main.run_parsed` prints for failures a user's input or machine
causes outside fedaug's own errors: file-system errors naming the path, the allocator failing, a GPU out of
memory."""

from __future__ import annotations

import errno

from fedaug.errors import out_of_memory_sentence, shorten

FILE_SYSTEM_ERRORS = (
    PermissionError,
    NotADirectoryError,
    IsADirectoryError,
    FileExistsError,
    FileNotFoundError,
)
"""OSErrors that ``main`` turns into one line naming the path (exit 2) wherever they come from."""


def file_system_error_line(exc: OSError) -> str:
    """``cannot use PATH: Permission denied`` (both paths of a rename or copy)."""
    paths = " -> ".join(str(p) for p in (exc.filename, exc.filename2) if p is not None) or "a file"
    return f"cannot use {paths}: {exc.strerror or type(exc).__name__}"


STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.ENAMETOOLONG, errno.EROFS, errno.ELOOP)
"""Further OSErrors that ``main`` turns into one line naming the path (exit 2)."""

MAX_ERROR_CHARS = 2000
"""An error line is cut to this length (the values it echoes are cut already; this is the last guard)."""

ALLOCATION_HINT = (
    "this machine cannot allocate the memory this config needs: lower the sizes (train.batch_size, "
    "engine.eval_batch_size, the model's width or hidden sizes, partition.num_clients)"
)


def allocation_line(exc: Exception) -> str | None:
    """One line for torch's CPU allocator failing (None for any other error)."""
    text = " ".join(str(exc).split())
    at = text.find("can't allocate memory")
    return None if at < 0 else f"{shorten(text[at:], 160)}; {ALLOCATION_HINT}"


OUT_OF_MEMORY_HINT = (
    "The GPU ran out of memory: run fewer runs on it at once (fedaug sweep --workers), or lower "
    "engine.eval_batch_size or train.batch_size; the same command resumes from the last finished round"
)


def out_of_memory_line(exc: Exception) -> str | None:
    """One line for an error that is the device running out of memory (None for any other): what PyTorch
    said first, then what to do (its message goes on with every process's memory, a paragraph)."""
    sentence = out_of_memory_sentence(str(exc))
    return None if sentence is None else f"{sentence} {OUT_OF_MEMORY_HINT}"
