"""On-disk counters store: immutable Zarr parts committed by rename, plus a write-ahead journal.

Layout of a store directory::

    STORE/
      bayes-sched-store.json      marker: {"schema": "bayes-sched-counters", "schema_version": 1}
      part-00000.zarr/            one committed batch: a Zarr (format 2) xarray dataset, never
      part-00001.zarr/            modified after its commit
      part-00002-00013.zarr/      parts 2..13 merged by compaction (they are deleted afterwards)
      journal-00014.bin           samples taken since the last commit, one framed record each
                                  (:mod:`counters.journal`); becomes part-00014.zarr on commit

Why this design. The collector must survive SIGKILL (the OOM killer) and power loss at any
instant, lose at most the last second of samples, and never leave a store that cannot be read.

* A *journal* gets every sample as one ``write`` of a CRC-framed record, ``fdatasync``-ed at most
  every second. That is the cheapest way to make each sample durable within 1 s: a few hundred
  bytes and no metadata per sample, where committing a Zarr append every second would rewrite
  the metadata of every array (~100 files) and create one chunk file per array per second.
* Every ``flush_every`` samples (5 minutes by default) the journal segment is *sealed* (closed;
  the next sample opens a new one) and the sealed segments are *committed*: read back, written
  as a new Zarr part into a hidden temporary directory, fsync-ed, and renamed into place -- a
  rename is atomic, so a part is either complete or absent. Only then are the segments deleted.
  A committed part is never written again, so nothing committed can be damaged by a later crash.
  A commit takes what is on disk, by segment index, never samples held in memory: one that lags
  behind sampling takes every segment sealed meanwhile, as one part named by their index range,
  and nothing waits in memory or is dropped. (The previous design appended in place to one part
  and left arrays of unequal length, or an unreadable part, when killed mid-append.)
* Writing parts needs xarray (with pandas, zarr, numcodecs, dask: ~90 MB resident for good), so
  the node collector commits in a short-lived child process (:mod:`counters.committer`) and its
  own process only journals (:class:`counters.storedir.StoreJournal`, numpy only): it stays
  under 80 MB. The child touches only sealed segments; the parent alone allocates segment
  indices; children are serialised by a ``flock`` on the store directory. :class:`StoreWriter`
  commits in its own process, the same way (the child runs it).
* Readers take the committed parts plus the valid records of the journal segments not yet
  committed, in index order; a torn last record is ignored. Hidden ``.part-*.tmp`` and
  ``.trash-*`` directories (a commit or deletion cut short) are never read. Zarr reads a chunk
  file that is gone as NaN, without an error. Parts are therefore written with every chunk
  (all-NaN ones too, which Zarr leaves out by default), and a chunk file missing from one is
  damage, named on opening. For the same reason a part deleted while it is read (a compaction
  beside the reader) would read as NaN: an eager read that finds a part it read gone reads
  again, a lazy one raises for a block read from a part that is gone, and :func:`reading`
  holds the directory's ``flock`` shared so that no writer deletes a part under a reader at
  all (writers hold it exclusively).
* One part per commit would make 288 parts (~30k files with the full catalog) a day, so the
  writer *compacts*: when the newest ``compact_fanout`` (12) parts are of the same level (level
  L spans ``fanout**L`` commits), they are merged into one part named by its index range,
  committed the same way, and then deleted. A store holds at most ``fanout - 1`` parts per level
  plus the parts that reached ``max_part_bytes``; each sample is rewritten once per level
  (log base 12 of the commits). A merged part that exists next to the parts it covers (a crash
  between the two steps) supersedes them: readers skip parts whose range another part contains.

:func:`counters.repair.repair` removes what a crash or outside damage left (temporary
directories, superseded parts, torn journal tails, unreadable parts, cut-short appends of the
previous in-place design) and reports each thing it dropped. A :class:`StoreWriter` (or a
:class:`counters.committer.ChildCommitWriter`) opening a store recovers a crashed run's journal
segments into parts; it refuses (with :class:`CountersError`) to write into a store
damaged by anything but a crash, naming the repair command.

Masks are not written (they equal ``isfinite`` of the values) and are rebuilt, lazily, on reading.
``time`` is written as int64 microseconds since the epoch (:data:`counters.schema.TIME_ENCODING`):
xarray otherwise picks the units from the first append, and nanosecond units can decode to NaT.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import shutil
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import dask.array
import numcodecs
import numpy as np
import xarray as xr
from dask.callbacks import Callback

from counters import schema
from counters.errors import CountersError
from counters.journal import (
    DEFAULT_SYNC_INTERVAL_S,
    JournalLayout,
    read_journal,
)
from counters.journal import _sync_directory as sync_directory
from counters.part_arrays import (
    EVERY_CHUNK_ATTR,
    PartArrayError,
    open_part_array,
    open_part_arrays,
)
from counters.storedir import (  # noqa: F401  (MARKER, PART_GLOB, is_store... are this module's API too)
    COMMITTED_KEY,
    DEFAULT_MAX_UNWRITTEN,
    MARKER,
    PART_GLOB,
    REPAIR_HINT,
    ZARR_FORMAT,
    PartName,
    StoreJournal,
    check_writer_options,
    commit_lock,
    directory_bytes,
    is_store,
    journal_name,
    part_name,
    parts,
    pending_journals,
)
from counters.storedir import check_marker as _check_marker
from counters.storedir import covered as _covered
from counters.storedir import discard as _discard
from counters.storedir import fsync_tree as _fsync_tree
from counters.storedir import leftovers as _leftovers
from counters.storedir import lost_everything as _lost_everything
from counters.storedir import lost_message as _lost_message
from counters.storedir import one_line as _one_line
from counters.storedir import scan as _scan
from counters.storedir import time_lengths_agree as _time_lengths_agree
from counters.storedir import write_marker as _write_marker

DEFAULT_CHUNK_SAMPLES = 3600
#: Zstandard level for values: about half the size of the Blosc-LZ4 default on counters, and
#: level 9 gains nothing over 3 (experiments/bench_collectors.py).
DEFAULT_COMPRESSION_LEVEL = 3
#: Parts of one level merged into one part of the next level.
DEFAULT_COMPACT_FANOUT = 12
#: Dataset attribute of a part listing its value variables: an array directory lost to outside
#: damage would otherwise just vanish from the dataset (Zarr parts are not consolidated). Removed
#: on reading.
PART_VARIABLES_ATTR = "bayes_sched_part_variables"


# -- reading -------------------------------------------------------------------------------
def _with_masks(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with each value variable's mask rebuilt: where it is finite, without the value's
    attributes (units, kind...), as :func:`counters.schema.build` makes it."""
    masks = {schema.mask_name(n): cast(xr.DataArray, np.isfinite(ds[n])).drop_attrs()
             for n in schema.value_names(ds)}
    return ds.assign(masks)


