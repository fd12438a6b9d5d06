"""Repair of a counters store (:mod:`counters.store`): back to a consistent state that
:func:`~counters.store.open_store` reads, each thing dropped or changed said in one line.

What a crash leaves (hidden temporaries, parts a compaction merged, committed journal segments,
a torn journal tail) is cleared; outside damage costs only what it hit: a part's unreadable or
missing value arrays are dropped and its other variables kept, a journal segment's damaged
records are cut out and the records after them kept, and a part or segment that cannot be read
or whose times do not follow the ones before is dropped. A segment that a running collector still
writes is left as it is (changing it would lose its later records). Repair holds the store's
commit lock (:func:`~counters.storedir.commit_lock`), so it waits for a commit in progress and no
writer commits beside it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from counters import schema
from counters.errors import CountersError
from counters.journal import _sync_directory as sync_directory
from counters.journal import being_written, read_journal, rewrite_whole_records
from counters.part_arrays import PartArrayError, every_chunk_written, open_part_array
from counters.store import (
    PART_VARIABLES_ATTR,
    combine_datasets,
    journal_rows_after,
    open_part,
    open_store,
    trim_cut_short,
)
from counters.storedir import MARKER, REPAIR_HINT, PartName, commit_lock
from counters.storedir import check_marker as _check_marker
from counters.storedir import covered as _covered
from counters.storedir import discard as _discard
from counters.storedir import leftovers as _leftovers
from counters.storedir import lost_everything as _lost_everything
from counters.storedir import one_line as _one_line
from counters.storedir import scan as _scan
from counters.storedir import write_marker as _write_marker


def missing_variables(part: str | Path) -> list[str]:
    """The value variables a part lists (:data:`PART_VARIABLES_ATTR`) that it no longer holds."""
    try:
        attrs = json.loads((Path(part) / ".zattrs").read_text())
        listed = attrs.get(PART_VARIABLES_ATTR, [])
        return [str(n) for n in (listed if isinstance(listed, list) else [])
                if not (Path(part) / str(n) / ".zarray").is_file()]
    except (OSError, ValueError, TypeError, AttributeError):
        return []


def _forget_variables(part: Path, names: Sequence[str]) -> None:
    """Drop ``names`` from a part's variable list (atomically rewriting its ``.zattrs``)."""
    attrs_path = part / ".zattrs"
    try:
        attrs = json.loads(attrs_path.read_text())
        listed = attrs.get(PART_VARIABLES_ATTR, [])
    except (OSError, ValueError, AttributeError):  # attributes missing or damaged: the part
        return  # fails to open anyway, and is dropped whole
    if not isinstance(listed, list):
        return
    attrs[PART_VARIABLES_ATTR] = [n for n in listed if n not in names]
    temporary = part / ".zattrs.partial"
    temporary.write_text(json.dumps(attrs, indent=2))
    os.replace(temporary, attrs_path)
    sync_directory(part)


def _times_after(ds: xr.Dataset, last: np.datetime64 | None) -> str | None:
    """Why ``ds``'s times do not follow ``last`` strictly increasing, or None when they do."""
    times = ds[schema.TIME].values
    if times.size and last is not None and times[0] <= last:
        return f"its samples from {times[0]} are not after the previous ones ({last})"
    return None


def repair(path: str | Path) -> list[str]:
    """Bring a damaged store back to a consistent state that :func:`open_store` reads.

    Removes what a crash left (hidden temporary/trash directories, parts a compaction merged,
    journal segments already committed), trims cut-short appends of the older in-place design,
    cuts a journal segment's torn tail and rewrites one with damage between whole records
    without it (a segment a running collector still appends to is left as it is, and said
    so), and drops parts or segments that cannot be read or whose
    times do not follow the ones before; a missing or unreadable marker is rewritten when the
    directory holds parts or journals. If the remaining parts still do not fit together, the
    newest are dropped until they do (the last consistent point). Returns one line per thing
    dropped or changed (empty: nothing was wrong). Raises :class:`CountersError` for a path that
    is not a store at all.
    """
    root = Path(path)
    if not root.is_dir():
        raise CountersError(f"{root}: no such counters store")
    with commit_lock(root):  # waits for a collector's commit in progress
        return _repair(root)


