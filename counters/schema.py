"""The counters dataset schema: the one definition every producer and consumer of counters follows.

A *counters dataset* is an :class:`xarray.Dataset` laid out as follows.

Dimensions
    ``time``   sample instants, strictly increasing; ``datetime64[ns]`` coordinate, UTC (naive).
    ``node``   host names; coordinate of strings.
    ``device`` GPU index on its node (0, 1, ...); coordinate of ``int64``. Only present when some
               variable is per device. Optional coordinates along (node, device): ``gpu_uuid`` and
               ``pci_bus_id`` (strings, empty where unknown).

Data variables
    One ``float64`` variable per counter, named as in :mod:`counters.catalog`, with dims
    ``(time, node)`` or ``(time, node, device)`` (``Counter.per_device``). Values are in the catalog
    units (base units: byte, s, W, J, Hz, fractions as ``"1"``). A sample that was not taken (source
    unavailable, GPU lost, late sample not aligned) is ``NaN`` -- never zero. Counters (``kind ==
    "counter"``) hold the raw cumulative value; turn them into rates with
    :func:`counters.rates.counter_rate`.

    Each value variable ``X`` has a companion mask ``X_valid`` (``bool``, same dims), ``True``
    exactly where ``X`` is finite: pass it straight on as an observation mask.

    Variables outside the catalog (derived rates, for instance) are allowed when they follow the
    same rules: allowed dims, float dtype, a ``units`` attribute and a mask.

Variable attributes (required)
    ``units`` (CF/UDUNITS string), ``long_name``, ``kind`` (``gauge``/``counter``), ``source``,
    ``resource``; optionally ``window_s`` and ``wrap_bits``. For catalog variables they must equal
    :meth:`counters.catalog.Counter.attrs`.

Dataset attributes (provenance)
    ``schema = "bayes-sched-counters"`` and ``schema_version = 1`` are required; producers add
    ``interval_s`` (nominal sampling interval, s), ``created`` (ISO 8601 UTC), ``producer`` and
    ``unavailable`` (one line per counter that could not be read, with the reason).

On disk, time is encoded explicitly as ``int64`` microseconds since 1970-01-01 (see
:data:`TIME_ENCODING`): letting xarray pick units per append can decode nanosecond units to NaT.

Use :func:`build` to make a conforming dataset from arrays and :func:`validate` to check one::

    ds = schema.build(seconds, "node-1", {"gpu_power": watts,      # (T, D) array
                                          "cpu_user": cpu_seconds})  # (T,) array
    schema.validate(ds)                    # raises CountersError naming every problem
    observed = ds["gpu_power"].fillna(0)   # with ds["gpu_power_valid"] as the observation mask
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import xarray as xr

from counters.catalog import CATALOG, Counter
from counters.errors import CountersError
from counters.names import DEVICE, NODE, SCHEMA_NAME, SCHEMA_VERSION, TIME, whole_microseconds

MASK_SUFFIX = "_valid"
REQUIRED_VARIABLE_ATTRS: tuple[str, ...] = ("units", "long_name", "kind", "source", "resource")
REQUIRED_DATASET_ATTRS: tuple[str, ...] = ("schema", "schema_version")
ALLOWED_DIMS: tuple[tuple[str, ...], ...] = ((TIME, NODE), (TIME, NODE, DEVICE))
DEVICE_COORDS: tuple[str, ...] = ("gpu_uuid", "pci_bus_id")
#: How ``time`` is written to disk: explicit units so every append uses the same encoding.
TIME_ENCODING: dict[str, Any] = {
    "units": "microseconds since 1970-01-01",
    "calendar": "proleptic_gregorian",
    "dtype": "int64",
}


def mask_name(name: str) -> str:
    """The name of the mask variable of value variable ``name``."""
    return f"{name}{MASK_SUFFIX}"


def is_mask(name: str) -> bool:
    return name.endswith(MASK_SUFFIX)


def value_names(ds: xr.Dataset) -> list[str]:
    """Names of the value (non-mask) variables of ``ds``, in dataset order."""
    return [str(n) for n in ds.data_vars if not is_mask(str(n))]


def seconds_to_time(seconds: np.ndarray | Sequence[float]) -> np.ndarray:
    """Float seconds since the Unix epoch -> ``datetime64[ns]`` (microsecond precision kept)."""
    micros = whole_microseconds(seconds).astype(np.int64)
    return micros.astype("datetime64[us]").astype("datetime64[ns]")


def time_to_seconds(time: np.ndarray | xr.DataArray) -> np.ndarray:
    """``datetime64`` -> float seconds since the Unix epoch, shape unchanged."""
    values = np.asarray(time).astype("datetime64[ns]").astype(np.int64)
    return values.astype(np.float64) / 1e9


def build(
    time: np.ndarray | Sequence[float],
    node: str | Sequence[str],
    variables: Mapping[str, np.ndarray],
    device: Sequence[int] | None = None,
    gpu_uuid: Sequence[str] | np.ndarray | None = None,
    pci_bus_id: Sequence[str] | np.ndarray | None = None,
    attrs: Mapping[str, Any] | None = None,
    variable_attrs: Mapping[str, Mapping[str, Any]] | None = None,
) -> xr.Dataset:
    """Make a counters dataset from plain arrays.

    Args:
        time: ``(T,)`` float seconds since the epoch or ``datetime64``; strictly increasing.
        node: one host name (arrays then have no node axis) or ``(N,)`` names.
        variables: name -> array of shape ``(T,)``/``(T, D)`` for one node or
            ``(T, N)``/``(T, N, D)`` for several; catalog variables get their attributes from the
            catalog, others need
            ``variable_attrs[name]`` with at least ``units``. Non-finite entries become NaN.
        device: ``(D,)`` GPU indices; defaults to ``range(D)`` when a per-device variable is given.
        gpu_uuid, pci_bus_id: ``(D,)`` for one node or ``(N, D)`` strings.
        attrs: extra dataset attributes (provenance).
    """
    single = isinstance(node, str)
    nodes = [node] if isinstance(node, str) else [str(n) for n in node]
    time_values = np.asarray(time)
    if not np.issubdtype(time_values.dtype, np.datetime64):
        time_values = seconds_to_time(time_values)
    time_values = time_values.astype("datetime64[ns]")
    n_time = time_values.shape[0]
    data_vars: dict[str, Any] = {}
    n_device: int | None = len(device) if device is not None else None
    for name, array in variables.items():
        values = np.asarray(array, dtype=np.float64)
        if single:
            values = values[:, None, ...] if values.ndim >= 1 else values
        if values.ndim not in (2, 3) or values.shape[0] != n_time or values.shape[1] != len(nodes):
            raise CountersError(
                f"variable '{name}': shape {np.shape(array)} does not match "
                f"{n_time} times x {len(nodes)} node(s) [x devices]"
            )
        if values.ndim == 3:
            if n_device is None:
                n_device = values.shape[2]
            elif values.shape[2] != n_device:
                raise CountersError(
                    f"variable '{name}': {values.shape[2]} devices, expected {n_device}"
                )
        values = np.where(np.isfinite(values), values, np.nan)
        dims = (TIME, NODE) if values.ndim == 2 else (TIME, NODE, DEVICE)
        data_vars[name] = (dims, values, _variable_attrs(name, variable_attrs))
        data_vars[mask_name(name)] = (dims, np.isfinite(values))
    coords: dict[str, Any] = {TIME: time_values, NODE: np.asarray(nodes, dtype=str)}
    if n_device is not None:
        coords[DEVICE] = np.asarray(device if device is not None else range(n_device),
                                    dtype=np.int64)
        for coord_name, given in (("gpu_uuid", gpu_uuid), ("pci_bus_id", pci_bus_id)):
            if given is not None:
                labels = np.asarray(given, dtype=str)
                labels = labels[None, :] if single else labels
                if labels.shape != (len(nodes), n_device):
                    raise CountersError(f"coordinate '{coord_name}': shape {labels.shape}, "
                                        f"expected {(len(nodes), n_device)}")
                coords[coord_name] = ((NODE, DEVICE), labels)
    ds = xr.Dataset(data_vars, coords=coords)
    ds.attrs.update({"schema": SCHEMA_NAME, "schema_version": SCHEMA_VERSION})
    ds.attrs.update(dict(attrs or {}))
    return ds


def _variable_attrs(name: str, overrides: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    if name in CATALOG:
        return CATALOG[name].attrs()
    given = dict((overrides or {}).get(name, {}))
    if "units" not in given:
        raise CountersError(f"variable '{name}': not in the counters catalog and no 'units' given")
    given.setdefault("long_name", name)
    given.setdefault("kind", "gauge")
    given.setdefault("source", "derived")
    given.setdefault("resource", "unknown")
    return given


def problems(ds: xr.Dataset, check_monotonic: bool = True, check_values: bool = True) -> list[str]:
    """Every way ``ds`` breaks the schema, one short sentence each (empty when it conforms).

    ``check_values=False`` checks structure only (dims, dtypes, attrs) and reads no data, which
    keeps it cheap on lazily opened stores; ``check_monotonic`` rejects counters going backwards.
    """
    found: list[str] = []
    for key in REQUIRED_DATASET_ATTRS:
        if key not in ds.attrs:
            found.append(f"dataset attribute '{key}' is missing")
    if ds.attrs.get("schema", SCHEMA_NAME) != SCHEMA_NAME:
        found.append(f"dataset attribute 'schema' is {ds.attrs['schema']!r}, expected "
                     f"{SCHEMA_NAME!r}")
    version = ds.attrs.get("schema_version", SCHEMA_VERSION)
    if int(np.asarray(version)) != SCHEMA_VERSION:
        found.append(f"schema_version {version} is not supported (expected {SCHEMA_VERSION})")
    for dim in (TIME, NODE):
        if dim not in ds.dims:
            found.append(f"dimension '{dim}' is missing")
        elif dim not in ds.coords:
            found.append(f"dimension '{dim}' has no coordinate")
    if TIME in ds.coords:
        times = ds[TIME].values
        if not np.issubdtype(times.dtype, np.datetime64):
            found.append(f"coordinate 'time' has dtype {times.dtype}, expected datetime64")
        elif np.isnat(times).any():  # e.g. nanosecond units decoded past int64
            found.append("coordinate 'time' holds NaT (not-a-time) values")
        elif times.size > 1 and not (np.diff(times.astype(np.int64)) > 0).all():
            first = int(np.argmax(np.diff(times.astype(np.int64)) <= 0)) + 1
            found.append(f"coordinate 'time' is not strictly increasing at index {first} "
                         f"({times[first]})")
    for dim in (NODE, DEVICE):  # a repeated label makes selecting by it ambiguous
        if dim in ds.coords and ds.indexes.get(dim) is not None and \
                not ds.indexes[dim].is_unique:
            found.append(f"coordinate '{dim}' repeats a label")
    names = value_names(ds)
    if not names:
        found.append("no data variables")
    for name in names:
        found.extend(_variable_problems(ds, name, check_values))
    for variable in ds.data_vars:
        if is_mask(str(variable)) and str(variable)[: -len(MASK_SUFFIX)] not in ds.data_vars:
            found.append(f"mask '{variable}' has no value variable")
    if check_values and check_monotonic and not found:
        found.extend(backward_steps(ds))
    return found


def _variable_problems(ds: xr.Dataset, name: str, check_values: bool) -> list[str]:
    var = ds[name]
    found: list[str] = []
    if tuple(var.dims) not in ALLOWED_DIMS:
        found.append(f"variable '{name}': dims {tuple(var.dims)}, expected one of "
                     f"{', '.join(str(d) for d in ALLOWED_DIMS)}")
    if not np.issubdtype(var.dtype, np.floating):
        found.append(f"variable '{name}': dtype {var.dtype}, expected a float type")
    for key in REQUIRED_VARIABLE_ATTRS:
        if key not in var.attrs:
            found.append(f"variable '{name}': attribute '{key}' is missing")
    counter: Counter | None = CATALOG.get(name)
    if counter is not None:
        for key, expected in counter.attrs().items():
            if key in var.attrs and var.attrs[key] != expected:
                found.append(f"variable '{name}': attribute '{key}' is {var.attrs[key]!r}, "
                             f"expected {expected!r}")
        expected_dims = (TIME, NODE, DEVICE) if counter.per_device else (TIME, NODE)
        if tuple(var.dims) in ALLOWED_DIMS and tuple(var.dims) != expected_dims:
            found.append(f"variable '{name}': dims {tuple(var.dims)}, expected {expected_dims}")
    mask = mask_name(name)
    if mask not in ds.data_vars:
        found.append(f"variable '{name}': mask variable '{mask}' is missing")
    elif ds[mask].dtype != bool:
        found.append(f"mask '{mask}': dtype {ds[mask].dtype}, expected bool")
    elif ds[mask].dims != var.dims:
        found.append(f"mask '{mask}': dims {ds[mask].dims} differ from '{name}' {var.dims}")
    elif check_values and not found and np.issubdtype(var.dtype, np.floating):
        finite = np.isfinite(var.values)
        disagree = finite != ds[mask].values
        if disagree.any():
            index = [int(i) for i in np.unravel_index(int(np.argmax(disagree)), disagree.shape)]
            found.append(f"mask '{mask}' disagrees with the NaNs of '{name}' at "
                         f"{_where(ds, var.dims, index)}")
        if (np.isinf(var.values)).any():
            found.append(f"variable '{name}': holds infinite values")
    return found


def _where(ds: xr.Dataset, dims: Sequence[Any], index: Sequence[int]) -> str:
    parts = []
    for dim, i in zip(dims, index, strict=True):
        label = ds[dim].values[i] if dim in ds.coords else i
        parts.append(f"{dim}={label}")
    return " ".join(parts)


def backward_steps(ds: xr.Dataset) -> list[str]:
    """Counters that go backwards by more than a plausible wrap: one problem per variable."""
    found: list[str] = []
    for name in value_names(ds):
        var = ds[name]
        if var.attrs.get("kind") != "counter" or TIME not in var.dims or var.sizes[TIME] < 2:
            continue
        values = var.transpose(TIME, ...).values
        previous = _forward_fill(values)[:-1]
        current = values[1:]
        with np.errstate(invalid="ignore"):
            steps = np.where(np.isfinite(current) & np.isfinite(previous), current - previous, 0.0)
        wrap_bits = var.attrs.get("wrap_bits")
        backwards = steps < 0
        if wrap_bits is not None:
            # A wrap looks like a drop of nearly the full range; a smaller drop is a reset.
            modulus = float(2 ** int(wrap_bits))
            backwards &= (steps + modulus) > modulus / 2
        if backwards.any():
            index = tuple(int(i) for i in np.unravel_index(int(np.argmax(backwards)),
                                                           backwards.shape))
            dims = var.transpose(TIME, ...).dims
            where = _where(ds, dims, (index[0] + 1, *index[1:]))
            found.append(f"counter '{name}' goes backwards at {where}: from "
                         f"{previous[index]:.6g} to {current[index]:.6g}")
    return found


def _forward_fill(values: np.ndarray) -> np.ndarray:
    out = values.copy()
    for t in range(1, out.shape[0]):
        out[t] = np.where(np.isfinite(out[t]), out[t], out[t - 1])
    return out


def validate(ds: xr.Dataset, where: str = "dataset", check_monotonic: bool = True) -> xr.Dataset:
    """Return ``ds`` if it conforms to the schema, else raise :class:`CountersError`.

    The error is one line: ``WHERE: N problem(s): first; second; ...`` (at most five listed).
    ``check_monotonic`` also rejects counters that go backwards other than by wrapping around.
    """
    found = problems(ds, check_monotonic=check_monotonic)
    if found:
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        raise CountersError(f"{where}: {len(found)} schema problem(s): {shown}")
    return ds
