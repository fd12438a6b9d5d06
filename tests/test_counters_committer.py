"""Commits in a child process (counters.committer): the same store as committing in process, and
a committer SIGKILLed at any instant of its writes loses nothing and leaves a readable store."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import xarray as xr

from counters.catalog import CATALOG
from counters.committer import ChildCommitWriter
from counters.journal import JournalLayout
from counters.repair import repair
from counters.store import StoreWriter, open_store, parts, pending_journals
from counters.storedir import StoreJournal, journal_name, next_free_index

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
T0 = 1_700_000_000.0
#: A third of the catalog for 2 GPUs: parts of ~25 arrays.
LAYOUT = JournalLayout(
    node="n1", node_counters=tuple(c.name for c in CATALOG.values() if not c.per_device)[::3],
    device_counters=tuple(c.name for c in CATALOG.values() if c.per_device)[::3], n_devices=2,
    gpu_uuid=("GPU-a", "GPU-b"), pci_bus_id=(), attrs={"producer": "test", "interval_s": 0.5})


#: Committers killed (each kill, then a commit to completion, costs two child runs).
KILLS = 3


def rows(start: int, n: int, seed: int = 0) -> np.ndarray:
    """``n`` seeded sample rows, 0.5 s apart from sample ``start``, some values NaN."""
    rng = np.random.default_rng(seed + start)
    values = rng.gamma(2.0, 100.0, size=(n, LAYOUT.width))
    values[rng.random(values.shape) < 0.05] = np.nan
    values[:, 0] = T0 + 0.5 * np.arange(start, start + n)
    return values


def journal(writer: StoreJournal, batch: np.ndarray) -> int:
    """Journal ``batch`` as one segment; returns what :meth:`seal` returns."""
    writer.journal_layout = LAYOUT
    for row in batch:
        writer.log(row)
    return writer.seal()


def files(store: Path) -> dict[str, bytes]:
    return {str(p.relative_to(store)): p.read_bytes() for p in sorted(store.rglob("*"))
            if p.is_file()}


def test_a_child_commit_writes_the_store_an_in_process_commit_writes(tmp_path: Path) -> None:
    """Old path: the buffered batch as a dataset, appended in this process (what the collector
    did before). New path: journalled, sealed, committed by ``python -m counters.committer``,
    once with two sealed segments waiting (a commit that lagged) -- the same files, byte for
    byte, and the same dataset."""
    batches = [rows(10 * k, 10) for k in range(4)]
    old = StoreWriter(tmp_path / "old")
    for batch in batches[:2]:
        old.append(LAYOUT.to_dataset(batch))
    old.append(LAYOUT.to_dataset(np.vstack(batches[2:])), indices=(2, 3))
    new = ChildCommitWriter(tmp_path / "new")
    for batch in batches[:2]:
        assert new.commit(journal(new, batch)) == 10
    journal(new, batches[2])
    assert new.commit(journal(new, batches[3])) == 20
    new.close()
    assert [p.name for p in parts(tmp_path / "new")] == [
        "part-00000.zarr", "part-00001.zarr", "part-00002-00003.zarr"]
    assert pending_journals(tmp_path / "new") == []
    assert files(tmp_path / "new") == files(tmp_path / "old")
    xr.testing.assert_identical(open_store(tmp_path / "new", lazy=False),
                                open_store(tmp_path / "old", lazy=False))
    assert len(new.commits) == 3 and all(c.peak_rss_bytes > 0 for c in new.commits)


def start_writing(store: Path, below: int) -> tuple[subprocess.Popen[bytes], float]:
    """Start ``python -m counters.committer STORE --below BELOW``; return it once it has begun
    writing (its first hidden temporary part exists) or ended, with that instant (monotonic s)."""
    command = [sys.executable, "-m", "counters.committer", str(store), "--below", str(below)]
    child = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while child.poll() is None and not any(p.name.startswith(".part-") for p in store.iterdir()):
        assert time.monotonic() < deadline, "the committer never started writing"
        time.sleep(0.001)
    return child, time.monotonic()


def write_to_the_end(child: subprocess.Popen[bytes], began: float) -> float:
    """Wait for a committer to finish (successfully); the seconds it wrote for."""
    _, stderr = child.communicate(timeout=300)
    assert child.returncode == 0, stderr
    return time.monotonic() - began


def test_a_committer_killed_mid_write_loses_nothing(tmp_path: Path) -> None:
    """SIGKILL the committer at seeded fractions of its writing time (part, rename, journal
    deletion, compaction of 12 parts, deletion of the merged ones): every time the store reads
    whole with every sample, the collector's open segment is untouched, the next commit finishes
    the job, and repair finds nothing left to do."""
    template = tmp_path / "template"
    writer = StoreWriter(template)
    for k in range(11):  # the committer's part is the 12th of level 0: it compacts them
        writer.append(LAYOUT.to_dataset(rows(20 * k, 20)))
    journal(writer, rows(220, 20))
    journal(writer, rows(240, 20))
    writer.close()
    calibration = tmp_path / "calibration"  # how long the writes take here, now
    shutil.copytree(template, calibration)
    writing_s = write_to_the_end(*start_writing(calibration, next_free_index(calibration)))
    rng = np.random.default_rng(17)
    landed = 0
    for trial in range(KILLS):
        store = tmp_path / f"store-{trial}"
        shutil.copytree(template, store)
        live = StoreJournal(store)  # the collector: an open segment beside the sealed ones
        below = journal(live, np.empty((0, LAYOUT.width)))
        live.log(rows(260, 1)[0])
        active = store / journal_name(below)
        expected = open_store(store, lazy=False)
        assert expected.sizes["time"] == 261
        child, began = start_writing(store, below)
        time.sleep(max(0.0, began + float(rng.uniform(0.05, 0.95)) * writing_s
                       - time.monotonic()))
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
            landed += 1
        child.wait(timeout=60)
        assert active.read_bytes()[-8:] == rows(260, 1)[0, -1:].tobytes()  # untouched
        xr.testing.assert_identical(open_store(store, lazy=False), expected)
        # The collector's next commit (the same command, not killed) finishes the job.
        write_to_the_end(*start_writing(store, below))
        assert pending_journals(store) == [active] and active.exists()
        xr.testing.assert_identical(open_store(store, lazy=False), expected)
        assert [p.name for p in parts(store)] == ["part-00000-00012.zarr"]
        live.log(rows(261, 1)[0])  # the collector goes on in its segment
        live.close()
        assert repair(store) == []  # nothing left for repair: the recovery cleared it all
        assert open_store(store, lazy=False).sizes["time"] == 262
    assert landed >= KILLS // 2, f"only {landed} of {KILLS} kills landed while it was writing"


#: Opens of one store per process in :func:`test_writers_opening_one_store_at_once_never_fail`.
OPENS = 300
_OPENER = """
import sys
import threading
from counters.errors import CountersError
from counters.storedir import StoreJournal, write_marker
from pathlib import Path
failures = []
for i in range({opens}):
    try:
        StoreJournal(sys.argv[1])
        if i % 3 == 0:
            write_marker(Path(sys.argv[1]), committed=True)  # a commit's first marker rewrite
    except (CountersError, OSError) as error:
        failures.append(str(error))
