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

import os
import warnings
from pathlib import Path
from typing import Any, Literal

from counters.storedir import ZARR_FORMAT, one_line


class PartArrayError(ValueError):
    """An array of a part that zarr cannot open; the message names the array's directory."""


def open_part_array(path: str | Path, mode: Literal["r", "r+"] = "r", read: bool = False) -> Any:
    """The ``zarr.Array`` at ``path`` (an array directory of a part), zarr's warnings silenced.

    ``read``: also read it whole, every chunk (damaged chunks are found only so). Raises
    :class:`PartArrayError`, its message naming the array's directory, whatever zarr, json or
    numcodecs raised for damaged metadata (or, with ``read``, chunks)."""
    import zarr

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            array: Any = zarr.open_array(str(path), mode=mode, zarr_format=ZARR_FORMAT)
            if read:
                array[...]
    except Exception as error:  # zarr, json and numcodecs raise many types for damage
        raise PartArrayError(f"{Path(path).name}: {one_line(error)}") from None
    return array


def open_part_arrays(part: Path, mode: Literal["r", "r+"] = "r") -> dict[str, Any]:
    """Each array of ``part`` (name -> ``zarr.Array``), opened in name order
    (:func:`open_part_array`).

    Only directories holding a ``.zarray`` count as arrays, as zarr's own listing has it (it
    skips the rest with a warning). Raises :class:`PartArrayError` for the first array whose
    metadata cannot be read, and ``OSError`` if the part cannot be listed. Reads metadata only,
    never chunks."""
    arrays: dict[str, Any] = {}
    for entry in sorted(os.scandir(part), key=lambda e: e.name):
        if not entry.is_dir() or not os.path.isfile(os.path.join(entry.path, ".zarray")):
            continue
        arrays[entry.name] = open_part_array(entry.path, mode)
    return arrays
