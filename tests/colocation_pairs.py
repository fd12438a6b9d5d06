"""Shared set-up of the co-location GP tests: synthetic pairs with a known law, held-out jobs,
and torch on one thread."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pandas as pd
import torch


def synthetic_pairs(num_jobs: int, seed: int, offset: float, noise: float
                    ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every ordered pair of ``num_jobs`` jobs (``target``, ``other``, ``speed``) and their solo
    features (``util``, ``mem`` uniform on [0, 1], indexed by ``job``). A job's log speed next to
    another falls with the other's demand times its own sensitivity,
    ``offset - 1.2 util(other) (0.3 + mem(target))``, plus ``N(0, noise^2)``; with a positive
    ``offset`` light neighbours make some jobs faster than alone. ``true`` repeats ``speed``
    (a test that caps ``speed`` keeps what the job ran at there)."""
    rng = np.random.default_rng(seed)
    solo = pd.DataFrame({"util": rng.uniform(0, 1, num_jobs), "mem": rng.uniform(0, 1, num_jobs)},
                        index=pd.Index([f"job{i}" for i in range(num_jobs)], name="job"))
    rows = []
    for a in solo.index:
        for b in solo.index:
            if a != b:
                law = offset - 1.2 * solo.at[b, "util"] * (0.3 + solo.at[a, "mem"])
                speed = float(np.exp(law + noise * rng.standard_normal()))
                rows.append({"target": a, "other": b, "true": speed, "speed": speed})
    return pd.DataFrame(rows), solo


def involving(pairs: pd.DataFrame, jobs: set[str]) -> pd.Series:
    """Mask of the pairs with a job of ``jobs`` on either side (held out: a cold start)."""
    return pairs["target"].isin(jobs) | pairs["other"].isin(jobs)


@contextmanager
def one_torch_thread() -> Iterator[None]:
    """Torch on one thread inside: two threads on a loaded two-core machine take several times
    longer per GP fit."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