def _repair(root: Path) -> list[str]:
    changed: list[str] = []
    try:
        _check_marker(root)
    except CountersError as error:
        committed, superseded, journals = _scan(root)
        if not (committed or superseded or journals) or _future_marker(root):
            raise
        try:
            _write_marker(root, committed=bool(committed or superseded))
        except OSError as write_error:
            raise CountersError(f"{root}: cannot rewrite the marker ({_one_line(write_error)})"
                                ) from None
        reason = str(error).split(f"{root / MARKER}: ", 1)[-1].split(f"; {REPAIR_HINT}")[0]
        changed.append(f"{root / MARKER}: rewritten ({' '.join(reason.split())[:160]})")
    try:
        for leftover in _leftovers(root):
            _discard(leftover)
            changed.append(f"{leftover}: removed (a commit or deletion cut short)")
        committed, superseded, journals = _scan(root)
        for part in superseded:
            _discard(part.path)
            changed.append(f"{part.path}: removed (its samples are in a merged part)")
        kept: list[PartName] = []
        kept_data: list[xr.Dataset] = []  # what open_store would read, to check it once at the end
        last: np.datetime64 | None = None
        for part in committed:
            lost = missing_variables(part.path)
            if lost:  # keep the part's other variables: only the lost arrays' samples are gone
                _forget_variables(part.path, lost)
                changed.append(f"{part.path}: variable(s) {', '.join(lost)} missing (their "
                               "samples are lost); the part's other variables kept")
            ds, problem = _checked_part(part.path, last, changed)
            damaged = _damaged_variables(part.path) if ds is None else []
            if damaged:  # salvage the part's other variables: drop only the unreadable arrays
                for name in damaged:
                    _discard(part.path / name)
                _forget_variables(part.path, damaged)
                changed.append(f"{part.path}: variable(s) {', '.join(damaged)} unreadable, "
                               f"dropped ({problem}); the part's other variables kept")
                ds, problem = _checked_part(part.path, last, changed)
            if problem is not None or ds is None:
                _discard(part.path)
                changed.append(f"{part.path}: dropped ({problem})")
                continue
            kept.append(part)
            kept_data.append(ds)
            last = ds[schema.TIME].values[-1] if ds.sizes[schema.TIME] else last
        for index in sorted(journals):
            journal = journals[index]
            if _covered(index, kept):
                journal.unlink()
                changed.append(f"{journal}: removed (already committed)")
                continue
            contents = read_journal(journal)
            rows = journal_rows_after(contents.rows, last)  # as readers and commits read it
            recent, problem = None, "no whole sample"
            if len(contents.rows) and not len(rows):
                problem = (f"every sample at or before the last one before it ({last}): the "
                           "wall clock had stepped back")
            try:
                if contents.layout is not None and len(rows):
                    recent = contents.layout.to_dataset(rows)
                    problem = next(iter(schema.problems(recent, check_values=False)), None)
            except Exception as error:  # a header the schema cannot build a dataset from
                problem = _one_line(error)
            mend = problem is not None or bool(contents.skipped) or contents.tail_bytes > 0
            if mend and being_written(journal):  # a change would lose its later records
                changed.append(f"{journal}: left as it is, a running collector writes it "
                               f"({problem or 'damaged records'}); stop it, then repair")
                if problem is None and recent is not None:
                    kept_data.append(recent)
                    last = recent[schema.TIME].values[-1]
                continue
            if problem is not None:
                size = journal.stat().st_size
                journal.unlink()
                changed.append(f"{journal}: dropped ({len(contents.rows)} sample(s), {size} "
                               f"byte(s): {problem})")
                continue
            assert recent is not None
            if contents.skipped:  # damage between whole records: keep the records after it
                rewrite_whole_records(journal, contents, journal.with_name(f".{journal.name}"))
                tail = (f", and {contents.tail_bytes} byte(s) of a torn or damaged record after "
                        "them" if contents.tail_bytes else "")
                changed.append(f"{journal}: dropped {contents.skipped_bytes} byte(s) of damaged "
                               f"record(s) in {len(contents.skipped)} place(s) between its "
                               f"{len(contents.rows)} whole sample(s){tail}; the samples kept")
            elif contents.tail_bytes:
                os.truncate(journal, contents.valid_bytes)
                changed.append(f"{journal}: dropped {contents.tail_bytes} byte(s) of a torn or "
                               f"damaged record after {len(contents.rows)} whole sample(s)")
            kept_data.append(recent)
            last = recent[schema.TIME].values[-1]
        try:  # the usual case: what is left fits together, no need to read it all again
            combine_datasets(root, kept_data)
        except CountersError:
            changed.extend(_drop_until_consistent(root))
        if _lost_everything(root, _check_marker(root)):
            _write_marker(root)
            changed.append(f"{root / MARKER}: no part or journal is left: its record of "
                           "committed samples reset (the store is empty; appending is allowed)")
    except OSError as error:
        raise CountersError(f"{root}: cannot repair ({_one_line(error)})") from None
    return changed