def open_part(part: str | Path, lazy: bool = True) -> xr.Dataset:
    """One part as a counters dataset (dask-backed when ``lazy``, else loaded), masks rebuilt.

    A lazy dataset's blocks raise :class:`CountersError` when read from a part deleted meanwhile
    (:func:`_read_in_place`), never NaN."""
    try:
        open_part_arrays(Path(part))  # damage raised here, not in zarr's concurrent listing
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = xr.open_zarr(part, consolidated=False, chunks={} if lazy else None,
                              zarr_format=ZARR_FORMAT)
            # Times are decoded by the array's attributes, which have no checksum: a damaged
            # digit there ("since 1971") would shift every time without an error.
            encoding = ds[schema.TIME].encoding
            for key in ("units", "calendar"):
                if encoding.get(key) != schema.TIME_ENCODING[key]:
                    raise PartArrayError(f"{schema.TIME}: {key} {encoding.get(key)!r}, expected "
                                         f"{schema.TIME_ENCODING[key]!r} (damaged attributes)")
            if not lazy:
                ds = ds.load()
            listed = ds.attrs.pop(PART_VARIABLES_ATTR, None)
            ds.attrs.pop(EVERY_CHUNK_ATTR, None)
            for variable in ds.variables.values():
                variable.attrs.pop(EVERY_CHUNK_ATTR, None)
            missing = [str(n) for n in (listed if isinstance(listed, list) else [])
                       if str(n) not in ds.data_vars]
            # Coordinates along (node, device) are named by the per-device variables'
            # ``coordinates`` attribute; with those variables lost they read as data variables.
            ds = ds.set_coords([n for n in schema.DEVICE_COORDS
                                if n in ds.data_vars and schema.TIME not in ds[n].dims])
            if lazy:
                ds = _read_in_place(ds, Path(part))
            masked = None if missing else _with_masks(ds)  # fails on a variable damage left
            # without a float dtype
    except PartArrayError as error:
        raise CountersError(f"{part}/{error}; {REPAIR_HINT}") from None
    except Exception as error:  # zarr/xarray/numcodecs raise many types for a damaged directory
        raise CountersError(f"{part}: unreadable Zarr part ({_one_line(error)}); {REPAIR_HINT}"
                            ) from None
    if missing or masked is None:
        raise CountersError(f"{part}: variable(s) {', '.join(missing)} missing from the part "
                            f"(its array directory is gone); {REPAIR_HINT}")
    return masked


