"""Pollux's point-fit objective and its gradient as one compiled loop.

The point fit (:func:`perfmodel.throughput.fit_throughput`) evaluates the objective about a
hundred times per L-BFGS run, on profiles of a few to a few dozen rows: as whole-array numpy,
each evaluation is some fifty calls of microseconds each, far more than the arithmetic. Here it
is one pass over the rows in machine code (numba ``@njit(cache=True)``: compiled on first use
and kept on disk next to this file, or under ``NUMBA_CACHE_DIR``). Imported lazily by
:mod:`perfmodel.throughput`: importing numba is slow, and prediction never needs it.

The formulas are :mod:`perfmodel.throughput`'s step-time model (``T_c``, ``T_n``, ``T_o``) and
Pollux's objective as :func:`perfmodel.throughput._rmsle_objective` documents it; the tests check
the gradient against torch autograd through :func:`perfmodel.throughput.step_time_terms`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def rmsle_loss_grad(theta: np.ndarray, nodes: np.ndarray, replicas: np.ndarray, m: np.ndarray,
                    log_tc: np.ndarray, log_to: np.ndarray, tiny: float, grad: np.ndarray
                    ) -> float:
    """Pollux's objective at ``theta`` ``(7,)`` on rows ``(N,)`` (nodes, replicas, micro-batch,
    log compute time, log optimiser-step time), with ``tiny`` the smallest network time
    (:data:`perfmodel.throughput._TINY`: this module cannot import it, the model's module imports
    this one); writes its gradient into ``grad`` ``(7,)`` and returns the objective. Where an
    RMSLE term is exactly 0 its gradient is taken as 0."""
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = (
        theta[0], theta[1], theta[2], theta[3], theta[4], theta[5], theta[6])
    count = m.shape[0]
    t_c = np.empty(count)
    t_n = np.empty(count)
    log_total = np.empty(count)
    res_c = np.empty(count)
    res_o = np.empty(count)
    sq_c = 0.0
    sq_o = 0.0
    for i in range(count):
        retro = max(replicas[i] - 2.0, 0.0)
        if nodes[i] > 1:
            net = alpha_n + beta_n * retro
        elif replicas[i] > 1:
            net = alpha_r + beta_r * retro
        else:
            net = 0.0
        t_c[i] = alpha_c + beta_c * m[i]
        t_n[i] = net + tiny
        log_total[i] = math.log(t_c[i] ** gamma + t_n[i] ** gamma)
        res_c[i] = math.log(t_c[i]) - log_tc[i]
        res_o[i] = log_total[i] / gamma - log_to[i]
        sq_c += res_c[i] * res_c[i]
        sq_o += res_o[i] * res_o[i]
    err_c = math.sqrt(sq_c / count)
    err_o = math.sqrt(sq_o / count)
    for j in range(7):
        grad[j] = 0.0
    for i in range(count):
        # d err / d x = mean(res * d log T / d x) / err.
        w_c = res_c[i] / (count * err_c) if err_c > 0 else 0.0
        w_o = res_o[i] / (count * err_o) if err_o > 0 else 0.0
        tc_g = t_c[i] ** gamma
        tn_g = t_n[i] ** gamma
        total = tc_g + tn_g
        d_tc = w_c / t_c[i] + w_o * tc_g / (t_c[i] * total)
        d_tn = w_o * tn_g / (t_n[i] * total)
        retro = max(replicas[i] - 2.0, 0.0)
        grad[0] += d_tc
        grad[1] += d_tc * m[i]
        if nodes[i] > 1:
            grad[2] += d_tn
            grad[3] += d_tn * retro
        elif replicas[i] > 1:
            grad[4] += d_tn
            grad[5] += d_tn * retro
        grad[6] += w_o * (-log_total[i] / gamma**2
                          + (tc_g * math.log(t_c[i]) + tn_g * math.log(t_n[i])) / (gamma * total))
    # Penalties: 1e-3 (gamma - 1)^2 and 1e-2 ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2).
    grad[6] += 2e-3 * (gamma - 1)
    grad[2] -= 2e-2 * beta_n**2 / alpha_n**3
    grad[3] += 2e-2 * beta_n / alpha_n**2
    grad[4] -= 2e-2 * beta_r**2 / alpha_r**3
    grad[5] += 2e-2 * beta_r / alpha_r**2
    return (err_c + err_o + 1e-3 * (gamma - 1) ** 2
            + 1e-2 * ((beta_n / alpha_n) ** 2 + (beta_r / alpha_r) ** 2))
