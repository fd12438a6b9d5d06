"""A counters store directory without xarray: its names, marker and listing, and journalling.

What a store directory holds, and why it is laid out so, is told in :mod:`counters.store`. This
module is the part of it that needs only numpy and the standard library: naming and listing parts
and journal segments, the marker, atomic deletion, and :class:`StoreJournal`, which opens (or
creates) a store and journals samples into it. A collector keeps only this in its process; the
commits, which need xarray and zarr, happen in :class:`counters.store.StoreWriter` -- in the
collector's own process, or in a short-lived child (:mod:`counters.committer`), which keeps the
collector small.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import shutil
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from counters import names
from counters.errors import CountersError
from counters.journal import DEFAULT_SYNC_INTERVAL_S, JournalLayout, JournalWriter
from counters.journal import _sync_directory as sync_directory

MARKER = "bayes-sched-store.json"
PART_GLOB = "part-*.zarr"
ZARR_FORMAT: Literal[2] = 2
_PART_NAME = re.compile(r"^part-(\d+)(?:-(\d+))?\.zarr$")
_JOURNAL_NAME = re.compile(r"^journal-(\d+)\.bin$")
#: A marker temporary of :func:`write_marker`: the writer's process id, thread id, random bits.
_MARKER_TEMPORARY = re.compile(rf"^\.{re.escape(MARKER)}\.(\d+)-\d+-[0-9a-f]+\.partial$")
#: Name start of the empty file a writer creates and deletes to check it can write the store
#: (each its own, :func:`private_suffix`).
PROBE_PREFIX = ".write-probe-"
#: Hidden entries a writer removes on opening: parts, deletions and journal rewrites (by
#: ``repair``) cut short, write probes.
_HIDDEN_PREFIXES = (".part-", ".trash-", ".journal-", PROBE_PREFIX)
REPAIR_HINT = "run `bayes-sched counters repair STORE`"
#: Marker key set once the store's first part is committed: a store whose marker says so but
#: that holds no part and no journal lost its data (a marker alone is a store never written to).
COMMITTED_KEY = "committed"
#: Samples a writer keeps in memory while the journal cannot be written (a full or failing disk),
#: unless told otherwise; past it the oldest are dropped (counted).
DEFAULT_MAX_UNWRITTEN = 600


def one_line(error: BaseException) -> str:
    """An exception as ``Type: message`` on one line of at most ~200 characters."""
    detail = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
    return f"{type(error).__name__}: {' '.join(str(detail).split())[:200]}"


# -- what a store directory holds ------------------------------------------------------------
@dataclass(frozen=True)
class PartName:
    """A committed part: its directory and the range of commit indices it holds."""

    path: Path
    first: int
    last: int

    def level(self, fanout: int) -> int:
        """Compaction level: ``floor(log_fanout(commits spanned))``."""
        return int(math.floor(math.log(self.last - self.first + 1) / math.log(fanout) + 1e-9))


def part_name(first: int, last: int | None = None) -> str:
    return f"part-{first:05d}.zarr" if last is None or last == first else \
        f"part-{first:05d}-{last:05d}.zarr"


def journal_name(index: int) -> str:
    return f"journal-{index:05d}.bin"


def is_store(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def check_marker(root: Path) -> dict[str, Any]:
    """The store's marker; :class:`CountersError` if ``root`` is not a store this code reads."""
    if not root.exists():
        raise CountersError(f"{root}: no such counters store")
    if not is_store(root):
        raise CountersError(f"{root}: not a bayes-sched counters store (no {MARKER})")
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError) as error:
        raise CountersError(f"{root / MARKER}: unreadable store marker ({one_line(error)}); "
                            f"{REPAIR_HINT}") from None
    if not isinstance(marker, dict) or marker.get("schema") != names.SCHEMA_NAME:
        raise CountersError(f"{root / MARKER}: not a bayes-sched counters store marker")
    if marker.get("schema_version") != names.SCHEMA_VERSION:
        raise CountersError(f"{root / MARKER}: schema_version {marker.get('schema_version')}, "
                            f"expected {names.SCHEMA_VERSION}")
    return marker