def _read_in_place(ds: xr.Dataset, part: Path) -> xr.Dataset:
    """``ds`` (a part opened lazily) with each block of its dask arrays checked, once read, to
    come from a part still in place: Zarr reads the chunks of a part a compaction deleted
    meanwhile as NaN, without an error; this turns them into :class:`CountersError` (read
    again; :func:`reading` prevents it)."""
    ds = ds.copy(deep=False)
    for variable in ds.variables.values():
        data = variable.data
        if isinstance(data, dask.array.Array):
            variable.data = dask.array.map_blocks(_still_in_place, data, part=str(part),
                                                  dtype=data.dtype, meta=data._meta)
    return ds


def _still_in_place(block: np.ndarray, part: str) -> np.ndarray:
    """``block``, read from ``part``, if the part is still there (so it was read whole)."""
    if not os.path.isdir(part):
        raise CountersError(f"{part}: deleted while its values were read (a commit or "
                            "compaction meanwhile); open the store again, or read it inside "
                            "counters.store.reading()")
    return block


def journal_rows_after(rows: np.ndarray, last: np.datetime64 | None) -> np.ndarray:
    """The journal rows ``(T, width)`` (times increasing) stamped after ``last`` (all of them
    where ``None``), times compared as the store holds them (:func:`counters.schema.
    seconds_to_time`). A segment's samples at or before the last sample before them (the wall
    clock stepped back between two runs of a collector) are left out by readers and commits
    alike: a store's times only increase."""
    if last is None or not len(rows):
        return rows
    return rows[schema.seconds_to_time(rows[:, 0]) > last]


def _journal_dataset(journal: Path, last: np.datetime64 | None) -> xr.Dataset | None:
    contents = read_journal(journal)  # CountersError naming the journal if unreadable
    rows = journal_rows_after(contents.rows, last)
    if contents.layout is None or not len(rows):
        return None
    try:
        return contents.layout.to_dataset(rows)
    except Exception as error:  # a header naming counters the schema cannot build
        raise CountersError(f"{journal}: unreadable journal ({_one_line(error)}); "
                            f"{REPAIR_HINT}") from None


