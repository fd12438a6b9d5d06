"""Finish-time fairness (Themis, NSDI 2020; as Shockwave reports it): one definition for all runs.

A job's finish-time fairness is ``rho = JCT / (T_alone * c)``: its job completion time over the
time it would take alone on its GPUs (``T_alone``), scaled by a contention factor ``c`` (the share
of the cluster it could expect). Shockwave's summaries use the static factor ``c = max(1, N / G)``
for ``N`` jobs in the trace on ``G`` GPUs (``scheduler.py`` ``get_finish_time_fairness``); the
Pollux world reports ``c = 1``. ``rho > 1`` means the job finished later than under its fair share;
a job is counted *unfair* when ``rho > 1.05`` (Shockwave's ``unfair_frac``).
"""

from __future__ import annotations

import numpy as np

#: ``rho`` above this counts a job as unfairly treated.
UNFAIR_RHO = 1.05
#: Points of the distribution of ``rho`` a summary reports (quantiles; the worst is separate).
FTF_QUANTILES = (0.25, 0.5, 0.75, 0.9, 0.99)


def contention_factor(num_jobs: int, num_gpus: int) -> float:
    """Shockwave's static contention factor ``max(1, N / G)``."""
    return max(1.0, num_jobs / max(num_gpus, 1))


def ftf_rho(jct: np.ndarray | float, standalone: np.ndarray | float,
            contention: float = 1.0) -> np.ndarray:
    """``jct / (standalone * contention)`` elementwise (NaN where a job has not finished)."""
    return np.asarray(jct, dtype=float) / (np.asarray(standalone, dtype=float) * contention)


def ftf_summary(rho: np.ndarray) -> dict[str, float]:
    """``ftf_worst``, ``ftf_p25`` ... ``ftf_p99`` (the CDF at those quantiles) and
    ``unfair_fraction`` (share of finished jobs with ``rho > 1.05``) of the finished jobs."""
    rho = np.asarray(rho, dtype=float)
    rho = rho[np.isfinite(rho)]
    if not rho.size:
        return {"ftf_worst": np.nan, "unfair_fraction": np.nan,
                **{f"ftf_p{round(q * 100)}": np.nan for q in FTF_QUANTILES}}
    out = {"ftf_worst": float(rho.max()),
           "unfair_fraction": float((rho > UNFAIR_RHO).mean())}
    for q in FTF_QUANTILES:
        out[f"ftf_p{round(q * 100)}"] = float(np.quantile(rho, q))
    return out
