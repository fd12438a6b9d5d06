"""Gandiva-fair (Chaudhary et al., EuroSys 2020, "Balancing efficiency and fairness in
heterogeneous GPU clusters for deep learning"): equal shares of every GPU generation per user,
then automated trading of fast-GPU share for slow-GPU share between users.

What is implemented, from the paper's design:

* **Fair share.** Every active user holds the same number of tickets and so the same share of
  each GPU type's GPUs; a job of ``s`` GPUs turns a share of ``g`` GPUs of a type into the time
  fraction ``g / s`` there (each job's fractions scaled down to sum at most 1: Gavel's
  ``IsolatedPolicy``, the split Shockwave's ``gandiva_fair`` baseline uses).
* **Trading** (the paper's section on heterogeneity): a user's *speedup* between a faster and a
  slower type is its job's measured steps/s on the one over the other. For each pair of types
  (in Gavel's order V100, P100, K80: the first is the faster for most jobs), the user with the
  highest speedup buys fast-GPU share from the user with the lowest speedup and pays in
  slow-GPU share at a price
  between the two speedups (here their mean: any price strictly between leaves both users with
  more steps/s than before, the paper's guarantee); trades repeat while a buyer's speedup exceeds
  a seller's. A trade is as large as the seller's fast share, the buyer's slow share and the
  seller's room (a job can hold at most its own GPU count at a time) allow. Each type's total
  share is unchanged, so the allocation still fits the cluster.
* The shares become time fractions that Gavel's round mechanism
  (:mod:`bayes_sched.policies.gavel.time_sharing`) turns into rounds: its priority (allocation over
  time received) plays the role of Gandiva-fair's stride scheduling, and GPUs a job's share
  leaves idle go to the other jobs with a share there.

Left out, or where our world lacks what Gandiva-fair needs:

* **Users.** Jobs here carry no user; every job is its own user with equal tickets (the setting
  Shockwave's evaluation of Gandiva-fair uses). With several jobs per user, a user's share would
  be split among its jobs; that is not modelled.
* **Shockwave's baseline** (``split="time"``): Shockwave's evaluation ran Gandiva-fair as its
  ``GandivaFairProportional`` policy (``scheduler/policies/gandiva_fair_proportional.py``): each of
  ``m`` jobs gets the time fraction ``GPUs of the type / m`` on every type (each job's fractions
  scaled down to sum at most 1) whatever its own GPU count, and nothing is traded. A job of 4 GPUs
  is then owed 4 times the GPU time of a job of 1, and the fractions can ask for more GPUs than
  the cluster has (the round mechanism's priorities ration them). The default (``"gpus"``)
  splits the GPUs, as the paper's tickets do. That baseline is deterministic (no lottery, no
  tickets); under Shockwave's scheduler its allocation is recomputed at most every 1000 s
  (``min_reset_interval``; the Shockwave world's default in ``simulate --trace`` and
  ``experiments/shockwave_fidelity.py``), which its published worst finish-time fairness (1.85)
  rests on: at Gavel's 1920 s late arrivals wait longer and the worst is 2.29.
* The split, gang-aware stride scheduler on each server, the load balancer and job migration
  between servers (the round mechanism places jobs instead), ticket weights other than equal, and
  the profiling of speedups (the measured table is read instead).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy, equal_split

#: Shares (GPUs) below this are not traded.
MIN_TRADE_GPUS = 1e-9


def trade_shares(shares: np.ndarray, rates: np.ndarray, scale_factors: np.ndarray,
                 order: list[tuple[int, int]]) -> np.ndarray:
    """Gandiva-fair's automated trading.

    Args:
        shares: GPUs of each type each job (user) holds, ``(J, T)``.
        rates: each job's steps/s alone on each type, ``(J, T)`` (0 where it cannot run).
        scale_factors: each job's GPUs, ``(J,)``: the most GPUs it can hold at a time.
        order: the ``(faster, slower)`` type pairs to trade, in order.

    Returns:
        The shares after trading, ``(J, T)``: each type's total unchanged; every job's steps/s
        at least as high as before.
    """
    shares = shares.astype(float).copy()
    for fast, slow in order:
        runs = (rates[:, fast] > 0) & (rates[:, slow] > 0)
        speedup = np.where(runs, rates[:, fast] / np.where(runs, rates[:, slow], 1.0), 0.0)
        full = np.zeros(len(shares), dtype=bool)  # jobs with no room left for this pair
        for _ in range(len(shares) ** 2 + len(shares)):  # a trade or a full job each time
            room = scale_factors - shares.sum(axis=1)
            buyers = np.flatnonzero(runs & ~full & (shares[:, slow] > MIN_TRADE_GPUS))
            sellers = np.flatnonzero(runs & ~full & (shares[:, fast] > MIN_TRADE_GPUS))
            if not len(buyers) or not len(sellers):
                break
            buyer = int(buyers[np.argmax(speedup[buyers])])
            seller = int(sellers[np.argmin(speedup[sellers])])
            if buyer == seller or not speedup[buyer] > speedup[seller] * (1 + 1e-9):
                break
            price = (speedup[buyer] + speedup[seller]) / 2.0  # slow GPUs per fast GPU
            # The side that receives more GPUs than it gives needs room for them.
            receiver = seller if price > 1.0 else buyer
            limit = room[receiver] / abs(price - 1.0) if price != 1.0 else np.inf
            amount = min(shares[seller, fast], shares[buyer, slow] / price, limit)
            if amount <= MIN_TRADE_GPUS:
                full[receiver] = True
                continue
            shares[seller, fast] -= amount
            shares[buyer, fast] += amount
            shares[buyer, slow] -= price * amount
            shares[seller, slow] += price * amount
    return np.maximum(shares, 0.0)


class GandivaFairPolicy(TimeSharingPolicy):
    """Gandiva-fair: equal shares per user (here per job), fast-GPU share traded for slow-GPU
    share between users whose speedups differ.

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and
        split: ``"gpus"`` (default: each job an equal share of every type's GPUs, then traded)
            or ``"time"`` (Shockwave's baseline: each job an equal time fraction whatever its
            GPU count, no trading; see the module).
    """

    name = "gandiva_fair"
    heterogeneity_aware = True  # trading reads per-type throughputs; the type order is kept

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson",
                 split: Literal["gpus", "time"] = "gpus") -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition)
        if split not in ("gpus", "time"):
            raise ValueError(f"split is {split!r}: expected 'gpus' (equal GPU shares, traded) or "
                             "'time' (Shockwave's baseline: equal time fractions)")
        self.split = split

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        if self.split == "time":
            # Shockwave's GandivaFairProportional: equal_split with every job counted as 1 GPU.
            return equal_split(np.ones(inputs.num_jobs), inputs.capacities)
        sizes = inputs.scale_factors
        fractions = equal_split(sizes, inputs.capacities)
        fractions[inputs.throughputs <= 0] = 0.0
        # Type pairs in Gavel's order (the types are already in it); a job faster on the second
        # type of a pair has a speedup below 1 and sells the first.
        num_types = len(inputs.capacities)
        order = [(fast, slow) for fast in range(num_types) for slow in range(fast + 1, num_types)]
        shares = trade_shares(fractions * sizes[:, None], inputs.throughputs, sizes, order)
        return shares / sizes[:, None]