def _concat(datasets: Sequence[xr.Dataset]) -> xr.Dataset:
    if len(datasets) == 1:
        return datasets[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ds = xr.concat(datasets, dim=schema.TIME, join="outer", data_vars="all",
                       coords="minimal", compat="override", combine_attrs="override")
    return _with_masks(ds)  # NaN where a part lacks a variable or device: not valid


def open_store(path: str | Path, lazy: bool = True) -> xr.Dataset:
    """All committed parts and journalled samples of a store as one counters dataset along
    ``time``, lazily (dask) by default; ``lazy=False`` reads every value now.

    Parts with different variables or devices are joined with NaN where a part lacks them.
    Any damage (unreadable part or journal, times out of order, schema problems) raises
    :class:`CountersError` naming the store and what is wrong -- never another exception.
    Values are not scanned here (use :func:`counters.schema.validate` for that).

    A lazy dataset reads its chunks when computed. Where writers may be at work (a live
    collector's store), open and compute it inside :func:`reading`, which keeps every part in
    place meanwhile: outside it, a block whose part a compaction deleted raises
    :class:`CountersError` (read again). ``lazy=False`` needs no such care (a read that a
    deletion overlapped is read again here).
    """
    root = Path(path)
    for _ in range(3):
        listing = _listing(root)
        try:
            return _open_store_once(root, lazy)
        except CountersError:
            # A writer committing or compacting meanwhile renames what was listed: read again.
            if _listing(root) == listing:
                raise
    # Writers keep renaming (commits queued back to back): read between two of their commits.
    with commit_lock(root, shared=True):
        return _open_store_once(root, lazy)


def _listing(root: Path) -> list[str]:
    try:
        return sorted(os.listdir(root))
    except OSError:
        return []


def _open_store_once(root: Path, lazy: bool) -> xr.Dataset:
    if _lost_everything(root, _check_marker(root)):
        raise CountersError(_lost_message(root))
    # One listing for parts and journals: listed twice, a commit between the two (a new part,
    # its segments deleted) would hide its samples from both. Anything listed here that a
    # writer renames or deletes meanwhile fails to read, and open_store reads again.
    committed, _, journals = _scan(root)
    datasets = [open_part(p.path, lazy=lazy) for p in committed]
    last = datasets[-1][schema.TIME].values[-1] if datasets else None
    for index in sorted(journals):
        if not _covered(index, committed):
            recent = _journal_dataset(journals[index], last)
            if recent is not None:
                datasets.append(recent)
                last = recent[schema.TIME].values[-1]
    # Zarr reads a chunk file that is gone as its fill value (NaN), without an error. A part a
    # compaction or the retention limit deleted while it was read may so have read as NaN for
    # the chunks read after its rename: the read counts only if every part is still in place
    # now (a part's name is never reused), else open_store reads again.
    if not lazy and any(not p.path.is_dir() for p in committed):
        raise CountersError(f"{root}: a part was deleted while it was read (a commit or "
                            "compaction meanwhile)")
    return combine_datasets(root, datasets)


def combine_datasets(root: Path, datasets: Sequence[xr.Dataset]) -> xr.Dataset:
    """The parts' and journals' datasets, in order, as one store dataset; CountersError if they
    do not fit together (what :func:`open_store` and :func:`counters.repair.repair` accept)."""
    if not datasets:
        raise CountersError(f"{root}: store holds no samples yet")
    try:
        ds = _concat(datasets)
        found_problems = schema.problems(ds, check_values=False)
    except Exception as error:  # xarray refusing to join damaged parts
        raise CountersError(f"{root}: parts do not fit together ({_one_line(error)}); "
                            f"{REPAIR_HINT}") from None
    if found_problems:
        raise CountersError(f"{root}: does not follow the counters schema: "
                            f"{'; '.join(found_problems[:3])}; {REPAIR_HINT}")
    return ds


#: Seconds :func:`reading` waits for a writer's commit, compaction or repair by default.
READING_TIMEOUT_S = 60.0


@contextlib.contextmanager
def reading(store: str | Path, timeout_s: float | None = READING_TIMEOUT_S) -> Iterator[None]:
    """Hold the store still while a lazily opened dataset of it is read, and turn an error
    raised meanwhile (a damaged chunk, found only when read) into a one-line
    :class:`CountersError` naming the store.

    Open and compute inside it: it holds the store's commit lock shared
    (:func:`~counters.storedir.commit_lock`), so no commit, compaction or retention deletes a
    part the dataset reads -- Zarr would read its chunks as NaN, without an error. A commit in
    progress finishes first (seconds; :class:`CountersError` after ``timeout_s``, None: no
    limit), and commits wait for the block to end (the collector samples on meanwhile: its
    journal holds the samples). Where the lock does not hold (a file system without ``flock``
    across machines), a block read from a part deleted meanwhile still raises
    :class:`CountersError` rather than read NaN (:func:`open_part`): read again. Never write the
    store inside it: a writer's exclusive lock would wait for this one.
    """
    root = Path(store)
    _check_marker(root)  # a missing or foreign store named as such, before the lock
    try:
        with commit_lock(root, shared=True, timeout_s=timeout_s):
            yield
    except CountersError:
        raise
    except Exception as error:
        raise CountersError(f"{store}: damaged data ({_one_line(error)}); {REPAIR_HINT}"
                            ) from None


class _TaskProgress(Callback):
    """Reports ``(tasks done, tasks in all)`` of a dask computation to ``report``."""

    def __init__(self, report: Callable[[int, int], None]) -> None:
        super().__init__()
        self.report, self.done, self.total = report, 0, 0

    def _start_state(self, dsk: Any, state: Any) -> None:
        self.total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))
        self.report(0, self.total)

    def _posttask(self, key: Any, result: Any, dsk: Any, state: Any, worker_id: Any) -> None:
        self.done += 1
        self.report(self.done, self.total)


