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


def interval_coverage(low: np.ndarray, high: np.ndarray, observed: np.ndarray,
                      cap: float | None = None, below_cap: np.ndarray | None = None,
                      level: float | None = None) -> float:
    """Fraction of observations inside ``[low, high]``, each ``(N,)``; with ``cap``, the mean of
    :func:`coverage_credits` (records at ``cap`` censored: "at least ``cap``")."""
    return float(np.mean(coverage_credits(low, high, observed, cap, below_cap, level)))


def coverage_credits(low: np.ndarray, high: np.ndarray, observed: np.ndarray,
                     cap: float | None = None, below_cap: np.ndarray | None = None,
                     level: float | None = None) -> np.ndarray:
    """Per observation, whether it lies inside ``[low, high]`` (1 or 0), ``(N,)``.

    With ``cap`` (a record at or above ``cap`` is censored: the quantity was at least ``cap``, its
    value unknown), ``below_cap`` ``(N,)`` (each prediction's probability that the uncensored
    quantity is below ``cap``, ``F(cap)``) and ``level`` (``[low, high]`` is the central
    ``level`` interval of the uncensored quantity), a censored record's credit is the
    probability that its uncensored value lies inside the interval given what was recorded:
    ``P(low <= Y <= high | Y >= cap) = max(0, (1 - t) - max(F(cap), t)) / (1 - F(cap))`` with
    ``t = (1 - level) / 2``; 0 where the prediction puts no mass at or above ``cap``. This is the
    randomised probability integral transform's coverage for a censored value (the record fixes
    ``F(Y)`` only to ``[F(cap), 1]``; drawn uniformly there it lands in ``[t, 1 - t]`` with that
    probability). Why not "covered where ``high >= cap``": under a calibrated model that rule's
    expected coverage of a censored record is ``P(Y >= low | Y >= cap)``, between ``level`` and
    ``1 - t``, so it favours wide upper tails; the credit's expectation over the records of a
    calibrated model is ``level`` exactly (uncensored rows contribute
    ``P(Y in [low, high], Y < cap)``, censored ones ``P(Y in [low, high], Y >= cap)``). On a
    subset chosen by its outcome (the records at ``cap``) no rule makes a calibrated model's
    coverage ``level``: its credits are near ``level`` only where it predicted ``Y >= cap``
    with high probability.
    """
    low, high, observed = (np.asarray(v, dtype=np.float64) for v in (low, high, observed))
    inside = ((observed >= low) & (observed <= high)).astype(np.float64)
    if cap is None:
        return inside
    if below_cap is None or level is None:
        raise ValueError("cap: expected below_cap and level with it")
    joint, above = _covered_above_cap(below_cap, level)
    credit = joint / np.where(above > 0, above, 1.0)
    return np.where(observed >= cap, np.where(above > 0, credit, 0.0), inside)


def _covered_above_cap(below_cap: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Per prediction, ``P(Y in the central level interval, Y >= cap)`` and ``P(Y >= cap)``
    under the prediction itself, from ``below_cap`` ``(N,)`` (``F(cap)``)."""
    tail = (1.0 - level) / 2.0
    below = np.clip(np.asarray(below_cap, dtype=np.float64), 0.0, 1.0)
    return np.maximum(0.0, (1.0 - tail) - np.maximum(below, tail)), 1.0 - below


def expected_censored_coverage(below_cap: np.ndarray, level: float) -> float:
    """The coverage a model expects of itself on the records that reach the cap: over all its
    predictions ``(N,)`` (``below_cap``: each one's ``F(cap)``), the expected number of
    records at the cap whose uncensored value its central ``level`` interval holds, over the
    expected number at the cap: ``sum P(Y in interval, Y >= cap) / sum P(Y >= cap)``, what
    :func:`coverage_credits` averages to over the censored records when the model is
    calibrated. It is near ``level`` only where the rows that reach the cap were predicted to
    reach it with high probability; a calibrated model whose predictions mostly lie below the
    cap expects far less. So a realised coverage of the censored records near this value, and
    far from ``level``, is what calibration gives at that sharpness. NaN where no prediction
    puts mass at the cap."""
    joint, above = _covered_above_cap(below_cap, level)
    total = float(above.sum())
    return float(joint.sum()) / total if total > 0 else float("nan")
