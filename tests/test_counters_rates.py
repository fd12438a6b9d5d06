"""Rates from counters: wraps, resets, gaps, units."""

from __future__ import annotations

import numpy as np
import pytest

from counters import rates, schema
from counters.errors import CountersError

T0 = 1.7e9


def counter_ds(values: np.ndarray, times: np.ndarray | None = None, wrap_bits: int | None = 32):
    times = T0 + np.arange(len(values)) if times is None else times
    attrs = {"units": "byte", "kind": "counter"}
    if wrap_bits is not None:
        attrs["wrap_bits"] = wrap_bits
    return schema.build(times, "n", {"my_bytes": values}, variable_attrs={"my_bytes": attrs})


def test_rate_of_a_steady_counter_is_its_slope() -> None:
    ds = counter_ds(np.array([0.0, 100.0, 200.0, 350.0]), times=T0 + np.array([0, 1, 2, 3.5]))
    rate = rates.counter_rate(ds["my_bytes"])
    np.testing.assert_allclose(rate.values[:, 0], [np.nan, 100.0, 100.0, 100.0])
    assert rate.attrs["units"] == "byte s-1" and rate.attrs["kind"] == "gauge"
    assert rate.name == "my_bytes_rate"


def test_a_32_bit_wrap_counts_the_bytes_across_the_wrap() -> None:
    top = 2.0**32
    ds = counter_ds(np.array([top - 300, top - 100, 100.0, 300.0]))
    rate = rates.counter_rate(ds["my_bytes"])
    np.testing.assert_allclose(rate.values[1:, 0], [200.0, 200.0, 200.0])
    assert rate.attrs["resets"] == 0


def test_a_reset_gives_nan_or_restarts_from_zero() -> None:
    ds = counter_ds(np.array([1000.0, 2000.0, 50.0, 150.0]))
    nan_rate = rates.counter_rate(ds["my_bytes"], on_reset="nan")
    np.testing.assert_allclose(nan_rate.values[:, 0], [np.nan, 1000.0, np.nan, 100.0])
    assert nan_rate.attrs["resets"] == 1
    restarted = rates.counter_rate(ds["my_bytes"], on_reset="restart")
    np.testing.assert_allclose(restarted.values[:, 0], [np.nan, 1000.0, 50.0, 100.0])
    with pytest.raises(CountersError, match="on_reset"):
        rates.counter_rate(ds["my_bytes"], on_reset="zero")  # type: ignore[arg-type]


def test_a_missing_sample_widens_the_interval_and_max_gap_cuts_it() -> None:
    ds = counter_ds(np.array([0.0, 10.0, np.nan, 50.0]), wrap_bits=None)
    rate = rates.counter_rate(ds["my_bytes"])
    np.testing.assert_allclose(rate.values[:, 0], [np.nan, 10.0, np.nan, 20.0])
    gapped = rates.counter_rate(ds["my_bytes"], max_gap_s=1.5)
    assert np.isnan(gapped.values[3, 0])


def test_rates_of_a_dataset_convert_counters_keep_gauges_and_validate() -> None:
    ds = schema.build(T0 + np.arange(4), "n", {
        "gpu_energy": np.array([[0.0, 10.0], [300.0, 20.0], [600.0, 30.0], [900.0, 40.0]]),
        "gpu_power": np.full((4, 2), 300.0),
        "cpu_user": np.array([0.0, 0.5, 1.0, 1.5]),
    })
    out = rates.rates(ds)
    assert set(schema.value_names(out)) == {"gpu_energy_rate", "gpu_power", "cpu_user_rate"}
    assert out["gpu_energy_rate"].attrs["units"] == "W"
    assert out["cpu_user_rate"].attrs["units"] == "1"
    np.testing.assert_allclose(out["gpu_energy_rate"].values[1:, 0, 0], 300.0)
    np.testing.assert_allclose(out["cpu_user_rate"].values[1:, 0], 0.5)
    assert out["gpu_energy_rate"].dims == ("time", "node", "device")
    assert schema.problems(out) == []