def _checked_part(part: Path, last: np.datetime64 | None, changed: list[str]
                  ) -> tuple[xr.Dataset | None, str | None]:
    """``(dataset, None)`` for a part that reads whole and follows ``last``, else ``(dataset or
    None, why not)``; trims an append cut short first (noted in ``changed``)."""
    try:
        trimmed = trim_cut_short(part)
        if trimmed:
            changed.append(f"{part}: dropped the last {trimmed} sample(s) of an append cut short")
        ds = open_part(part, lazy=False)
    except CountersError as error:
        return None, str(error).split(f"{part}: ", 1)[-1].split(f"; {REPAIR_HINT}")[0]
    return ds, (next(iter(schema.problems(ds, check_values=False)), None)
                or _times_after(ds, last))


def _damaged_variables(part: Path) -> list[str]:
    """The value arrays of a part that cannot be read whole (metadata or chunks damaged, or a
    chunk file missing from a part written with every chunk); empty
    when a coordinate (``time``, ``node``, ``device``...) is among the damaged, since without it
    nothing in the part can be placed."""
    damaged: list[str] = []
    coordinates = {schema.TIME, schema.NODE, schema.DEVICE, *schema.DEVICE_COORDS}
    try:
        entries = sorted(e.name for e in os.scandir(part) if e.is_dir())
    except OSError:
        return []
    every_chunk = every_chunk_written(part)
    # Every directory, not only those holding a ``.zarray`` (as open_part_arrays has it): one
    # whose metadata is gone is a damaged array too.
    for name in entries:
        try:
            open_part_array(part / name, read=True, every_chunk=every_chunk)
        except PartArrayError:
            if name in coordinates:
                return []
            damaged.append(name)
    return damaged


def _future_marker(root: Path) -> bool:
    """Whether the marker is readable and names a later schema version than this code's (an
    integer above it): such a store is refused, never rewritten. A version missing, not an
    integer or below this code's is damage, which repair rewrites."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("schema") != schema.SCHEMA_NAME:
        return False
    version = marker.get("schema_version")
    return (isinstance(version, int) and not isinstance(version, bool)
            and version > schema.SCHEMA_VERSION)


def _drop_until_consistent(root: Path) -> list[str]:
    """Drop the newest part or journal segment until the store opens (or holds nothing)."""
    changed: list[str] = []
    while True:
        try:
            open_store(root)
            return changed
        except CountersError as error:
            committed, _, journals = _scan(root)
            pending = [journals[i] for i in sorted(journals) if not _covered(i, committed)]
            newest = pending[-1] if pending else committed[-1].path if committed else None
            if newest is None:
                return changed
            _discard(newest)
            changed.append(f"{newest}: dropped (the store did not open with it: "
                           f"{' '.join(str(error).split())[:160]})")