print(len(failures), failures[:1])
"""


def test_writers_opening_one_store_at_once_never_fail(tmp_path: Path) -> None:
    # A collector started while the committers a killed one left run on opens the store beside
    # them: each open checks that the store is writable and a first commit rewrites the marker.
    # With one fixed probe file and one fixed marker temporary name, one process's unlink or
    # rename removed the other's (``cannot write the store (No such file or directory)``: a
    # restart failed in tests/test_counters_crash.py under load), and a marker could be renamed
    # into place while another process was still writing it.
    store = tmp_path / "store"
    journal(StoreJournal(store), rows(0, 4))  # a sealed segment: the store holds samples
    children = [subprocess.Popen([sys.executable, "-c", _OPENER.format(opens=OPENS), str(store)],
                                 env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True) for _ in range(4)]
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err[-2000:]
        assert out.startswith("0 "), out
    assert sorted(p.name for p in store.iterdir()) == ["bayes-sched-store.json",
                                                        journal_name(0)]  # nothing left over
    StoreJournal(store)  # the marker is whole


def test_piled_up_segments_leave_compaction_bounded(tmp_path: Path) -> None:
    # A part's compaction level is read from the indices it spans. A commit that took several
    # piled-up segments at once made a part that looked merged (level 1) between one-segment
    # commits (level 0), so the newest ``fanout`` parts were never of one level and compaction
    # stopped: here (fanout 3, piles of 4) two parts per round, 10 after 5 rounds; after many
    # collector restarts, 37 parts where the store's design keeps under 26 (the slow
    # test_sigkill_at_random_instants_many_times).
    writer = StoreWriter(tmp_path / "store", compact_fanout=3)
    sample = 0
    for _ in range(5):
        for _ in range(4):  # commits lagged: 4 sealed segments wait
            journal(writer, rows(sample, 1))
            sample += 1
        writer.commit_journals()
        journal(writer, rows(sample, 1))  # then one commit of its own
        sample += 1
        writer.commit_journals()
    stored = parts(tmp_path / "store")
    # At most fanout - 1 parts per level: levels 0-2 for 25 segments.
    assert len(stored) <= 2 * 3, [p.name for p in stored]
    assert open_store(tmp_path / "store", lazy=False).sizes["time"] == sample


def test_a_writer_opened_during_another_process_commit_waits_and_keeps_its_temporary(
        tmp_path: Path) -> None:
    """A committer that outlived its collector may be writing when an in-process writer opens
    the store: opening waits for its commit lock, so the committer's hidden temporary part is
    not cleared as a crash's debris under it; once the lock is free, a leftover is cleared."""
    store = tmp_path / "store"
    StoreWriter(store).close()
    temporary = store / ".part-00009.zarr.tmp"
    holder = (  # another process's commit in progress: the lock held, its temporary written
        "import sys; from pathlib import Path; from counters.storedir import commit_lock\n"
        f"with commit_lock(Path({str(store)!r})):\n"
        f"    Path({str(temporary)!r}).mkdir(); print('writing', flush=True); sys.stdin.readline()\n")
    child = subprocess.Popen([sys.executable, "-c", holder], env=ENV, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "writing\n"
        opened: list[StoreWriter] = []
        opener = threading.Thread(target=lambda: opened.append(StoreWriter(store)))
        opener.start()
        opener.join(timeout=1.0)
        assert opener.is_alive() and not opened  # waiting on the lock
        assert temporary.is_dir()  # the commit's part being written is still there
    finally:
        assert child.stdin is not None
        child.stdin.write("\n")
        child.stdin.close()
        child.wait(timeout=60)
    opener.join(timeout=60)
    assert opened, "the writer never opened after the commit ended"
    # The holder ended without renaming its temporary: now it is a crash's leftover, cleared.
    assert not temporary.exists()
    opened[0].close()
