"""The censored (Tobit) GP co-location model on synthetic pairs with a known law and noise whose
speeds were recorded capped at 1, as Gavel's are: it must recover the noise the Gaussian GP
underestimates and cover the true speeds above the cap."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pandas as pd
import pytest
import torch

from bayes_sched.interference import InterferenceInputError
from bayes_sched.interference.gp import ColocationGP
from bayes_sched.interference.gp_censored import CensoredColocationGP

NOISE = 0.05


def _capped_pairs(num_jobs: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    # True log speed: a smooth law in both jobs' solo features plus N(0, NOISE^2); light
    # neighbours make about a third of the jobs faster than alone. ``speed`` is what a capped
    # record holds (min(true, 1)), ``true`` what the job ran at.
    rng = np.random.default_rng(seed)
    solo = pd.DataFrame({"util": rng.uniform(0, 1, num_jobs), "mem": rng.uniform(0, 1, num_jobs)},
                        index=pd.Index([f"job{i}" for i in range(num_jobs)], name="job"))
    rows = []
    for a in solo.index:
        for b in solo.index:
            if a != b:
                law = 0.3 - 1.2 * solo.at[b, "util"] * (0.3 + solo.at[a, "mem"])
                true = float(np.exp(law + NOISE * rng.standard_normal()))
                rows.append({"target": a, "other": b, "true": true, "speed": min(true, 1.0)})
    return pd.DataFrame(rows), solo


@pytest.fixture
def one_thread() -> Iterator[None]:
    # Two torch threads on a loaded two-core machine take several times longer per GP fit.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_censored_gp_recovers_the_noise_and_covers_speeds_above_the_cap() -> None:
    pairs, solo = _capped_pairs(16, seed=0)
    assert 0.25 < (pairs["true"] >= 1).mean() < 0.5
    held = pairs["target"].isin({"job0", "job1"}) | pairs["other"].isin({"job0", "job1"})
    train, test = pairs[~held], pairs[held]
    gaussian = ColocationGP.fit(train, solo)
    censored = CensoredColocationGP.fit(train, solo, cap=1.0)
    assert censored.report.converged
    # The noise: within 20% of the truth, and nearer it (in ratio) than the Gaussian fit's,
    # which reads the rows at the cap as exact.
    assert abs(math.log(censored.report.noise / NOISE)) < math.log(1.2)
    assert abs(math.log(censored.report.noise / NOISE)) < abs(
        math.log(gaussian.report.noise / NOISE))
    # Held-out jobs: the censored model predicts what they ran at, above the cap included.
    true = test["true"].to_numpy()
    above = true > 1
    assert above.sum() >= 10
    inside = {}
    for name, model in (("gaussian", gaussian), ("censored", censored)):
        low, high = model.predict_speed(list(test["target"]), list(test["other"])).interval(0.9)
        inside[name] = (true >= low) & (true <= high)
    assert inside["censored"].mean() >= 0.8 and inside["censored"][above].mean() >= 0.8
    assert inside["gaussian"][above].mean() < inside["censored"][above].mean()


def test_censored_gp_refuses_speeds_above_its_cap() -> None:
    pairs, solo = _capped_pairs(4, seed=1)
    with pytest.raises(InterferenceInputError, match="above the cap"):
        CensoredColocationGP.fit(pairs.assign(speed=pairs["true"] * 2.0), solo, cap=1.0)
