"""Ground-truth physics: interpolation of the shipped profiles and gradient statistics."""

from __future__ import annotations

import csv

import numpy as np

from bayes_sched.sim.physics import get_application
from perfmodel.datasets import pollux_model_dir


def _rows(model: str, name: str) -> list[dict[str, str]]:
    with (pollux_model_dir(model) / name).open() as handle:
        return list(csv.DictReader(handle))


def test_measured_placement_reproduces_the_csv_and_interpolates_between() -> None:
    app = get_application("cifar10")
    rows = [r for r in _rows("cifar10", "placements.csv") if r["placement"] == "22"]
    rows.sort(key=lambda r: int(r["local_bsz"]))
    lo, hi = rows[0], rows[1]
    step, sync = app.step_time((2, 2), int(lo["local_bsz"]))
    assert np.isclose(step, float(lo["step_time"])) and np.isclose(sync, float(lo["sync_time"]))
    mid = (int(lo["local_bsz"]) + int(hi["local_bsz"])) // 2
    step_mid, _ = app.step_time((2, 2), mid)
    assert min(float(lo["step_time"]), float(hi["step_time"])) <= step_mid
    assert step_mid <= max(float(lo["step_time"]), float(hi["step_time"]))


def test_placement_order_is_rotation_invariant_and_unmeasured_ones_interpolate() -> None:
    app = get_application("cifar10")
    assert app.step_time((1, 3), 64) == app.step_time((3, 1), 64)
    # 13 nodes x 4 GPUs was not measured as a placement: (nodes, replicas, m) interpolation.
    step, sync = app.step_time((4,) * 13, 64)
    assert np.isfinite(step) and 0 < sync < step
    # Distributed steps synchronise longer than a single GPU's.
    assert sync > app.step_time((1,), 64)[1]


def test_grad_stats_match_the_trace_at_a_measured_batch_and_interpolate() -> None:
    app = get_application("cifar10")
    row = _rows("cifar10", "validation-256.csv")[3]
    sqr, var = app.grad_stats(256, 3)
    assert np.isclose(sqr, float(row["grad_sqr"])) and np.isclose(var, float(row["grad_var"]))
    lo, hi = app.grad_stats(256, 3), app.grad_stats(512, 3)
    mid = app.grad_stats(384, 3)
    assert np.isclose(mid[0], (lo[0] + hi[0]) / 2) and np.isclose(mid[1], (lo[1] + hi[1]) / 2)
    # Gain per step grows with the batch but less than linearly (statistical efficiency <= 1).
    assert 1.0 <= app.gain(1024, 3) <= 1024 / 128


def test_epochs_and_targets() -> None:
    for name, epochs in {"bert": 2, "cifar10": 100, "imagenet": 90, "yolov3": 50}.items():
        app = get_application(name)
        assert app.max_epochs == epochs
        ends = app.epoch_end_progress
        assert np.all(np.diff(ends) > 0) and app.target_progress == ends[-1]
    assert get_application("yolov3").limits.max_local_bsz == 8


def test_standalone_runtime_shrinks_with_gpus() -> None:
    app = get_application("cifar10")
    assert app.standalone_runtime(4, 512) < app.standalone_runtime(1, 512)