def write_marker(root: Path, committed: bool = False) -> None:
    marker: dict[str, Any] = {
        "schema": names.SCHEMA_NAME, "schema_version": names.SCHEMA_VERSION,
        "format": f"zarr{ZARR_FORMAT}",
        "layout": "part-NNNNN[-MMMMM].zarr committed by rename; journal-NNNNN.bin"}
    if committed:
        marker[COMMITTED_KEY] = True
    # A temporary of this writer's own: two processes may rewrite the marker at once (a new
    # collector and the committers a killed one left), and with one shared name one could rename
    # the other's half-written file into place. Synced before the rename, so the marker is never
    # empty after a power loss.
    temporary = root / f".{MARKER}.{private_suffix()}.partial"
    try:
        with open(temporary, "w") as stream:
            stream.write(json.dumps(marker, indent=1) + "\n")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, root / MARKER)
    finally:
        temporary.unlink(missing_ok=True)
    sync_directory(root)


def private_suffix() -> str:
    """A file-name part no other process or thread uses at the same time (process id, thread id
    and random bits), for temporary files in a store that several processes write. The process
    id comes first: :data:`_MARKER_TEMPORARY` reads it to tell a dead writer's file."""
    return f"{os.getpid()}-{threading.get_ident()}-{os.urandom(4).hex()}"


def lost_everything(root: Path, marker: dict[str, Any]) -> bool:
    """Whether the marker records a commit but no part or journal segment is left."""
    committed, superseded, journals = scan(root)
    return marker.get(COMMITTED_KEY) is True and not (committed or superseded or journals)


def lost_message(root: Path, consequence: str = "") -> str:
    return (f"{root}: its marker records committed samples but no part or journal is left "
            f"(deleted or lost){consequence}; {REPAIR_HINT}")


def scan(root: Path) -> tuple[list[PartName], list[PartName], dict[int, Path]]:
    """``(committed parts in order, superseded parts, journal segments by index)``."""
    found: list[PartName] = []
    journals: dict[int, Path] = {}
    try:
        entries = list(os.scandir(root))
    except OSError as error:
        raise CountersError(f"{root}: cannot list the store ({one_line(error)})") from None
    for entry in entries:
        match = _PART_NAME.match(entry.name)
        if match and entry.is_dir():
            first = int(match.group(1))
            last = int(match.group(2)) if match.group(2) is not None else first
            if last >= first:
                found.append(PartName(Path(entry.path), first, last))
            continue
        match = _JOURNAL_NAME.match(entry.name)
        if match and entry.is_file():
            journals[int(match.group(1))] = Path(entry.path)
    found.sort(key=lambda p: (p.first, -p.last))
    committed: list[PartName] = []
    superseded: list[PartName] = []
    for part in found:
        if committed and part.first <= committed[-1].last:
            superseded.append(part)  # inside a merged part (a compaction cut short)
        else:
            committed.append(part)
    return committed, superseded, journals


def covered(index: int, committed: Sequence[PartName]) -> bool:
    return any(p.first <= index <= p.last for p in committed)


def next_free_index(root: Path) -> int:
    """The first index no part or journal segment of the store uses."""
    committed, superseded, journals = scan(root)
    return max([p.last + 1 for p in (*committed, *superseded)] + [i + 1 for i in journals] + [0])


def parts(path: str | Path) -> list[Path]:
    """The committed parts of the store at ``path`` in time order; :class:`CountersError` if not
    a store."""
    root = Path(path)
    check_marker(root)
    return [p.path for p in scan(root)[0]]


def pending_journals(path: str | Path, below: int | None = None) -> list[Path]:
    """Journal segments of the store whose samples are not in a committed part, in order (only
    those with an index below ``below``, when given)."""
    root = Path(path)
    check_marker(root)
    committed, _, journals = scan(root)
    return [journals[i] for i in sorted(journals)
            if not covered(i, committed) and (below is None or i < below)]


def leftovers(root: Path) -> list[Path]:
    """Hidden temporary and trash entries a commit or deletion cut short left behind, and the
    marker temporaries of writers that are gone (:func:`_stale_marker_temporary`)."""
    return sorted(p for p in root.iterdir()
                  if p.name.startswith(_HIDDEN_PREFIXES) or _stale_marker_temporary(p.name))


def _stale_marker_temporary(name: str) -> bool:
    """Whether ``name`` is a marker temporary (:func:`write_marker`) whose writer process has
    ended. A living writer's is kept: it may be about to rename it into place (its process id is
    in the name; a reused id only keeps the file until a later clean-up). The fixed name of
    earlier versions is always stale."""
    if name == f".{MARKER}.partial":
        return True
    found = _MARKER_TEMPORARY.match(name)
    return found is not None and not _process_exists(int(found.group(1)))


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):
        return True  # another user's, or not a process id we can ask about: keep the file
    return True


