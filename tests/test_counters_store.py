"""The Zarr counters store: appends, reopening, rotation, repair, export, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import dask.array
import numpy as np
import pytest
import xarray as xr
import zarr

from counters import schema
from counters.errors import CountersError
from counters.store import (
    MARKER,
    StoreWriter,
    export_netcdf,
    open_store,
    parts,
    write_store,
)

T0 = 1_700_000_000.123456


def batch(start: int, n: int, devices: int = 2, seed: int = 0) -> xr.Dataset:
    rng = np.random.default_rng(seed + start)
    power = rng.uniform(50, 300, size=(n, devices))
    power[::3, -1] = np.nan
    return schema.build(T0 + 0.25 * np.arange(start, start + n), "node-a", {
        "gpu_power": power,
        "gpu_energy": 1e4 + 100.0 * np.arange(start, start + n)[:, None] + np.zeros(devices),
        "cpu_user": 10.0 + np.arange(start, start + n, dtype=float),
    }, gpu_uuid=[f"GPU-{i}" for i in range(devices)], attrs={"interval_s": 0.25})


def test_appends_read_back_exactly_with_microsecond_times(tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = StoreWriter(store)
    for start in range(0, 30, 10):
        writer.append(batch(start, 10))
    writer.close()
    ds = open_store(store)
    assert isinstance(ds["gpu_power"].data, dask.array.Array)  # opened lazily
    expected = xr.concat([batch(s, 10) for s in range(0, 30, 10)], dim="time")
    xr.testing.assert_equal(ds["gpu_power"].load(), expected["gpu_power"])
    np.testing.assert_array_equal(ds["gpu_power_valid"].values, expected["gpu_power_valid"].values)
    seconds = schema.time_to_seconds(ds["time"].values)
    np.testing.assert_allclose(seconds - T0, 0.25 * np.arange(30), atol=1e-6)
    assert not np.isnat(ds["time"].values).any()
    assert ds["gpu_uuid"].values.tolist() == [["GPU-0", "GPU-1"]]
    assert schema.problems(ds.load()) == []
    assert ds["gpu_power"].attrs["units"] == "W"


@pytest.mark.parametrize("lazy", [False, True])
def test_a_round_trip_is_identical_attributes_and_masks_included(tmp_path: Path,
                                                                  lazy: bool) -> None:
    """What is read back is what was written, attributes included: masks had taken their
    values' units and kind."""
    store = tmp_path / "store"
    writer = StoreWriter(store)
    writer.append(batch(0, 6))
    writer.append(batch(6, 6))  # two parts: read through the concatenation too
    for start, stop in ((0, 6), (6, 12)):
        xr.testing.assert_identical(open_store(store, lazy=lazy).isel(
            time=slice(start, stop)).load(), batch(start, stop - start))


def test_reopening_commits_a_new_part_and_refuses_going_back_in_time(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(batch(0, 5), store)
    writer = StoreWriter(store)
    writer.append(batch(5, 5))
    with pytest.raises(CountersError, match="not after the last stored sample"):
        writer.append(batch(2, 3))
    assert [p.name for p in parts(store)] == ["part-00000.zarr", "part-00001.zarr"]
    assert open_store(store).sizes["time"] == 10


def test_a_size_cap_rotates_parts_and_max_parts_drops_the_oldest(tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = StoreWriter(store, max_part_bytes=1)  # every append after the first rotates
    for start in range(0, 40, 10):
        writer.append(batch(start, 10))
    assert [p.name for p in parts(store)] == [f"part-0000{i}.zarr" for i in range(4)]
    assert open_store(store).sizes["time"] == 40
    capped = StoreWriter(tmp_path / "capped", max_part_bytes=1, max_parts=2)
    for start in range(0, 40, 10):
        capped.append(batch(start, 10))
    kept = open_store(tmp_path / "capped")
    assert kept.sizes["time"] == 20
    assert schema.time_to_seconds(kept["time"].values)[0] == pytest.approx(T0 + 5.0)


def test_a_change_of_devices_starts_a_new_part_and_reads_back_padded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = StoreWriter(store)
    writer.append(batch(0, 4, devices=2))
    writer.append(batch(4, 4, devices=3))
    ds = open_store(store)
    assert len(parts(store)) == 2
    assert ds.sizes["device"] == 3
    assert np.isnan(ds["gpu_power"].values[:4, 0, 2]).all()
    assert not ds["gpu_power_valid"].values[:4, 0, 2].any()


def test_an_append_cut_short_is_trimmed_on_reopening(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(batch(0, 6), store)
    # Simulate a crash mid-append: values of one variable written, time not.
    group = zarr.open_group(str(parts(store)[0]), mode="r+", zarr_format=2)
    group["gpu_power"].append(np.ones((3, 1, 2)), axis=0)
    with pytest.raises(CountersError):
        open_store(store)
    writer = StoreWriter(store)
    writer.append(batch(6, 4))
    ds = open_store(store).load()
    assert ds.sizes["time"] == 10
    xr.testing.assert_equal(ds["gpu_power"].isel(time=slice(6, None)), batch(6, 4)["gpu_power"])


def test_export_to_netcdf_round_trips(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(batch(0, 12), store)
    reports: list[tuple[int, int]] = []
    out = export_netcdf(store, tmp_path / "out.nc", progress=lambda *r: reports.append(r))
    assert reports[0][0] == 0 and reports[-1][0] == reports[-1][1] > 0
    exported = xr.open_dataset(out, engine="h5netcdf").load()
    assert schema.problems(exported) == []
    xr.testing.assert_equal(exported["gpu_energy"], open_store(store)["gpu_energy"].load())
    assert exported["gpu_power_valid"].dtype == bool
    with pytest.raises(CountersError, match="does not exist"):
        export_netcdf(store, tmp_path / "missing-dir" / "out.nc")


def test_foreign_corrupt_and_unwritable_stores_are_one_line_errors(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("not a store")
    with pytest.raises(CountersError, match="not a bayes-sched counters store"):
        open_store(foreign)
    with pytest.raises(CountersError, match="not empty and not a bayes-sched counters store"):
        StoreWriter(foreign)
    assert (foreign / "notes.txt").read_text() == "not a store"

    wrong_marker = tmp_path / "wrong"
    wrong_marker.mkdir()
    (wrong_marker / MARKER).write_text(json.dumps({"schema": "other"}))
    with pytest.raises(CountersError, match="not a bayes-sched counters store marker"):
        open_store(wrong_marker)

    store = tmp_path / "store"
    write_store(batch(0, 5), store)
    (parts(store)[0] / ".zattrs").write_text("{ this is not json")
    with pytest.raises(CountersError, match="part-00000.zarr: unreadable Zarr part"):
        open_store(store)

    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(CountersError, match="cannot write the store"):
        StoreWriter(a_file / "store")
    with pytest.raises(CountersError, match="no such counters store"):
        open_store(tmp_path / "absent")
