"""Commits a counters store's journal segments into parts in a short-lived child process.

    python -m counters.committer STORE --below N [--recovered-below R] [--max-part-bytes B]
                                 [--max-parts K]

Why. Writing a Zarr part goes through xarray, which brings pandas, zarr, numcodecs and dask:
about 90 MB resident that a process keeps for good (modules are never unloaded), plus what
writing and compacting parts allocates. A node collector must stay small (<= 80 MB), so its
process only journals (:class:`ChildCommitWriter`, built on
:class:`counters.storedir.StoreJournal`: numpy and the standard library) and hands every commit to
this module run as a child: it lowers its priority, imports xarray, commits the sealed segments
as parts with :meth:`counters.store.StoreWriter.commit_journals`, compacts, prints what it did
and exits, giving its memory back. A commit every five minutes pays Python's start-up and the
imports each time.

Crash safety is the store's own (:mod:`counters.store`), and the split keeps it:

* the child reads only sealed segments (index below ``N``): the parent's open segment has an
  index of ``N`` or more and is never touched; indices are allocated by the parent alone;
* a part appears by rename and a segment is deleted only once a part covers it, so a child
  killed at any instant leaves segments that the next commit, or any reader, picks up (and
  hidden temporaries that the next commit clears);
* commits are serialised by an exclusive ``flock`` on the store directory, held by the child for
  its whole run: a child orphaned by a killed collector finishes (or dies) before the next
  collector's first commit starts, so two committers never write one store.

The parent passes the batch by naming it (``--below``), not by sending samples: what is committed
is exactly what is on disk, and a commit that lags behind sampling holds nothing in the parent's
memory (the segments wait on disk; the next commit takes them all). What a stopped (killed)
collector left is finished by the next collector's first commit, so a restarted collector
samples at once; readers see those segments meanwhile.

Protocol: the child prints ``note TEXT`` per note (one per part recovered from a stopped run's
segments, those below ``--recovered-below``, which are committed apart and not counted), then
``stored UNTIL_US LEFT_OUT`` (the store's newest sample in whole microseconds since the epoch,
``-`` for an empty store, and the samples of the parent's segments left out as stamped at or
before a stored one: the wall clock had stepped back) and last ``committed SAMPLES
PEAK_RSS_BYTES``, then exits 0; on a :class:`CountersError` it prints the one-line message on
stderr and exits 1.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from counters.errors import CountersError
from counters.journal import DEFAULT_SYNC_INTERVAL_S
from counters.storedir import (
    StoreJournal,
    check_writer_options,
    commit_lock,
    pending_journals,
)

#: The directory holding the ``counters`` package: put first on the child's import path, so that
#: the child runs the same code as its parent.
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[1])


#: A commit yields the CPU to sampling (and to the node's real work): it can wait.
NICENESS = 10


@dataclass(frozen=True)
class CommitRecord:
    """One commit run in a child: wall seconds, samples committed, the child's peak RSS (bytes)."""

    seconds: float
    samples: int
    peak_rss_bytes: int