def directory_bytes(path: str | Path) -> int:
    """Bytes of all files under ``path``."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except FileNotFoundError:
                pass
    return total


def time_lengths_agree(part: Path) -> bool:
    """Whether every array of ``part`` along ``time`` has one length, by reading the arrays'
    metadata files as JSON; False when any cannot be read (zarr then looks closer)."""
    lengths = set()
    try:
        for entry in os.scandir(part):
            meta = Path(entry.path) / ".zarray"
            if not entry.is_dir() or not meta.is_file():
                continue
            dims = json.loads((Path(entry.path) / ".zattrs").read_text()).get("_ARRAY_DIMENSIONS")
            if isinstance(dims, list) and dims[:1] == [names.TIME]:
                lengths.add(int(json.loads(meta.read_text())["shape"][0]))
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return False
    return len(lengths) <= 1


# -- writing files ---------------------------------------------------------------------------
def fsync_tree(folder: Path) -> None:
    """fsync every file and directory under ``folder`` (before it is renamed into place)."""
    for parent, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(parent, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        sync_directory(Path(parent))


def discard(path: Path) -> None:
    """Delete a part or journal so that no reader ever sees it half-deleted: a directory is
    renamed to a hidden ``.trash-`` name first (atomic), then removed; a file is unlinked (gone
    already is fine: another writer may have removed it)."""
    if path.is_dir():
        trash = path.with_name(f".trash-{path.name}")
        if trash.exists():
            shutil.rmtree(trash, ignore_errors=True)
        os.rename(path, trash)
        sync_directory(path.parent)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def commit_lock(store: Path, shared: bool = False, timeout_s: float | None = None
                ) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the store directory while writing parts (a commit, a repair):
    one writer of parts at a time; ``shared``: a reader that no commit may change meanwhile.
    Released when the process ends, however it ends. ``timeout_s``: wait at most so long for
    it, then raise :class:`CountersError` (None: wait as long as it takes)."""
    try:
        fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as error:
        raise CountersError(f"{store}: cannot open the store ({error.strerror or error})"
                            ) from None
    try:
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        if timeout_s is None:
            fcntl.flock(fd, mode)
        else:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    fcntl.flock(fd, mode | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise CountersError(
                            f"{store}: a writer has held the store for {timeout_s:g} s (a "
                            "commit, compaction or repair); try again later") from None
                    time.sleep(0.02)
        yield
    finally:
        os.close(fd)


def check_writer_options(path: str | Path, max_part_bytes: int | None = None,
                         max_parts: int | None = None, sync_interval_s: float = 1.0) -> None:
    """One-line :class:`CountersError` for a store writer option out of range."""
    if max_parts is not None and max_parts < 1:
        raise CountersError(f"{path}: keep at least 1 part, not {max_parts}")
    if max_part_bytes is not None and max_part_bytes < 1:
        raise CountersError(f"{path}: parts must be allowed at least 1 byte, "
                            f"not {max_part_bytes}")
    if not (math.isfinite(sync_interval_s) and sync_interval_s >= 0):
        raise CountersError(f"{path}: journal sync interval must be >= 0 s, "
                            f"not {sync_interval_s}")


# -- journalling -----------------------------------------------------------------------------
class StoreJournal:
    """Opens (or creates) a store for writing and journals samples into it; commits nothing.

    Each :meth:`log` writes one sample to the open journal segment (one ``write``, synced within
    ``sync_interval_s``); :meth:`seal` closes the segment and returns the index below which every
    segment is sealed -- what a commit may take. Segment indices are allocated here, and only
    here. A sample the disk refuses stays in memory (at most ``max_unwritten``, the oldest dropped
    past that and counted in :attr:`dropped`) and is journalled, in order, at the next
    :meth:`log` or :meth:`seal` that can write.
    """

    def __init__(self, path: str | Path, sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S,
                 max_unwritten: int = DEFAULT_MAX_UNWRITTEN) -> None:
        check_writer_options(path, sync_interval_s=sync_interval_s)
        self.path = Path(path)
        self.sync_interval_s = sync_interval_s
        #: What a journal row holds; set it before the first :meth:`log`.
        self.journal_layout: JournalLayout | None = None
        self.max_unwritten = max_unwritten
        self.dropped = 0  # samples the disk refused for longer than ``max_unwritten`` lasted
        self.notes: list[str] = []  # things an operator should hear about, one line each
        #: The store's newest sample as this writer last learnt it (on opening, or from a
        #: commit), in whole microseconds since the epoch
        #: (:func:`counters.names.whole_microseconds`); ``None`` while not known or nothing is
        #: stored. A sample must be later than it to be stored. Set by the subclasses that
        #: commit.
        self.stored_until_us: int | None = None
        #: Samples this writer journalled that its commits left out, stamped at or before a
        #: sample stored before them (the wall clock had stepped back;
        #: :func:`counters.store.journal_rows_after`). Set by the subclasses that commit.
        self.left_out = 0
        self._journal: JournalWriter | None = None
        self._unwritten: deque[np.ndarray] = deque()
        self._lock = threading.Lock()
        self._committed = False  # whether the marker records a commit (set on opening)
        self._open_or_create()
        self._next_index = next_free_index(self.path)

    def _open_or_create(self) -> None:
        root = self.path
        if root.exists() and not root.is_dir():
            raise CountersError(f"{root}: exists and is not a directory")
        if root.is_dir() and any(root.iterdir()) and not is_store(root):
            raise CountersError(f"{root}: not empty and not a bayes-sched counters store; "
                                "refusing to write into it")
        try:
            root.mkdir(parents=True, exist_ok=True)
            if not is_store(root):
                write_marker(root)
            probe = root / f"{PROBE_PREFIX}{private_suffix()}"  # its own: others probe too
            probe.write_bytes(b"")
            probe.unlink(missing_ok=True)  # another writer's clean-up may have removed it
        except OSError as error:
            raise CountersError(f"{root}: cannot write the store ({error.strerror or error})"
                                ) from None
        marker = check_marker(root)
        if lost_everything(root, marker):
            raise CountersError(lost_message(root, "; refusing to append to it"))
        self._committed = marker.get(COMMITTED_KEY) is True

    @property
    def unwritten(self) -> int:
        """Samples held in memory because the journal could not be written."""
        return len(self._unwritten)

    def log(self, row: np.ndarray) -> None:
        """Journal one sample row (``journal_layout.row(...)``): on disk when this returns, and
        synced to the device within ``sync_interval_s``; :class:`CountersError` when the disk
        refuses (the row is then kept in memory and journalled at the next chance)."""
        if self.journal_layout is None:
            raise CountersError(f"{self.path}: set journal_layout before logging samples")
        if len(self._unwritten) >= self.max_unwritten:
            self._unwritten.popleft()
            self.dropped += 1
        self._unwritten.append(np.array(row, dtype=np.float64))
        self._write_unwritten()

    def _write_unwritten(self) -> None:
        try:
            while self._unwritten:
                if self._journal is None:
                    assert self.journal_layout is not None
                    with self._lock:
                        index = self._next_index
                        self._journal = JournalWriter(self.path / journal_name(index),
                                                      self.journal_layout, self.sync_interval_s)
                        self._next_index += 1
                self._journal.write(self._unwritten[0])
                self._unwritten.popleft()  # written: a failing sync below must not repeat it
                self._journal.sync_if_due()
        except OSError as error:
            # A write cut short may leave a torn record: continue in a fresh segment.
            self._close_journal()
            raise CountersError(f"{self.path}: cannot write the journal ({one_line(error)})"
                                ) from None

    def _close_journal(self) -> None:
        journal, self._journal = self._journal, None
        if journal is not None:
            with contextlib.suppress(OSError):
                journal.close()

    def seal(self) -> int:
        """Close the open journal segment (journalling any sample held in memory first, if the
        disk takes it); returns the index below which every segment is sealed."""
        with contextlib.suppress(CountersError):  # what cannot be written waits for later
            self._write_unwritten()
        self._close_journal()
        with self._lock:
            return self._next_index

    def commit(self, below: int) -> int:
        """Commit the sealed segments with an index below ``below`` as parts; returns the samples
        committed. Subclasses commit (in this process or a child); this class only journals."""
        raise NotImplementedError(f"{type(self).__name__} journals only; it does not commit")

    def close(self) -> None:
        """Close the journal; samples logged but not committed stay in it (the next writer or
        any reader picks them up)."""
        with contextlib.suppress(CountersError):
            self._write_unwritten()
        self._close_journal()
