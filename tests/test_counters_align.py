"""Aligning several nodes onto one grid: clock skew, late and missing samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import counters.align as align  # the module: ``from counters import align`` may give the function
from counters import rates, schema
from counters.errors import CountersError

T0 = 1_700_000_000.0


def test_skewed_late_and_missing_samples_land_on_the_grid() -> None:
    # Node a: on time, a steady 100 J/s and a gauge equal to the second index.
    a_times = T0 + np.arange(6.0)
    a = schema.build(a_times, "a", {"gpu_energy": (100.0 * np.arange(6.0))[:, None],
                                    "gpu_power": np.arange(6.0)[:, None]})
    # Node b: clock 5 s ahead, sample 2 lost, sample 3 late by 0.3 s, two GPUs.
    b_true = T0 + np.array([0.0, 1.0, 3.3, 4.0, 5.0])
    b_energy = np.stack([50.0 * (b_true - T0), 20.0 * (b_true - T0)], axis=1)
    b = schema.build(b_true + 5.0, "b", {"gpu_energy": b_energy,
                                         "gpu_power": np.stack([b_true - T0] * 2, axis=1)})
    out = align.align([a, b], interval_s=1.0, clock_offset_s={"b": 5.0})
    assert schema.problems(out) == []
    assert out.sizes == {"time": 6, "node": 2, "device": 2}
    np.testing.assert_allclose(schema.time_to_seconds(out["time"].values), T0 + np.arange(6))
    energy_b = out["gpu_energy"].sel(node="b").values
    np.testing.assert_allclose(energy_b[:, 0], 50.0 * np.arange(6), rtol=1e-9)  # interpolated
    power_b = out["gpu_power"].sel(node="b").values[:, 0]
    np.testing.assert_allclose(power_b[[0, 1, 3, 4, 5]], [0.0, 1.0, 3.3, 4.0, 5.0])
    assert np.isnan(power_b[2])  # no gauge sample within 0.5 s of t=2
    assert not bool(out["gpu_power_valid"].sel(node="b").values[2, 0])
    # Node a has one GPU: its second device is padding.
    assert np.isnan(out["gpu_energy"].sel(node="a").values[:, 1]).all()
    grid_rate = rates.counter_rate(out["gpu_energy"]).sel(node="b").values[1:, 0]
    np.testing.assert_allclose(grid_rate, 50.0, rtol=1e-9)


def test_a_counter_is_not_interpolated_across_a_long_gap_or_a_reset() -> None:
    times = T0 + np.array([0.0, 1.0, 6.0, 7.0, 8.0])
    ds = schema.build(times, "a", {"cpu_user": np.array([0.0, 1.0, 6.0, 1.0, 2.0])})
    out = align.align([ds], interval_s=1.0, max_gap_s=2.0)
    values = out["cpu_user"].values[:, 0]
    assert np.isnan(values[2:6]).all()  # 5 s gap
    assert values[7] == 1.0 and values[8] == 2.0
    half = align.align([ds], interval_s=0.5)
    assert np.isnan(half["cpu_user"].values[13, 0])  # between 6.0 and the reset at 7.0


def test_align_rejects_a_node_given_twice_and_a_bad_interval() -> None:
    ds = schema.build(T0 + np.arange(3), "a", {"gpu_power": np.ones((3, 1))})
    with pytest.raises(CountersError, match="more than one dataset"):
        align.align([ds, ds], interval_s=1.0)
    with pytest.raises(CountersError, match="grid interval must be positive"):
        align.align([ds], interval_s=0.0)


def test_nodes_with_different_gpus_and_coordinates_are_padded() -> None:
    a = schema.build(T0 + np.arange(4.0), "a", {"gpu_power": np.ones((4, 1))},
                     gpu_uuid=["GPU-a0"])
    b = schema.build(T0 + np.arange(4.0), "b", {"gpu_power": np.full((4, 2), 2.0)},
                     gpu_uuid=["GPU-b0", "GPU-b1"], pci_bus_id=["0000:18:00.0", "0000:38:00.0"])
    c = schema.build(T0 + np.arange(4.0), "c", {"cpu_user": np.arange(4.0)})
    out = align.align([a, b, c], interval_s=1.0)
    assert schema.problems(out) == []
    assert out["gpu_uuid"].values.tolist() == [["GPU-a0", ""], ["GPU-b0", "GPU-b1"], ["", ""]]
    assert out["pci_bus_id"].values[1].tolist() == ["0000:18:00.0", "0000:38:00.0"]
    np.testing.assert_array_equal(out["gpu_power"].values[0], [[1, np.nan], [2, 2],
                                                               [np.nan, np.nan]])
    np.testing.assert_array_equal(out["cpu_user"].values[:, 2], np.arange(4.0))
    assert np.isnan(out["cpu_user"].values[:, :2]).all()


def test_samples_shorter_than_one_grid_step_are_a_one_line_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bayes_sched.cli import main
    from counters.store import write_store

    # Two samples 0.2 s apart between two whole seconds: no instant of a 1 s grid lies among them.
    seconds = 1_700_000_000.2 + np.array([0.0, 0.2])
    ds = schema.build(seconds, "n1", {"gpu_power": np.array([[100.0], [101.0]])})
    with pytest.raises(CountersError, match="no grid instant"):
        align.align([ds], 1.0)
    store = tmp_path / "short"
    write_store(ds, store)
    status = main(["counters", "align", str(store), "--interval", "1s", "--out",
                   str(tmp_path / "a.nc")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and "interval" in err[0], err
    assert not (tmp_path / "a.nc").exists()
