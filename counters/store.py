"""On-disk counters store: Zarr parts appended along ``time``, rotated at a size cap, read lazily.

Layout of a store directory::

    STORE/
      bayes-sched-store.json   marker: {"schema": "bayes-sched-counters", "schema_version": 1, ...}
      part-00000.zarr/         Zarr (format 2) group, one xarray dataset, appended along time
      part-00001.zarr/         started when part-00000 reached ``max_part_bytes`` or the set of
      ...                      variables/devices changed

Why Zarr with append rather than rotated netCDF: an append only adds chunk files and rewrites a few
bytes of metadata per array, so samples already on disk are never rewritten, and an append cut
short (power loss, SIGKILL) leaves arrays of unequal length that :class:`StoreWriter` trims back on
reopening -- whereas an HDF5 file interrupted mid-write can be lost whole. Appends also cost about
the same as extending an HDF5 file in place (``experiments/bench_collectors.py`` measures both), and
each part opens lazily as dask arrays, so a long recording is read without loading it.

Masks are not written (they equal ``isfinite`` of the values) and are rebuilt, lazily, on reading.
``time`` is written as int64 microseconds since the epoch (:data:`counters.schema.TIME_ENCODING`):
xarray otherwise picks the units from the first append, and nanosecond units can decode to NaT.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from counters import schema
from counters.errors import CountersError

MARKER = "bayes-sched-store.json"
PART_GLOB = "part-*.zarr"
ZARR_FORMAT = 2
DEFAULT_CHUNK_SAMPLES = 3600


def _part_name(index: int) -> str:
    return f"part-{index:05d}.zarr"


def is_store(path: str | Path) -> bool:
    return (Path(path) / MARKER).is_file()


def parts(path: str | Path) -> list[Path]:
    """The parts of the store at ``path`` in time order; :class:`CountersError` if not a store."""
    root = Path(path)
    if not root.exists():
        raise CountersError(f"{root}: no such counters store")
    if not is_store(root):
        raise CountersError(f"{root}: not a bayes-sched counters store (no {MARKER})")
    try:
        marker = json.loads((root / MARKER).read_text())
    except (OSError, ValueError) as error:
        raise CountersError(f"{root / MARKER}: unreadable store marker ({error})") from None
    if not isinstance(marker, dict) or marker.get("schema") != schema.SCHEMA_NAME:
        raise CountersError(f"{root / MARKER}: not a bayes-sched counters store marker")
    if marker.get("schema_version") != schema.SCHEMA_VERSION:
        raise CountersError(f"{root / MARKER}: schema_version {marker.get('schema_version')}, "
                            f"expected {schema.SCHEMA_VERSION}")
    return sorted(root.glob(PART_GLOB))


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


def _with_masks(ds: xr.Dataset) -> xr.Dataset:
    masks = {schema.mask_name(n): np.isfinite(ds[n]) for n in schema.value_names(ds)}
    return ds.assign(masks)


def open_part(part: str | Path, lazy: bool = True) -> xr.Dataset:
    """One part as a counters dataset (dask-backed when ``lazy``), masks rebuilt."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ds = xr.open_zarr(part, consolidated=False, chunks={} if lazy else None,
                              zarr_format=ZARR_FORMAT)
    except Exception as error:  # zarr/xarray raise many types for a damaged directory
        raise CountersError(f"{part}: unreadable Zarr part ({type(error).__name__}: "
                            f"{' '.join(str(error).split())[:200]})") from None
    return _with_masks(ds)


def open_store(path: str | Path, lazy: bool = True) -> xr.Dataset:
    """All parts of a store as one counters dataset along ``time``, lazily (dask) by default.

    Parts with different variables or devices are joined with NaN where a part lacks them.
    Structural schema problems raise :class:`CountersError` naming the store; values are not
    scanned here (use :func:`counters.schema.validate` for that).
    """
    found = parts(path)
    if not found:
        raise CountersError(f"{path}: store holds no parts yet")
    datasets = [open_part(p, lazy=lazy) for p in found]
    if len(datasets) == 1:
        ds = datasets[0]
    else:
        ds = xr.concat(datasets, dim=schema.TIME, join="outer", data_vars="all",
                       coords="minimal", compat="override", combine_attrs="override")
        for name in schema.value_names(ds):
            ds[schema.mask_name(name)] = np.isfinite(ds[name])
    found_problems = schema.problems(ds, check_values=False)
    if found_problems:
        raise CountersError(f"{path}: does not follow the counters schema: "
                            f"{'; '.join(found_problems[:3])}")
    return ds


