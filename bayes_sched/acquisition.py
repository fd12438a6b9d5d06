"""Exploration rules over posteriors: what to decide on, or whether to try, given uncertainty.

One definition of each rule, over the :class:`~bayes_sched.estimates.Posterior` protocol (mean,
quantile, joint draws), applied by any policy that wants it:

* :func:`thompson`: decide on one joint posterior draw (Thompson sampling): learns by acting
  on what might be true, at the draw's noise on every decision.
* :func:`quantile`: decide on a quantile of each quantity: above the median an optimistic
  (UCB-style) bound that favours what is uncertain, below it a pessimistic bound that guards
  one-sided questions (will this job finish by then?).
* :func:`expected_improvement`: the Monte Carlo expected improvement of each candidate over an
  incumbent candidate, draw by draw (uncertainty both share cancels);
  :func:`log_expected_improvement`: the analytic log EI over the best mean (Gaussian marginals).
* :func:`worth_trying`: value of information: try an unknown option for a trial when the
  expected gain from knowing it, over the time the answer is used, beats the trial's expected
  cost (the gain itself is the decision problem's: e.g. LP prices,
  :mod:`bayes_sched.mechanisms.value_of_information`).

Units are the posterior's (or the caller's objective's). This module imports no estimator,
policy or simulator.
"""

from __future__ import annotations

import numpy as np

from bayes_sched.estimates import Posterior, check_quantile


def thompson(posterior: Posterior, seed: int = 0) -> np.ndarray:
    """One joint posterior draw (``seed``), shape ``posterior.shape``."""
    return np.asarray(posterior.draws(1, seed)[0])


def quantile(posterior: Posterior, q: float) -> np.ndarray:
    """Each quantity's ``q``-quantile (``0 <= q <= 1``), shape ``posterior.shape``: ``q > 0.5``
    an optimistic (upper confidence) bound, ``q < 0.5`` a pessimistic one, 0.5 the median."""
    return np.asarray(posterior.quantile(check_quantile(q)))


def expected_improvement(posterior: Posterior, incumbent: int, num_draws: int,
                         seed: int = 0) -> np.ndarray:
    """Expected improvement of each of ``K`` candidates over candidate ``incumbent``:
    ``E[max(value_k - value_incumbent, 0)]`` over ``num_draws`` joint draws (``seed``), taken
    draw by draw, shape ``(K,)`` (0 for the incumbent). ``posterior``: the candidates' values,
    shape ``(K,)``."""
    values = np.asarray(posterior.draws(num_draws, seed)).reshape(num_draws, -1)   # (S, K)
    return np.maximum(values - values[:, incumbent : incumbent + 1], 0.0).mean(axis=0)


def log_expected_improvement(mean: np.ndarray, std: np.ndarray, best: float) -> np.ndarray:
    """Analytic log expected improvement over ``best`` of Gaussian values with ``mean`` and
    ``std`` (same shape): ``log(std) + log h((mean - best) / std)`` with ``h(z) = phi(z) +
    z Phi(z)``, by BoTorch's numerically stable helper (finite far below ``best``)."""
    import torch
    from botorch.acquisition.analytic import _log_ei_helper

    z = (mean - best) / np.maximum(std, 1e-9)
    return np.log(np.maximum(std, 1e-12)) + _log_ei_helper(
        torch.as_tensor(z, dtype=torch.float64)).numpy()


def worth_trying(gain_per_second: float, horizon_seconds: float, trial_value: float,
                 trial_seconds: float) -> tuple[bool, float, float]:
    """Value of information: whether to try an option, ``(try, gain, cost)`` in objective-seconds:
    the expected rise of the objective from knowing it (``gain_per_second``) over the
    ``horizon_seconds`` the answer is used, against a trial of ``trial_seconds`` of an option
    whose value per unit of time at the posterior mean is ``trial_value`` (``<= 0`` where the
    mean decision leaves it out)."""
    gain = gain_per_second * horizon_seconds
    cost = max(-trial_value, 0.0) * trial_seconds
    return gain > cost, gain, cost


__all__ = ["expected_improvement", "log_expected_improvement", "quantile", "thompson",
           "worth_trying"]