def export_netcdf(store: str | Path, out: str | Path,
                  progress: Callable[[int, int], None] | None = None) -> Path:
    """Write the whole store to one netCDF-4 file (h5netcdf) atomically, via a renamed temporary.

    The store is read part by part (dask), so exporting needs little memory; ``progress`` is
    called with ``(tasks done, tasks in all)`` as it goes.
    """
    target = Path(out)
    if not target.parent.is_dir():
        raise CountersError(f"{target}: directory {target.parent} does not exist")
    temporary = target.with_name(f".{target.name}.partial")
    try:
        with reading(store):  # opened and read with no part deleted meanwhile
            ds = open_store(store)
            encoding: dict[str, dict[str, Any]] = {schema.TIME: dict(schema.TIME_ENCODING)}
            for name in schema.value_names(ds):
                encoding[name] = {"zlib": True, "complevel": 4}
            try:
                delayed = ds.to_netcdf(temporary, engine="h5netcdf", encoding=encoding,
                                       compute=False)
            except OSError as error:  # the target's side: reading() would call it damage
                raise CountersError(f"{target}: cannot write ({error.strerror or error})"
                                    ) from None
            with _TaskProgress(progress) if progress is not None else contextlib.nullcontext():
                delayed.compute()
        os.replace(temporary, target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise CountersError(f"{target}: cannot write ({error.strerror or error})") from None
    except CountersError:
        temporary.unlink(missing_ok=True)
        raise
    return target


# -- writing -------------------------------------------------------------------------------
def trim_cut_short(part: Path) -> int:
    """Trim the arrays of a part appended in place by an older writer and cut short (arrays of
    unequal length along time) to the shortest; returns how many samples were dropped."""
    if _time_lengths_agree(part):  # the usual case, read from the metadata files alone
        return 0
    try:
        arrays = open_part_arrays(part, mode="r+")
        timed = [array for array in arrays.values()
                 if list(array.attrs.get("_ARRAY_DIMENSIONS", [None]))[:1] == [schema.TIME]]
        lengths = [int(array.shape[0]) for array in timed]
        if not lengths or min(lengths) == max(lengths):
            return 0
        for array in timed:
            if array.shape[0] != min(lengths):
                array.resize((min(lengths), *array.shape[1:]))
    except Exception as error:  # a part too damaged to trim: reported as unreadable later
        raise CountersError(f"{part}: cannot trim ({_one_line(error)})") from None
    return max(lengths) - min(lengths)


def _last_time(part: Path) -> np.datetime64 | None:
    """The last sample time of a part, reading only its ``time`` array."""
    try:
        array = open_part_array(part / schema.TIME)
        micros = np.asarray(array[-1:])
        units = array.attrs.get("units")
        if units != schema.TIME_ENCODING["units"] or micros.dtype.kind != "i":
            raise ValueError(f"time in {units!r} ({micros.dtype}), expected int64 "
                             f"{schema.TIME_ENCODING['units']!r}")
    except Exception:  # damaged or foreign-encoded: let xarray read it (or name the damage)
        times = open_part(part)[schema.TIME].values
        return times[-1] if times.size else None
    if not micros.size:
        return None
    return np.datetime64(int(micros[0]), "us").astype("datetime64[ns]")


_Parameters = ParamSpec("_Parameters")
_Result = TypeVar("_Result")


def _exclusively(method: Callable[Concatenate[StoreWriter, _Parameters], _Result]
                 ) -> Callable[Concatenate[StoreWriter, _Parameters], _Result]:
    """A :class:`StoreWriter` method run holding the store's commit lock (reentrant)."""
    @functools.wraps(method)
    def locked(self: StoreWriter, *args: _Parameters.args, **kwargs: _Parameters.kwargs
               ) -> _Result:
        with self._exclusive():
            return method(self, *args, **kwargs)
    return locked


class StoreWriter(StoreJournal):
    """Writes one node's counters to a store: samples to the journal, batches as new parts.

    Use :meth:`log` for each sample as it is taken (durable within ``sync_interval_s``), then
    :meth:`seal` and :meth:`commit_journals` to commit the sealed journal segments as parts;
    :meth:`append` alone commits a dataset directly (no journal). Opening a store recovers the
    journal segments a killed run left into parts (``recover=False``: only the debris a crash
    left is cleared, for a committer working beside a live journal). Opening holds the store's
    commit lock (:func:`~counters.storedir.commit_lock`) while it clears and recovers, so a
    commit in progress in another process (a committer that outlived its collector) finishes
    first and its temporaries are not taken for debris; ``lock_held``: the caller holds that
    lock already (the committer), and a second ``flock`` of its own would wait on it forever.
    Parts of the same level are compacted ``compact_fanout`` at a time while they stay under
    ``max_part_bytes``; past ``max_parts`` parts the oldest are deleted.
    """

    def __init__(self, path: str | Path, max_part_bytes: int | None = None,
                 max_parts: int | None = None, chunk_samples: int = DEFAULT_CHUNK_SAMPLES,
                 compression_level: int = DEFAULT_COMPRESSION_LEVEL,
                 compact_fanout: int | None = DEFAULT_COMPACT_FANOUT,
                 sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S,
                 max_unwritten: int = DEFAULT_MAX_UNWRITTEN, recover: bool = True,
                 lock_held: bool = False) -> None:
        check_writer_options(path, max_part_bytes, max_parts, sync_interval_s)
        if chunk_samples < 1:
            raise CountersError(f"{path}: chunks must hold at least 1 sample, not {chunk_samples}")
        if compact_fanout is not None and compact_fanout < 2:
            raise CountersError(f"{path}: compaction merges at least 2 parts, not {compact_fanout}")
        self.max_part_bytes = max_part_bytes
        self.max_parts = max_parts
        self.chunk_samples = chunk_samples
        self.compression_level = compression_level
        self.compact_fanout = compact_fanout
        self._last_time: np.datetime64 | None = None
        super().__init__(path, sync_interval_s, max_unwritten)
        self._holds_lock = lock_held
        with self._exclusive():
            self._clean_up()
            if recover:
                self.note_recovered(self.commit_journals())

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold the store's commit lock while parts are written or deleted (taken here, unless
        this writer holds it already): one writer of parts at a time, and no part deleted
        under a reader inside :func:`reading`."""
        if self._holds_lock:
            yield
            return
        with commit_lock(self.path):
            self._holds_lock = True
            try:
                yield
            finally:
                self._holds_lock = False

    def note_recovered(self, done: Sequence[tuple[PartName, int]]) -> None:
        """Note each part committed from a stopped run's journal (:meth:`commit_journals`)."""
        for part, samples in done:
            self.notes.append(f"{self.path / journal_name(part.first)}: recovered {samples} "
                              f"sample(s) a stopped run had journalled into part "
                              f"{part.path.name}")

    # -- set-up ------------------------------------------------------------------------------
    def _clean_up(self) -> None:
        """Clear what a killed run left (leftovers, superseded parts, an append of the older
        in-place design cut short) and find the newest stored sample."""
        root = self.path
        try:
            for leftover in _leftovers(root):
                _discard(leftover)
            committed, superseded, _ = _scan(root)
            for part in superseded:
                _discard(part.path)
                self.notes.append(f"{part.path}: removed, a compaction had merged it already")
            # Only the older in-place design could cut an append short, and only in its last
            # part (``repair`` checks them all).
            trimmed = trim_cut_short(committed[-1].path) if committed else 0
            if trimmed:
                self.notes.append(f"{committed[-1].path}: dropped the last {trimmed} sample(s) "
                                  "of an append cut short")
        except OSError as error:
            raise CountersError(f"{root}: cannot clean up ({_one_line(error)})") from None
        if committed:  # new samples must follow the newest part's (older parts: readers check)
            self._stored_until(_last_time(committed[-1].path))

    def _stored_until(self, last: np.datetime64 | None) -> None:
        """Record ``last`` as the newest stored sample (also in the journal's
        :attr:`~counters.storedir.StoreJournal.stored_until_us`)."""
        self._last_time = last
        self.stored_until_us = (None if last is None else
                                int(np.asarray(last).astype("datetime64[us]").astype(np.int64)))

    # -- committing --------------------------------------------------------------------------
    def commit(self, below: int) -> int:
        """Commit the sealed journal segments (indices below ``below``, from :meth:`seal`);
        returns the samples committed."""
        return sum(samples for _, samples in self.commit_journals(below))

    @_exclusively
    def commit_journals(self, below: int | None = None) -> list[tuple[PartName, int]]:
        """Commit the journal segments not yet in a part -- those with an index below ``below``,
        or all -- as parts, oldest first; returns each new part and its samples.

        Consecutive segments of one layout whose times follow on are committed as one part named
        by their index range (segments pile up when commits lag behind), spanning at most
        ``compact_fanout - 1`` indices: a part's compaction level is read from its span
        (:meth:`~counters.storedir.PartName.level`), so a commit of more segments would be taken
        for a merged part, and parts of mixed levels among the newest ``compact_fanout`` would
        stop compaction. A segment's samples at or before the last sample before them (the
        wall clock stepped back) are left out and noted (:func:`journal_rows_after`), and a
        segment left empty is deleted. :class:`CountersError` when a segment cannot be read
        (then what was committed before it stays committed).
        """
        committed, _, journals = _scan(self.path)
        span_limit = math.inf if self.compact_fanout is None else self.compact_fanout - 1
        groups: list[tuple[int, int, JournalLayout, list[np.ndarray]]] = []
        floor = self._last_time  # the last sample before the next segment's
        for index in sorted(journals):
            journal = journals[index]
            if below is not None and index >= below:
                break
            if _covered(index, committed):
                journal.unlink(missing_ok=True)
                continue
            contents = read_journal(journal)  # CountersError naming the journal if unreadable
            fresh = journal_rows_after(contents.rows, floor)
            stale = len(contents.rows) - len(fresh)
            self.left_out += stale
            if stale:
                self.notes.append(f"{journal}: left out {stale} sample(s) stamped at or before "
                                  f"the last sample before them ({floor}): the wall clock had "
                                  "stepped back")
            if contents.layout is None or not len(fresh):
                journal.unlink(missing_ok=True)
                continue
            if contents.skipped:
                self.notes.append(f"{journal}: left out {contents.skipped_bytes} byte(s) of "
                                  f"damaged record(s) between its {len(contents.rows)} whole "
                                  "sample(s)")
            floor = schema.seconds_to_time(fresh[-1:, 0])[0]
            if (groups and groups[-1][2] == contents.layout
                    and index - groups[-1][0] < span_limit):
                groups[-1] = (groups[-1][0], index, contents.layout, [*groups[-1][3], fresh])
            else:
                groups.append((index, index, contents.layout, [fresh]))
        done: list[tuple[PartName, int]] = []
        for first, last, layout, rows in groups:
            journal = self.path / journal_name(first)
            try:
                recent = layout.to_dataset(np.vstack(rows))
            except Exception as error:  # a header naming counters the schema cannot build
                raise CountersError(f"{journal}: unreadable journal ({_one_line(error)}); "
                                    f"{REPAIR_HINT}") from None
            self.append(recent, indices=(first, last))
            done.append((PartName(self.path / part_name(first, last), first, last),
                         recent.sizes[schema.TIME]))
        return done

    @staticmethod
    def layout(ds: xr.Dataset) -> tuple[Any, ...]:
        """What must match for two datasets to share a part: variables, dims and coordinates."""
        names = tuple(sorted((n, ds[n].dims) for n in schema.value_names(ds)))
        fixed = tuple((str(k), tuple(np.asarray(v.values).ravel().tolist()))
                      for k, v in sorted(ds.coords.items(), key=lambda kv: str(kv[0]))
                      if schema.TIME not in v.dims)
        return names, fixed

    @_exclusively
    def append(self, ds: xr.Dataset, indices: tuple[int, int] | None = None) -> None:
        """Commit ``ds`` (a counters dataset, times after everything stored) as a new part.

        ``indices`` is the range of the journal segments holding the same samples (from
        :meth:`commit_journals`); they are deleted once the part is in place. Raises
        :class:`CountersError` if the part cannot be written (then nothing changed and the call
        can be retried).
        """
        if ds.sizes.get(schema.TIME, 0) == 0:
            return
        schema.validate(ds, where=f"{self.path}: data to append", check_monotonic=False)
        first = ds[schema.TIME].values[0]
        if self._last_time is not None and first <= self._last_time:
            raise CountersError(f"{self.path}: samples from {first} are not after the last stored "
                                f"sample {self._last_time}")
        if indices is None:
            with self._lock:
                indices = (self._next_index, self._next_index)
                self._next_index += 1
        self._write_part(ds, *indices)
        self._stored_until(ds[schema.TIME].values[-1])
        if not self._committed:  # once per store: lets readers tell a lost store from a new one
            with contextlib.suppress(OSError):
                _write_marker(self.path, committed=True)
                self._committed = True
        # Committed: nothing below may raise, or a retry would commit the batch twice.
        for index in range(indices[0], indices[1] + 1):
            with contextlib.suppress(OSError):
                (self.path / journal_name(index)).unlink(missing_ok=True)
        self.compact()

    @_exclusively
    def compact(self) -> None:
        """Merge parts of one level and delete the oldest past ``max_parts`` (after every commit;
        also what a commit cut short left undone). Failures become a note, never an error."""
        try:
            self._compact()
            self._drop_old_parts()
        except (OSError, CountersError) as error:
            self.notes.append(f"{self.path}: compaction or clean-up failed ({_one_line(error)}); "
                              "will retry after the next commit")

    def _write_part(self, ds: xr.Dataset, first: int, last: int) -> Path:
        target = self.path / part_name(first, last)
        temporary = self.path / f".{target.name}.tmp"
        values_only = ds[schema.value_names(ds)].assign_attrs(
            {PART_VARIABLES_ATTR: schema.value_names(ds), EVERY_CHUNK_ATTR: True})
        for variable in values_only.variables.values():  # written with every chunk (below)
            variable.attrs[EVERY_CHUNK_ATTR] = True
        chunk = max(1, min(self.chunk_samples, ds.sizes[schema.TIME]))
        # Every array, coordinates included, carries a Zstandard checksum: Blosc (Zarr's default)
        # decodes a truncated chunk without complaint from whatever memory follows it, so damage
        # read back differently from one process to the next instead of failing.
        checked = {"compressors": [numcodecs.Zstd(level=self.compression_level, checksum=True)]}
        encoding: dict[str, dict[str, Any]] = {
            str(name): dict(checked) for name in values_only.variables if name != schema.TIME}
        encoding[schema.TIME] = {**schema.TIME_ENCODING, "chunks": (chunk,), **checked}
        for name in schema.value_names(ds):
            encoding[name]["chunks"] = (chunk, *ds[name].shape[1:])
        try:
            if temporary.exists():
                shutil.rmtree(temporary)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values_only.to_zarr(temporary, mode="w-", encoding=encoding, consolidated=False,
                                    zarr_format=ZARR_FORMAT, write_empty_chunks=True)
            _fsync_tree(temporary)
            os.rename(temporary, target)  # the commit: atomic, the part is whole or absent
            sync_directory(self.path)
        except Exception as error:  # OSError, or zarr's errors when the directory vanished
            shutil.rmtree(temporary, ignore_errors=True)
            raise CountersError(f"{target}: cannot write ({_one_line(error)})") from None
        return target

    def _compact(self) -> None:
        """Merge the newest ``compact_fanout`` parts when they are all of one level."""
        fanout = self.compact_fanout
        while fanout is not None:
            committed = _scan(self.path)[0]
            if len(committed) < fanout:
                return
            tail = committed[-fanout:]
            level = tail[-1].level(fanout)
            if any(p.level(fanout) != level for p in tail):
                return
            if (self.max_part_bytes is not None
                    and sum(directory_bytes(p.path) for p in tail) >= self.max_part_bytes):
                return
            datasets = [open_part(p.path, lazy=False) for p in tail]
            if len({self.layout(d) for d in datasets}) != 1:
                return
            merged = xr.concat([d[schema.value_names(d)] for d in datasets], dim=schema.TIME,
                               combine_attrs="override")
            self._write_part(merged, tail[0].first, tail[-1].last)
            for part in tail:
                _discard(part.path)

    def _drop_old_parts(self) -> None:
        if self.max_parts is None:
            return
        committed = _scan(self.path)[0]
        for old in committed[: max(0, len(committed) - self.max_parts)]:
            _discard(old.path)


def write_store(ds: xr.Dataset, path: str | Path, max_part_bytes: int | None = None) -> Path:
    """Write a whole counters dataset (one node per call) as a new store or append to one."""
    nodes: Sequence[Any] = list(ds[schema.NODE].values)
    if len(nodes) != 1:
        raise CountersError(f"{path}: a store holds one node; the dataset has {len(nodes)}")
    writer = StoreWriter(path, max_part_bytes=max_part_bytes)
    writer.append(ds)
    writer.close()
    return Path(path)
