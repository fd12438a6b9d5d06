"""Rates from cumulative counters, with wrap-around and reset handling.

A counter's rate at sample ``t`` is the increase since the previous *finite* sample divided by the
time between them, so a missing sample widens the interval instead of losing two rates. A drop is a
wrap when adding ``2**wrap_bits`` makes it a small increase (less than half the range); any other
drop is a reset (driver reload, reboot), which gives NaN (``on_reset="nan"``) or assumes the counter
restarted from zero (``on_reset="restart"``, as Prometheus' ``rate()`` does).

Values are float64, so a counter above ``2**53`` keeps only its top 53 bits: wraps of 64-bit
counters are recognised, but the bytes counted across the wrap are approximate.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import xarray as xr

from counters import schema
from counters.errors import CountersError

OnReset = Literal["nan", "restart"]
RATE_SUFFIX = "_rate"


def rate_units(units: str) -> str:
    """Units of the rate of a counter in ``units``: ``"J"`` -> ``"W"``, ``"s"`` -> ``"1"``."""
    return {"s": "1", "1": "s-1", "J": "W"}.get(units, f"{units} s-1")


def counter_rate(
    counter: xr.DataArray,
    wrap_bits: int | None = None,
    on_reset: OnReset = "nan",
    max_gap_s: float | None = None,
) -> xr.DataArray:
    """Per-second rate of a cumulative counter along ``time``.

    Args:
        counter: values with a ``time`` dimension (``datetime64``), any other dims; NaN = missing.
        wrap_bits: the counter wraps at ``2**wrap_bits``; default ``counter.attrs["wrap_bits"]``.
        on_reset: what a drop that is not a wrap gives, see the module docstring.
        max_gap_s: no rate across a gap between finite samples longer than this (None: any gap).

    Returns:
        same shape and dims; the value at ``t`` is the mean rate over ``(t_prev, t]``; NaN at the
        first sample, where ``counter`` is NaN, and on resets with ``on_reset="nan"``. ``units`` is
        :func:`rate_units` of the input's; ``attrs["resets"]`` counts the resets seen.
    """
    if schema.TIME not in counter.dims:
        raise CountersError(f"counter '{counter.name}': no '{schema.TIME}' dimension")
    if on_reset not in ("nan", "restart"):
        raise CountersError(f"on_reset must be 'nan' or 'restart', not {on_reset!r}")
    bits = wrap_bits if wrap_bits is not None else counter.attrs.get("wrap_bits")
    ordered = counter.transpose(schema.TIME, ...)
    values = np.asarray(ordered.values, dtype=np.float64)
    seconds = schema.time_to_seconds(ordered[schema.TIME].values)
    shape = (len(seconds),) + (1,) * (values.ndim - 1)
    times = np.broadcast_to(seconds.reshape(shape), values.shape)

    previous_value, previous_time = _previous_finite(values, times)
    current = values[1:]
    with np.errstate(invalid="ignore"):
        delta = current - previous_value
        elapsed = times[1:] - previous_time
        dropped = delta < 0
        wrapped = np.zeros_like(dropped)
        if bits is not None:
            modulus = float(2 ** int(bits))
            wrapped = dropped & ((delta + modulus) < modulus / 2)
            delta = np.where(wrapped, delta + modulus, delta)
        reset = dropped & ~wrapped
        delta = np.where(reset, current if on_reset == "restart" else np.nan, delta)
        rate = delta / elapsed
        if max_gap_s is not None:
            rate = np.where(elapsed > max_gap_s, np.nan, rate)
    rate = np.where(np.isfinite(rate), rate, np.nan)
    out_values = np.concatenate([np.full((1,) + values.shape[1:], np.nan), rate], axis=0)
    attrs = {k: v for k, v in counter.attrs.items() if k not in ("wrap_bits", "window_s")}
    attrs.update(
        units=rate_units(str(counter.attrs.get("units", "1"))),
        long_name=f"rate of {counter.attrs.get('long_name', counter.name)}",
        kind="gauge",
        resets=int(np.count_nonzero(reset)),
    )
    result = ordered.copy(data=out_values)
    result.attrs = attrs
    result.name = f"{counter.name}{RATE_SUFFIX}" if counter.name is not None else None
    return result.transpose(*counter.dims)


def _previous_finite(values: np.ndarray, times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each t >= 1, the last finite value before t and its time (NaN where none)."""
    last_value = np.full(values.shape[1:], np.nan)
    last_time = np.full(values.shape[1:], np.nan)
    previous_value = np.empty((values.shape[0] - 1,) + values.shape[1:])
    previous_time = np.empty_like(previous_value)
    for t in range(1, values.shape[0]):
        finite = np.isfinite(values[t - 1])
        last_value = np.where(finite, values[t - 1], last_value)
        last_time = np.where(finite, times[t - 1], last_time)
        previous_value[t - 1] = last_value
        previous_time[t - 1] = last_time
    return previous_value, previous_time


def rates(ds: xr.Dataset, on_reset: OnReset = "nan", max_gap_s: float | None = None) -> xr.Dataset:
    """A counters dataset with every ``counter`` variable replaced by its ``<name>_rate`` gauge.

    Gauges are kept as they are; masks are rebuilt; the result passes :func:`schema.validate`.
    """
    out = xr.Dataset(coords=ds.coords, attrs=dict(ds.attrs))
    for name in schema.value_names(ds):
        var = ds[name]
        if var.attrs.get("kind") == "counter":
            rate = counter_rate(var, on_reset=on_reset, max_gap_s=max_gap_s)
            out[str(rate.name)] = rate
            out[schema.mask_name(str(rate.name))] = np.isfinite(rate)
        else:
            out[name] = var
            out[schema.mask_name(name)] = ds[schema.mask_name(name)]
    return out