class ChildCommitWriter(StoreJournal):
    """A store writer whose process only journals; each commit runs ``python -m
    counters.committer`` and waits for it.

    Opening a store checks it as :class:`counters.store.StoreWriter` does without reading any
    part (a store that lost its parts is refused). What a crash left (journal segments,
    temporaries, merged parts not yet deleted) is finished by the first commit, which notes each
    part recovered; an error there (a damaged journal) is that commit's :class:`CountersError`,
    naming the repair, and the journal keeps every sample meanwhile.
    """

    def __init__(self, path: str | Path, max_part_bytes: int | None = None,
                 max_parts: int | None = None,
                 sync_interval_s: float = DEFAULT_SYNC_INTERVAL_S,
                 python: str = sys.executable) -> None:
        check_writer_options(path, max_part_bytes, max_parts, sync_interval_s)
        self.max_part_bytes = max_part_bytes
        self.max_parts = max_parts
        self.python = python
        self.commits: list[CommitRecord] = []
        super().__init__(path, sync_interval_s)
        # What a stopped run journalled is committed by the first commit (readers see it
        # meanwhile), so sampling starts at once; parts below this are noted as recovered.
        self._recovered_below = self._next_index

    def commit(self, below: int) -> int:
        """Commit the sealed journal segments (indices below ``below``, from :meth:`seal`) in a
        child; returns the samples committed (0, and no child, when none is waiting). The child
        also tells the store's newest sample (:attr:`stored_until_us`, unknown until the first
        commit: this process does not read parts) and the samples it left out (:attr:`left_out`).
        """
        if not pending_journals(self.path, below):
            return 0
        command = [self.python, "-m", "counters.committer", str(self.path), "--below", str(below),
                   "--recovered-below", str(self._recovered_below)]
        if self.max_part_bytes is not None:
            command += ["--max-part-bytes", str(self.max_part_bytes)]
        if self.max_parts is not None:
            command += ["--max-parts", str(self.max_parts)]
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([_PACKAGE_ROOT, *([path] if path
                                                                              else [])])}
        started = time.monotonic()
        try:
            # Its own session: a Ctrl-C in the collector's terminal is the collector's to act on
            # (it stops, then commits once more), not the commit's.
            result = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                                    text=True, env=env, check=False, start_new_session=True)
        except OSError as error:
            raise CountersError(f"{self.path}: cannot start the commit process "
                                f"({error.strerror or error})") from None
        lines = result.stderr.strip().splitlines()
        if result.returncode == 1 and lines:
            raise CountersError(lines[-1])
        if result.returncode != 0:
            why = f"killed by signal {-result.returncode}" if result.returncode < 0 else \
                f"exit status {result.returncode}"
            raise CountersError(f"{self.path}: the commit process failed ({why})"
                                + (f": {lines[-1][:200]}" if lines else ""))
        samples = peak = 0
        for line in result.stdout.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "note":
                self.notes.append(rest)
            elif kind == "stored":
                until, left_out = rest.split()
                self.stored_until_us = None if until == "-" else int(until)
                self.left_out += int(left_out)
            elif kind == "committed":
                samples, peak = (int(x) for x in rest.split())
        self.commits.append(CommitRecord(time.monotonic() - started, samples, peak))
        return samples


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m counters.committer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("store", type=Path)
    parser.add_argument("--below", type=int, required=True,
                        help="commit the journal segments with an index below this")
    parser.add_argument("--recovered-below", type=int, default=0,
                        help="note parts of segments below this index as recovered from a "
                             "stopped run")
    parser.add_argument("--max-part-bytes", type=int)
    parser.add_argument("--max-parts", type=int)
    args = parser.parse_args(argv)
    # A stop request (systemd signals the whole unit) is the collector's: it commits again after
    # stopping, and a commit is short and safe to cut anyway (SIGKILL still ends it).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.nice(NICENESS)  # before the imports: they are most of a commit's CPU time
    try:
        with commit_lock(args.store):  # first: a child waiting for another holds little memory
            from counters.store import StoreWriter  # xarray and zarr: in the child only

            writer = StoreWriter(args.store, max_part_bytes=args.max_part_bytes,
                                 max_parts=args.max_parts, recover=False, lock_held=True)
            # A stopped run's segments first, apart: never one part with the parent's own.
            writer.note_recovered(writer.commit_journals(min(args.recovered_below, args.below)))
            recovered_left_out = writer.left_out
            done = writer.commit_journals(args.below)
            if not done:  # a compaction that a killed commit left undone is finished here
                writer.compact()
    except CountersError as error:
        print(" ".join(str(error).split()), file=sys.stderr)
        return 1
    for note in writer.notes:
        print(f"note {' '.join(note.split())}")
    until = "-" if writer.stored_until_us is None else str(writer.stored_until_us)
    print(f"stored {until} {writer.left_out - recovered_left_out}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(f"committed {sum(samples for _, samples in done)} {peak}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
