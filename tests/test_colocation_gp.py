"""The GP co-location model on synthetic pairs with a known law, and the counter-log converter on
real nvidia-smi and DCGM CSV text."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_sched.interference import (
    InterferenceInputError,
    colocation_observations,
    interval_coverage,
    load_gavel_pairs,
    load_gavel_solo_features,
    pair_folds,
)
from bayes_sched.interference.gp import ColocationGP
from bayes_sched.interference.gpu_counters import counter_features, solo_features_from_counters
from tests.colocation_pairs import involving, one_torch_thread, synthetic_pairs


def test_gp_predicts_unseen_jobs_and_covers_speeds_above_one() -> None:
    observations, solo = synthetic_pairs(24, seed=0, offset=0.15, noise=0.03)
    held_out = {"job0", "job1", "job2"}
    test = involving(observations, held_out)
    # One more job, far from every measured one in feature space and never co-located.
    far = pd.concat([solo, pd.DataFrame({"util": [5.0], "mem": [5.0]},
                                        index=pd.Index(["far"], name="job"))])
    model = ColocationGP.fit(observations[~test], far)
    assert model.report.converged and 0.01 < model.report.noise < 0.1
    truth = observations[test]
    prediction = model.predict_speed(list(truth["target"]), list(truth["other"]))
    low, high = prediction.interval(0.9)
    speed = truth["speed"].to_numpy()
    assert np.mean(np.abs(prediction.median - speed)) < 0.05
    inside = (speed >= low) & (speed <= high)
    assert inside.mean() >= 0.8
    faster = speed > 1
    assert faster.sum() >= 5 and inside[faster].mean() >= 0.7
    assert prediction.cold_start[truth["target"].isin(held_out).to_numpy()].all()
    # A pair far from every training input gets a wider interval than a seen-like one.
    near_sd = model.log_speed_moments(["job3"], ["job4"])[1]
    far_sd = model.log_speed_moments(["far"], ["job4"])[1]
    assert far_sd[0] > 2 * near_sd[0]


def test_gp_intervals_on_measured_pairs_are_neither_too_narrow_nor_too_wide() -> None:
    # Gavel's V100 pairs, a quarter of the pairs held out: the 90% intervals must cover most
    # held-out speeds and the 50% ones about half (an overconfident model fails the first, one
    # that only widens its intervals fails the second).
    observations = colocation_observations(load_gavel_pairs())
    on_v100 = observations[observations["target"].str.startswith("v100/")]
    test = next(pair_folds(on_v100, 4, seed=0))
    with one_torch_thread():
        model = ColocationGP.fit(on_v100[~test], load_gavel_solo_features())
    truth = on_v100[test]
    speed = truth["speed"].to_numpy()
    prediction = model.predict_speed(list(truth["target"]), list(truth["other"]))
    assert interval_coverage(*prediction.interval(0.9), speed) >= 0.7
    assert 0.3 <= interval_coverage(*prediction.interval(0.5), speed) <= 0.7
    assert np.mean(np.abs(prediction.median - speed)) < np.mean(np.abs(speed.mean() - speed)) / 2


def test_gp_refuses_unknown_jobs_and_bad_speeds() -> None:
    observations, solo = synthetic_pairs(4, seed=1, offset=0.15, noise=0.03)
    with pytest.raises(InterferenceInputError, match="job9"):
        ColocationGP.fit(pd.concat([observations, pd.DataFrame(
            [{"target": "job9", "other": "job0", "speed": 0.5}])]), solo)
    bad = observations.copy()
    bad.loc[0, "speed"] = 0.0
    with pytest.raises(InterferenceInputError, match="speed"):
        ColocationGP.fit(bad, solo)


NVIDIA_SMI = """timestamp, index, utilization.gpu [%], utilization.memory [%], memory.used [MiB]
2026/12/06 04:00:00.000, 0, 10 %, 5 %, 1024 MiB
2026/12/06 04:00:01.000, 0, 90 %, 40 %, 4096 MiB
2026/12/06 04:00:02.000, 0, 80 %, 30 %, 4096 MiB
"""
DCGM = """GPUTL,MCUTL,FBUSD,SMACT,DRAMA,PCITX,PCIRX
70,20,2048,0.5,0.25,1000000000,500000000
60,10,2048,0.7,0.35,3000000000,500000000
"""


def test_counter_logs_become_a_solo_features_table(tmp_path: Path) -> None:
    smi = tmp_path / "a.csv"
    smi.write_text(NVIDIA_SMI)
    assert counter_features(smi) == pytest.approx(
        {"gpu_util": 0.8, "mem_util": 0.3, "mem_used_gib": 4.0})
    dcgm = tmp_path / "b.csv"
    dcgm.write_text(DCGM)
    features = counter_features(dcgm)
    assert features["pcie_gbytes_per_s"] == pytest.approx(2.5)
    assert features["sm_active"] == pytest.approx(0.6) and features["mem_used_gib"] == 2.0
    other = tmp_path / "c.csv"
    other.write_text(NVIDIA_SMI.replace("10 %", "30 %"))
    table = solo_features_from_counters({"a": smi, "c": other})
    assert list(table.index) == ["a", "c"] and table.loc["c", "gpu_util"] == pytest.approx(0.8)
    with pytest.raises(InterferenceInputError, match="expected the same"):
        solo_features_from_counters({"a": smi, "b": dcgm})
    broken = tmp_path / "d.csv"
    broken.write_text(NVIDIA_SMI.replace("40 %", "[N/A]"))
    with pytest.raises(InterferenceInputError, match=r"row 3, column 'utilization.memory \[%\]'"):
        counter_features(broken)
