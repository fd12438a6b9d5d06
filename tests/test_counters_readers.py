"""Readers beside writers: a part that a compaction deletes while it is read never reads as NaN.

Zarr reads a chunk file that is gone as its fill value (NaN) without an error. An eager read that
a deletion overlapped is read again; a lazy read raises for a block of a part that went, and
inside ``reading`` it holds the writers off (waiting for one at most its timeout).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import counters.store
from counters import schema
from counters.errors import CountersError
from counters.store import DEFAULT_COMPACT_FANOUT, StoreWriter, open_store, parts, reading
from counters.storedir import discard

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_700_000_000.0
SAMPLES = 6  # per part


def batch(k: int) -> xr.Dataset:
    times = T0 + 0.5 * np.arange(k * SAMPLES, (k + 1) * SAMPLES)
    return schema.build(times, "node-a", {"cpu_user": times - T0 + 1.0,
                                          "gpu_energy": (times - T0)[:, None] + np.arange(2.0)},
                        gpu_uuid=["GPU-0", "GPU-1"])


def expected(count: int) -> xr.Dataset:
    return xr.concat([batch(k) for k in range(count)], dim=schema.TIME)


def one_short_of_compaction(store: Path) -> StoreWriter:
    """A store of ``fanout - 1`` level-0 parts: the next append merges them all."""
    writer = StoreWriter(store)
    for k in range(DEFAULT_COMPACT_FANOUT - 1):
        writer.append(batch(k))
    assert len(parts(store)) == DEFAULT_COMPACT_FANOUT - 1
    return writer


def test_an_eager_read_that_a_compaction_overlapped_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    writer = one_short_of_compaction(store)
    opened: list[str] = []
    real_open_part = counters.store.open_part

    def open_then_compact(part: str | Path, lazy: bool = True) -> xr.Dataset:
        """The interleaving of a reader and a compaction: the reader has opened a part (its
        metadata and times), the compaction deletes it, then the reader reads its values."""
        opened.append(Path(part).name)
        ds = real_open_part(part, lazy=True)
        if len(opened) == DEFAULT_COMPACT_FANOUT - 1:  # the last part: no later open fails
            writer.append(batch(DEFAULT_COMPACT_FANOUT - 1))  # merges and deletes the parts
            assert not Path(part).exists()
        return ds if lazy else ds.load()

    monkeypatch.setattr(counters.store, "open_part", open_then_compact)
    ds = open_store(store, lazy=False)
    # It read the merged part after the parts it had begun with were gone.
    assert opened[-1] == f"part-00000-{DEFAULT_COMPACT_FANOUT - 1:05d}.zarr"
    want = expected(DEFAULT_COMPACT_FANOUT)
    assert np.isfinite(ds["cpu_user"].values).all()
    xr.testing.assert_equal(ds["cpu_user"], want["cpu_user"])
    xr.testing.assert_equal(ds["gpu_energy"], want["gpu_energy"])


WRITER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.test_counters_readers import batch
from counters.store import DEFAULT_COMPACT_FANOUT, StoreWriter
print("appending", flush=True)
writer = StoreWriter(sys.argv[1], recover=False)
writer.append(batch(DEFAULT_COMPACT_FANOUT - 1))
print("done", flush=True)
"""


def test_a_lazy_read_inside_reading_holds_a_compaction_off(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one_short_of_compaction(store)
    with reading(store):
        ds = open_store(store)  # lazy: values are read below
        # Another process's append, which compacts: it must wait for the reader.
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(store), str(ROOT)],
                                  stdout=subprocess.PIPE, text=True, cwd=ROOT)
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "appending"
        time.sleep(1.5)  # opening, an append and a compaction take ~0.3 s unhindered
        assert writer.poll() is None
        assert len(parts(store)) == DEFAULT_COMPACT_FANOUT - 1
        loaded = ds.load()
    assert writer.wait(timeout=60) == 0
    assert writer.stdout.read().strip() == "done"
    want = expected(DEFAULT_COMPACT_FANOUT - 1)
    xr.testing.assert_equal(loaded["cpu_user"], want["cpu_user"])
    assert [p.name for p in parts(store)] == [f"part-00000-{DEFAULT_COMPACT_FANOUT - 1:05d}.zarr"]
    xr.testing.assert_equal(open_store(store, lazy=False)["cpu_user"],
                            expected(DEFAULT_COMPACT_FANOUT)["cpu_user"])


def test_reading_waits_for_a_writer_at_most_its_timeout(tmp_path: Path) -> None:
    store = tmp_path / "store"
    one_short_of_compaction(store)
    writer_fd = os.open(store, os.O_RDONLY | os.O_DIRECTORY)  # a writer holding the lock
    try:
        fcntl.flock(writer_fd, fcntl.LOCK_EX)
        started = time.monotonic()
        with pytest.raises(CountersError, match=r"store: a writer has held the store for 0\.3 s"):
            with reading(store, timeout_s=0.3):
                pytest.fail("read while a writer held the store")
        assert 0.3 <= time.monotonic() - started < 10
    finally:
        os.close(writer_fd)  # released: reading goes ahead
    with reading(store, timeout_s=0.3):
        assert open_store(store).sizes[schema.TIME] == (DEFAULT_COMPACT_FANOUT - 1) * SAMPLES


def test_a_part_deleted_under_a_lock_that_did_not_hold_is_reported(tmp_path: Path) -> None:
    """A writer on another machine whose file system does not share ``flock``: what the lock
    cannot prevent, the read of the deleted part's values finds."""
    store = tmp_path / "store"
    one_short_of_compaction(store)
    with pytest.raises(CountersError, match=r"part-00003\.zarr: deleted while its values were "
                                            r"read"):
        with reading(store):
            ds = open_store(store)
            discard(parts(store)[3])  # as a compaction does, without the lock
            ds.load()


def test_a_lazy_read_outside_reading_fails_where_a_part_went_rather_than_reading_nan(
        tmp_path: Path) -> None:
    store = tmp_path / "store"
    one_short_of_compaction(store)
    ds = open_store(store)  # lazy, and not inside reading()
    discard(parts(store)[3])  # a compaction's deletion between the open and the read
    with pytest.raises(CountersError, match=r"part-00003\.zarr: deleted while its values were "
                                            r"read"):
        ds["cpu_user"].load()
    # The parts still in place read as written.
    xr.testing.assert_equal(ds["cpu_user"].isel(time=slice(0, 3 * SAMPLES)).load(),
                            expected(3)["cpu_user"])
