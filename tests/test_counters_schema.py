"""The counters schema and catalog: build, validate, and the errors bad datasets get."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from counters import schema
from counters.catalog import CATALOG, RESOURCES, get, select
from counters.errors import CountersError

T0 = 1.7e9


def small(n: int = 6) -> xr.Dataset:
    rng = np.random.default_rng(0)
    power = rng.uniform(100, 300, size=(n, 2))
    power[2, 1] = np.nan
    return schema.build(T0 + np.arange(n), "node-a", {
        "gpu_power": power,
        "gpu_energy": np.cumsum(rng.uniform(1, 2, size=(n, 2)), axis=0),
        "cpu_user": np.cumsum(rng.uniform(0, 1, size=n)),
    }, gpu_uuid=["GPU-a", "GPU-b"])


def test_catalog_entries_follow_the_conventions() -> None:
    assert len(CATALOG) > 60
    for counter in CATALOG.values():
        assert counter.units and counter.resource in RESOURCES
        if counter.kind == "counter":
            assert counter.prometheus_name.endswith("_total"), counter.name
        else:
            assert not counter.prometheus_name.endswith("_total"), counter.name
        assert "percent" not in counter.units
    assert get("gpu_energy").units == "J" and get("gpu_energy").wrap_bits == 64
    assert {c.source for c in select(resource="pcie_link")} == {"nvml", "nvml_gpm", "pcie_sysfs"}
    with pytest.raises(CountersError, match="unknown counter 'nope'"):
        get("nope")


def test_build_gives_a_conforming_dataset_with_masks_and_units() -> None:
    ds = small()
    assert schema.problems(ds) == []
    assert ds["gpu_power"].dims == ("time", "node", "device")
    assert ds["cpu_user"].dims == ("time", "node")
    assert ds["gpu_power"].attrs["units"] == "W" and ds["gpu_energy"].attrs["kind"] == "counter"
    assert not bool(ds["gpu_power_valid"][2, 0, 1]) and bool(ds["gpu_power_valid"][1, 0, 1])
    assert ds["gpu_uuid"].values.tolist() == [["GPU-a", "GPU-b"]]
    assert ds["time"].dtype == np.dtype("datetime64[ns]")
    np.testing.assert_allclose(schema.time_to_seconds(ds["time"].values), T0 + np.arange(6))


def test_build_rejects_bad_shapes_and_unknown_variables_without_units() -> None:
    with pytest.raises(CountersError, match="variable 'gpu_power': shape"):
        schema.build(T0 + np.arange(3), "n", {"gpu_power": np.zeros((4, 2))})
    with pytest.raises(CountersError, match="'my_metric': not in the counters catalog"):
        schema.build(T0 + np.arange(3), "n", {"my_metric": np.zeros(3)})
    ds = schema.build(T0 + np.arange(3), "n", {"my_metric": np.zeros(3)},
                      variable_attrs={"my_metric": {"units": "s"}})
    assert schema.problems(ds) == []


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda ds: ds["gpu_power"].attrs.pop("units"),
         "'gpu_power': attribute 'units' is missing"),
        (lambda ds: ds["gpu_power"].attrs.update(units="mW"), "attribute 'units' is 'mW'"),
        (lambda ds: ds.attrs.update(schema="something-else"), "dataset attribute 'schema'"),
        (lambda ds: ds.__setitem__("gpu_power_valid", ds["gpu_power_valid"] | True),
         "mask 'gpu_power_valid' disagrees with the NaNs of 'gpu_power' at time="),
        (lambda ds: ds.__delitem__("cpu_user_valid"), "mask variable 'cpu_user_valid' is missing"),
    ],
)
def test_validate_names_what_is_wrong(damage, message) -> None:  # type: ignore[no-untyped-def]
    ds = small()
    damage(ds)
    with pytest.raises(CountersError, match=message.replace("(", r"\(").replace(")", r"\)")):
        schema.validate(ds, where="store.zarr")


def test_validate_rejects_time_that_is_nat_or_not_increasing() -> None:
    ds = small()
    times = ds["time"].values.copy()
    times[3] = np.datetime64("NaT")
    with pytest.raises(CountersError, match="NaT"):
        schema.validate(ds.assign_coords(time=times))
    times = ds["time"].values.copy()
    times[3] = times[2]
    with pytest.raises(CountersError, match="not strictly increasing at index 3"):
        schema.validate(ds.assign_coords(time=times))


def test_validate_rejects_a_repeated_device_label() -> None:
    ds = small()
    with pytest.raises(CountersError, match="coordinate 'device' repeats a label"):
        schema.validate(ds.assign_coords(device=np.zeros(ds.sizes["device"], dtype=np.int64)))


def test_validate_rejects_a_counter_going_backwards_but_accepts_a_wrap() -> None:
    values = np.array([10.0, 20.0, 15.0, 30.0])
    ds = schema.build(T0 + np.arange(4), "node-a", {"cpu_user": values})
    with pytest.raises(CountersError, match=r"counter 'cpu_user' goes backwards at time=.* "
                                            r"node=node-a: from 20 to 15"):
        schema.validate(ds)
    assert schema.problems(ds, check_monotonic=False) == []
    wrapped = schema.build(T0 + np.arange(4), "n", {"my_bytes": np.array([2**32 - 20, 2**32 - 5,
                                                                            10.0, 40.0])},
                           variable_attrs={"my_bytes": {"units": "byte", "kind": "counter",
                                                        "wrap_bits": 32}})
    assert schema.problems(wrapped) == []
