"""Splits and scores for validating interference predictions on measured pairs.

Splits work on the long observation table of :func:`.tables.pair_observations` (``target``,
``other``,
``speed``) and return boolean test masks. A pair's two observations always fall on the same side so
that a test speed is never predicted from its own pair's mirror.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd


def pair_keys(observations: pd.DataFrame) -> np.ndarray:
    """An order-free key per observation naming its pair."""
    return np.array(
        [
            "\x1f".join(sorted((a, b)))
            for a, b in zip(observations["target"], observations["other"], strict=True)
        ]
    )


def random_pair_splits(
    observations: pd.DataFrame, num_splits: int, test_fraction: float = 0.2, seed: int = 0
) -> Iterator[np.ndarray]:
    """``num_splits`` test masks, each holding out a random ``test_fraction`` of the pairs."""
    keys = pair_keys(observations)
    unique = np.unique(keys)
    rng = np.random.default_rng(seed)
    for _ in range(num_splits):
        held_out = rng.choice(
            unique, size=max(1, int(round(test_fraction * len(unique)))), replace=False
        )
        yield np.isin(keys, held_out)


def pair_folds(observations: pd.DataFrame, num_folds: int = 5, seed: int = 0
               ) -> Iterator[np.ndarray]:
    """``num_folds`` test masks partitioning the pairs (k-fold cross-validation by pair): every
    pair is held out exactly once, its observations together."""
    keys = pair_keys(observations)
    unique = np.unique(keys)
    if not 2 <= num_folds <= len(unique):
        raise ValueError(f"num_folds {num_folds}: expected 2 to {len(unique)} (the pairs)")
    fold_of = np.random.default_rng(seed).permutation(len(unique)) % num_folds
    fold = dict(zip(unique, fold_of, strict=True))
    by_observation = np.array([fold[k] for k in keys])
    for i in range(num_folds):
        yield by_observation == i


def leave_one_group_out(
    observations: pd.DataFrame, group_of: Callable[[str], str]
) -> Iterator[tuple[str, np.ndarray]]:
    """For each group (e.g. a job type on every GPU), a mask of every observation involving it.

    Training on the rest leaves the group's jobs with no measured co-location: a cold start.
    """
    target_group = observations["target"].map(group_of).to_numpy()
    other_group = observations["other"].map(group_of).to_numpy()
    for group in sorted(set(target_group) | set(other_group)):
        yield group, (target_group == group) | (other_group == group)


def mean_absolute_error(predicted: np.ndarray, observed: np.ndarray) -> float:
    """Mean of ``|predicted - observed|`` (normalised speed units)."""
    return float(np.mean(np.abs(np.asarray(predicted) - np.asarray(observed))))


def interval_coverage(low: np.ndarray, high: np.ndarray, observed: np.ndarray) -> float:
    """Fraction of observations inside ``[low, high]``."""
    observed = np.asarray(observed)
    return float(np.mean((observed >= low) & (observed <= high)))