def export_netcdf(store: str | Path, out: str | Path) -> Path:
    """Write the whole store to one netCDF-4 file (h5netcdf) atomically, via a renamed temporary."""
    ds = open_store(store)
    target = Path(out)
    if not target.parent.is_dir():
        raise CountersError(f"{target}: directory {target.parent} does not exist")
    temporary = target.with_name(f".{target.name}.partial")
    encoding: dict[str, dict[str, Any]] = {schema.TIME: dict(schema.TIME_ENCODING)}
    for name in schema.value_names(ds):
        encoding[name] = {"zlib": True, "complevel": 4}
    try:
        ds.to_netcdf(temporary, engine="h5netcdf", encoding=encoding)
        os.replace(temporary, target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise CountersError(f"{target}: cannot write ({error.strerror or error})") from None
    return target


class StoreWriter:
    """Appends counters datasets (one node) to a store, rotating parts at ``max_part_bytes``.

    The first append of a part goes through xarray (so the part is a plain xarray Zarr dataset with
    the schema's encodings); later appends extend the Zarr arrays directly, which is what keeps the
    per-append cost low. Nothing already written is ever rewritten.
    """

    def __init__(self, path: str | Path, max_part_bytes: int | None = None,
                 max_parts: int | None = None, chunk_samples: int = DEFAULT_CHUNK_SAMPLES) -> None:
        self.path = Path(path)
        self.max_part_bytes = max_part_bytes
        self.max_parts = max_parts
        self.chunk_samples = chunk_samples
        self._group: Any = None
        self._layout: tuple[Any, ...] | None = None
        self._part: Path | None = None
        self._last_time: np.datetime64 | None = None
        self._open_or_create()

    # -- set-up ------------------------------------------------------------------------------
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
                marker = {"schema": schema.SCHEMA_NAME, "schema_version": schema.SCHEMA_VERSION,
                          "format": f"zarr{ZARR_FORMAT}", "layout": "part-NNNNN.zarr along time"}
                temporary = root / f".{MARKER}.partial"
                temporary.write_text(json.dumps(marker, indent=1) + "\n")
                os.replace(temporary, root / MARKER)
            probe = root / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as error:
            raise CountersError(f"{root}: cannot write the store ({error.strerror or error})"
                                ) from None
        existing = parts(root)
        if existing:
            self._resume(existing[-1])

    def _resume(self, part: Path) -> None:
        """Reopen the last part for appending, trimming an append that was cut short."""
        import zarr

        try:
            group = zarr.open_group(str(part), mode="r+", zarr_format=ZARR_FORMAT)
            arrays = {name: group[name] for name in group.array_keys()}
            time_length = arrays[schema.TIME].shape[0]
        except Exception as error:  # a damaged part: leave it alone, start a new one
            warnings.warn(f"{part}: cannot reopen for appending ({error}); starting a new part",
                          stacklevel=2)
            return
        timed = [a for a in arrays.values() if a.attrs.get("_ARRAY_DIMENSIONS", [None])[0]
                 == schema.TIME]
        complete = min(a.shape[0] for a in timed)
        if complete < time_length or any(a.shape[0] != complete for a in timed):
            for array in timed:
                if array.shape[0] != complete:
                    array.resize((complete, *array.shape[1:]))
        self._part = part
        self._group = group
        self._layout = None  # compared against the next dataset's layout lazily
        if complete:
            micros = int(arrays[schema.TIME][complete - 1])
            self._last_time = np.datetime64(micros, "us").astype("datetime64[ns]")

    # -- appending ---------------------------------------------------------------------------
    @staticmethod
    def layout(ds: xr.Dataset) -> tuple[Any, ...]:
        """What must match for two datasets to share a part: variables, dims and coordinates."""
        names = tuple(sorted((n, ds[n].dims) for n in schema.value_names(ds)))
        fixed = tuple((str(k), tuple(np.asarray(v.values).ravel().tolist()))
                      for k, v in sorted(ds.coords.items()) if schema.TIME not in v.dims)
        return names, fixed

    def append(self, ds: xr.Dataset) -> None:
        """Append ``ds`` (a counters dataset, times after everything stored) to the store."""
        if ds.sizes.get(schema.TIME, 0) == 0:
            return
        schema.validate(ds, where=f"{self.path}: data to append", check_monotonic=False)
        first = ds[schema.TIME].values[0]
        if self._last_time is not None and first <= self._last_time:
            raise CountersError(f"{self.path}: samples from {first} are not after the last stored "
                                f"sample {self._last_time}")
        layout = self.layout(ds)
        if self._group is not None and self._layout is None:
            self._layout = self._stored_layout()
        if self._group is None or layout != self._layout or self._part_full():
            self._new_part(ds, layout)
        else:
            self._extend(ds)
        self._last_time = ds[schema.TIME].values[-1]

    def _stored_layout(self) -> tuple[Any, ...] | None:
        try:
            return self.layout(open_part(self._part, lazy=True))  # type: ignore[arg-type]
        except CountersError:
            return None

    def _part_full(self) -> bool:
        return (self.max_part_bytes is not None and self._part is not None
                and directory_bytes(self._part) >= self.max_part_bytes)

    def _new_part(self, ds: xr.Dataset, layout: tuple[Any, ...]) -> None:
        import zarr

        existing = sorted(self.path.glob(PART_GLOB))
        index = int(existing[-1].name[5:10]) + 1 if existing else 0
        part = self.path / _part_name(index)
        values_only = ds[schema.value_names(ds)]
        encoding: dict[str, dict[str, Any]] = {schema.TIME: dict(schema.TIME_ENCODING)}
        for name in schema.value_names(ds):
            shape = ds[name].shape
            encoding[name] = {"chunks": (self.chunk_samples, *shape[1:])}
        encoding[schema.TIME]["chunks"] = (self.chunk_samples,)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                values_only.to_zarr(part, mode="w-", encoding=encoding, consolidated=False,
                                    zarr_format=ZARR_FORMAT)
        except OSError as error:
            raise CountersError(f"{part}: cannot write ({error.strerror or error})") from None
        self._group = zarr.open_group(str(part), mode="r+", zarr_format=ZARR_FORMAT)
        self._part = part
        self._layout = layout
        self._drop_old_parts()

    def _extend(self, ds: xr.Dataset) -> None:
        micros = np.round(schema.time_to_seconds(ds[schema.TIME].values) * 1e6).astype(np.int64)
        try:
            # Values first and time last: a cut-short append leaves time shortest, and reopening
            # trims every array back to the shortest.
            for name in schema.value_names(ds):
                self._group[name].append(np.asarray(ds[name].values, dtype=np.float64), axis=0)
            self._group[schema.TIME].append(micros, axis=0)
        except OSError as error:
            raise CountersError(f"{self._part}: cannot append ({error.strerror or error})"
                                ) from None

    def _drop_old_parts(self) -> None:
        if self.max_parts is None:
            return
        import shutil

        existing = sorted(self.path.glob(PART_GLOB))
        for old in existing[: max(0, len(existing) - self.max_parts)]:
            shutil.rmtree(old)

    def close(self) -> None:
        self._group = None


def write_store(ds: xr.Dataset, path: str | Path, max_part_bytes: int | None = None) -> Path:
    """Write a whole counters dataset (one node per call) as a new store or append to one."""
    nodes: Sequence[Any] = ds[schema.NODE].values
    if len(nodes) != 1:
        raise CountersError(f"{path}: a store holds one node; the dataset has {len(nodes)}")
    writer = StoreWriter(path, max_part_bytes=max_part_bytes)
    writer.append(ds)
    writer.close()
    return Path(path)
