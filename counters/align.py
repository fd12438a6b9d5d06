"""Several nodes' samples on one time grid, correcting clock skew, tolerating late or lost samples.

Nodes sample on their own clocks and their own schedules. :func:`align` first shifts each node's
time stamps by its clock offset (node clock minus reference clock, e.g. from chrony or NTP), then
reads every variable at the grid instants:

* a gauge takes the sample nearest to the grid instant if it lies within ``tolerance_s`` (so a late
  sample is still used when it is not too late), else NaN;
* a counter is interpolated linearly between the finite samples either side, when they are at most
  ``max_gap_s`` apart and the counter did not drop between them (wraps are unwrapped first); this
  keeps ``counter_rate`` on the grid equal to the mean rate over each grid step.

Per-device variables of nodes with different numbers of GPUs are padded with NaN.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from counters import schema
from counters.errors import CountersError


def grid(start_s: float, end_s: float, interval_s: float) -> np.ndarray:
    """Grid instants, s since the epoch: multiples of ``interval_s`` in [start, end]."""
    if interval_s <= 0:
        raise CountersError(f"grid interval must be positive, not {interval_s}")
    first = np.ceil(start_s / interval_s) * interval_s
    count = int(np.floor((end_s - first) / interval_s + 1e-9)) + 1
    return first + interval_s * np.arange(max(count, 0))


def align(
    datasets: Sequence[xr.Dataset],
    interval_s: float,
    clock_offset_s: Mapping[str, float] | None = None,
    tolerance_s: float | None = None,
    max_gap_s: float | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> xr.Dataset:
    """Align counters datasets (any nodes each) onto one grid of step ``interval_s``.

    Args:
        datasets: counters datasets; a node must appear in only one of them.
        interval_s: grid step in seconds.
        clock_offset_s: node -> (node clock - reference clock) in seconds; missing nodes get 0.
        tolerance_s: how far from a grid instant a gauge sample may be (default ``interval_s / 2``).
        max_gap_s: the widest bracket a counter is interpolated over (default ``3 * interval_s``).
        start_s, end_s: grid bounds (default: the span covered by any node after correction).

    Returns:
        a counters dataset with dims ``(time, node[, device])`` on the grid, masks rebuilt.
    """
    tolerance = interval_s / 2 if tolerance_s is None else tolerance_s
    max_gap = 3 * interval_s if max_gap_s is None else max_gap_s
    offsets = dict(clock_offset_s or {})
    per_node: list[xr.Dataset] = []
    for ds in datasets:
        schema.validate(ds, check_monotonic=False)
        for node in ds[schema.NODE].values:
            one = ds.sel({schema.NODE: [node]})
            seconds = schema.time_to_seconds(one[schema.TIME].values) - offsets.get(str(node), 0.0)
            per_node.append(one.assign_coords({schema.TIME: schema.seconds_to_time(seconds)}))
    if not per_node:
        raise CountersError("align: no datasets given")
    names = [str(n) for n in np.concatenate([d[schema.NODE].values for d in per_node])]
    if len(set(names)) != len(names):
        raise CountersError(f"align: a node appears in more than one dataset: {sorted(names)}")
    spans = [schema.time_to_seconds(d[schema.TIME].values) for d in per_node]
    lo = min(s.min() for s in spans if s.size) if start_s is None else start_s
    hi = max(s.max() for s in spans if s.size) if end_s is None else end_s
    instants = grid(lo, hi, interval_s)
    if instants.size == 0:  # samples shorter than one grid step, between two grid instants
        raise CountersError(f"align: no grid instant (a multiple of {interval_s:g} s since the "
                            f"epoch) lies within the samples' {hi - lo:g} s span; expected an "
                            "interval the samples span at least once")
    aligned = [_align_node(d, instants, tolerance, max_gap) for d in per_node]
    out = _stack_nodes(aligned, instants, names)
    shared = {k: v for k, v in per_node[0].attrs.items()
              if k not in out.attrs and all(str(d.attrs.get(k)) == str(v) for d in per_node)}
    out.attrs.update(shared)  # provenance all nodes agree on
    out.attrs.update(interval_s=float(interval_s), aligned_tolerance_s=float(tolerance),
                     aligned_max_gap_s=float(max_gap))
    return out


def _stack_nodes(aligned: Sequence[xr.Dataset], instants: np.ndarray,
                 nodes: Sequence[str]) -> xr.Dataset:
    """One dataset from per-node ones on the same grid, padding variables and GPUs with NaN."""
    n_time, n_node = instants.size, len(aligned)
    n_device = max((d.sizes.get(schema.DEVICE, 0) for d in aligned), default=0)
    names: list[str] = []
    attrs: dict[str, dict] = {}
    for d in aligned:
        for name in schema.value_names(d):
            if name not in attrs:
                names.append(name)
                attrs[name] = dict(d[name].attrs)
    variables: dict[str, np.ndarray] = {}
    for name in names:
        per_device = any(name in d and schema.DEVICE in d[name].dims for d in aligned)
        array = np.full((n_time, n_node, n_device) if per_device else (n_time, n_node), np.nan)
        for j, d in enumerate(aligned):
            if name in d:
                values = d[name].transpose(schema.TIME, schema.NODE, ...).values[:, 0]
                if per_device:
                    array[:, j, : values.shape[1]] = values
                else:
                    array[:, j] = values
        variables[name] = array
    labels: dict[str, np.ndarray] = {}
    for coord in schema.DEVICE_COORDS:
        if any(coord in d.coords for d in aligned):
            table = np.full((n_node, n_device), "", dtype=object)
            for j, d in enumerate(aligned):
                if coord in d.coords:
                    row = np.asarray(d[coord].values).reshape(-1)
                    table[j, : row.size] = row
            labels[coord] = table.astype(str)
    return schema.build(instants, list(nodes), variables,
                        device=range(n_device) if n_device else None,
                        gpu_uuid=labels.get("gpu_uuid"), pci_bus_id=labels.get("pci_bus_id"),
                        variable_attrs=attrs)


def _align_node(ds: xr.Dataset, instants: np.ndarray, tolerance: float,
                max_gap: float) -> xr.Dataset:
    seconds = schema.time_to_seconds(ds[schema.TIME].values)
    variables: dict[str, xr.DataArray] = {}
    for name in schema.value_names(ds):
        var = ds[name].transpose(schema.TIME, ...)
        values = np.asarray(var.values, dtype=np.float64)
        if var.attrs.get("kind") == "counter":
            new = _interpolate_counter(seconds, values, instants, max_gap,
                                       var.attrs.get("wrap_bits"))
        else:
            new = _nearest_gauge(seconds, values, instants, tolerance)
        variables[name] = xr.DataArray(new, dims=var.dims, attrs=var.attrs)
    coords = {k: v for k, v in ds.coords.items() if schema.TIME not in v.dims}
    coords[schema.TIME] = schema.seconds_to_time(instants)
    out = xr.Dataset(variables, coords=coords, attrs=ds.attrs)
    for name in list(variables):
        out[schema.mask_name(name)] = np.isfinite(out[name])
    return out


def _nearest_gauge(seconds: np.ndarray, values: np.ndarray, instants: np.ndarray,
                   tolerance: float) -> np.ndarray:
    out = np.full((instants.size,) + values.shape[1:], np.nan)
    if seconds.size == 0:
        return out
    flat = values.reshape(values.shape[0], -1)
    result = out.reshape(instants.size, -1)
    for column in range(flat.shape[1]):
        finite = np.isfinite(flat[:, column])
        t, v = seconds[finite], flat[finite, column]
        if t.size == 0:
            continue
        right = np.clip(np.searchsorted(t, instants), 0, t.size - 1)
        left = np.clip(right - 1, 0, t.size - 1)
        pick = np.where(np.abs(t[left] - instants) <= np.abs(t[right] - instants), left, right)
        close = np.abs(t[pick] - instants) <= tolerance
        result[:, column] = np.where(close, v[pick], np.nan)
    return out


def _interpolate_counter(seconds: np.ndarray, values: np.ndarray, instants: np.ndarray,
                         max_gap: float, wrap_bits: int | None) -> np.ndarray:
    out = np.full((instants.size,) + values.shape[1:], np.nan)
    flat = values.reshape(values.shape[0], -1)
    result = out.reshape(instants.size, -1)
    for column in range(flat.shape[1]):
        finite = np.isfinite(flat[:, column])
        t, v = seconds[finite], flat[finite, column]
        if t.size < 1:
            continue
        v, broken = _unwrap(v, wrap_bits)
        right = np.searchsorted(t, instants, side="left")
        exact = (right < t.size) & (t[np.clip(right, 0, t.size - 1)] == instants)
        inside = (right > 0) & (right < t.size)
        r = np.clip(right, 1, max(t.size - 1, 1))
        if t.size >= 2:
            left = r - 1
            span = t[r] - t[left]
            ok = inside & (span <= max_gap) & ~broken[r]
            weight = np.where(span > 0, (instants - t[left]) / np.where(span > 0, span, 1), 0.0)
            interpolated = v[left] + weight * (v[r] - v[left])
            column_out = np.where(ok, interpolated, np.nan)
        else:
            column_out = np.full(instants.size, np.nan)
        column_out = np.where(exact, v[np.clip(right, 0, t.size - 1)], column_out)
        if wrap_bits is not None:
            column_out = np.mod(column_out, float(2 ** int(wrap_bits)))
        result[:, column] = column_out
    return out


def _unwrap(v: np.ndarray, wrap_bits: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Add back wrapped ranges; ``broken[i]`` is True where sample i dropped without a wrap."""
    steps = np.diff(v)
    broken = np.zeros(v.shape, dtype=bool)
    if wrap_bits is None:
        broken[1:] = steps < 0
        return v, broken
    modulus = float(2 ** int(wrap_bits))
    wrapped = (steps < 0) & ((steps + modulus) < modulus / 2)
    broken[1:] = (steps < 0) & ~wrapped
    return v + modulus * np.concatenate([[0.0], np.cumsum(wrapped)]), broken
