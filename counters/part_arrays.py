"""The Zarr arrays of one store part, opened one at a time.

Why not through the part's group: zarr lists a group's members concurrently, one asyncio task per
member on its own event-loop thread, and when one task fails it abandons the rest. The abandoned
tasks' exceptions are then logged when the tasks are garbage-collected, as ``Task exception was
never retrieved`` with a traceback: outside the reader's error handling, on the command line's
standard error after its one-line error, and -- on CPython 3.11 before 3.11.8, whose AST
constructor shares its recursion counter -- concurrently with whatever the main thread compiles,
which then fails with ``SystemError: AST constructor recursion depth mismatch``. Opening each
array in turn raises the first damage as one exception, and leaves no task behind.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from counters.storedir import ZARR_FORMAT, one_line

#: The attribute, of a part and of each of its arrays, saying every chunk was written, all-NaN
#: ones too (Zarr leaves those out by default): a chunk file missing from such an array is
#: damage. Zarr itself reads a missing chunk as its fill value (NaN) without an error. Each array
#: carries it as well as the part, so losing the part's attributes does not turn the check off.
#: Parts of earlier versions lack it, and their chunks are not checked.
EVERY_CHUNK_ATTR = "bayes_sched_every_chunk_written"


class PartArrayError(ValueError):
    """An array of a part that zarr cannot open; the message names the array's directory."""


def open_part_array(path: str | Path, mode: Literal["r", "r+"] = "r", read: bool = False,
                    every_chunk: bool = False) -> Any:
    """The ``zarr.Array`` at ``path`` (an array directory of a part), zarr's warnings silenced.

    ``read``: also read it whole, every chunk (damaged chunks are found only so);
    ``every_chunk``: the part was written with every chunk (:data:`EVERY_CHUNK_ATTR`, which the
    array's own attributes may say as well), so a chunk file missing is damage. Raises
    :class:`PartArrayError`, its message naming the array's directory, whatever zarr, json or
    numcodecs raised for damaged metadata (or, with ``read``, chunks), and for a missing
    chunk."""
    import zarr

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            array: Any = zarr.open_array(str(path), mode=mode, zarr_format=ZARR_FORMAT)
            every_chunk = every_chunk or array.attrs.get(EVERY_CHUNK_ATTR) is True
            missing = missing_chunks(Path(path), array) if every_chunk else []
            if read and not missing:
                array[...]
    except Exception as error:  # zarr, json and numcodecs raise many types for damage
        raise PartArrayError(f"{Path(path).name}: {one_line(error)}") from None
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3
                                          else "")
        raise PartArrayError(f"{Path(path).name}: chunk file(s) {shown} missing")
    return array


def missing_chunks(path: Path, array: Any) -> list[str]:
    """The chunk keys of the Zarr (format 2) ``array`` at ``path`` that have no file."""
    separator = getattr(array.metadata, "dimension_separator", ".") or "."
    grid = [math.ceil(size / chunk) for size, chunk in zip(array.shape, array.chunks,
                                                             strict=True)]
    keys = [separator.join(map(str, index)) for index in np.ndindex(*grid)] if grid else ["0"]
    if separator == ".":
        present = set(os.listdir(path))
        return [key for key in keys if key not in present]
    return [key for key in keys if not (path / key).is_file()]


def every_chunk_written(part: Path) -> bool:
    """Whether ``part``'s attributes say every chunk was written (:data:`EVERY_CHUNK_ATTR`);
    False when they cannot be read (the part's opening reports that)."""
    try:
        attrs = json.loads((part / ".zattrs").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(attrs, dict) and attrs.get(EVERY_CHUNK_ATTR) is True


def open_part_arrays(part: Path, mode: Literal["r", "r+"] = "r") -> dict[str, Any]:
    """Each array of ``part`` (name -> ``zarr.Array``), opened in name order
    (:func:`open_part_array`; its chunk files checked where :func:`every_chunk_written`).

    Only directories holding a ``.zarray`` count as arrays, as zarr's own listing has it (it
    skips the rest with a warning). Raises :class:`PartArrayError` for the first array whose
    metadata cannot be read or that misses a chunk, and ``OSError`` if the part cannot be
    listed. Reads metadata and listings only, never chunks."""
    arrays: dict[str, Any] = {}
    every_chunk = every_chunk_written(part)
    for entry in sorted(os.scandir(part), key=lambda e: e.name):
        if not entry.is_dir() or not os.path.isfile(os.path.join(entry.path, ".zarray")):
            continue
        arrays[entry.name] = open_part_array(entry.path, mode, every_chunk=every_chunk)
    return arrays
