"""The best batch of point goodput models over their candidate grids, as one compiled loop.

:func:`perfmodel.goodput.optimize_each` and a point model's
:meth:`perfmodel.goodput.GoodputModel.optimize` score every candidate ``(m, s)`` of every
allocation and keep the best: as whole-array numpy that is some forty calls of microseconds each
per decision, for grids of a few hundred entries. Here it is one pass in machine code (numba
``@njit(cache=True)``: compiled on first use and kept on disk next to this file, or under
``NUMBA_CACHE_DIR``), imported lazily (importing numba is slow).

The formulas are :mod:`perfmodel.throughput`'s step-time model and
:func:`perfmodel.efficiency.efficiency_from_noise`, written per entry in the same order of
operations; the tests check that the choices equal the numpy evaluation's.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from perfmodel.throughput import _TINY as TINY


@njit(cache=True)
def best_point_batches(theta: np.ndarray, phi: np.ndarray, init: np.ndarray, nodes: np.ndarray,
                       replicas: np.ndarray, local: np.ndarray, accum: np.ndarray,
                       valid: np.ndarray, best: np.ndarray, scores: np.ndarray) -> None:
    """For each allocation ``a``, the index ``best[a]`` of the candidate of highest goodput and
    that goodput ``scores[a]`` (``-inf`` where no candidate is valid; the first of equals wins).

    Row ``a`` scores the model ``theta[a]`` (``(A, 7)``, :data:`~perfmodel.throughput.
    PARAM_NAMES` order) with noise-to-signal ``phi[a]`` and initial batch ``init[a]`` on
    ``replicas[a]`` GPUs of ``nodes[a]`` nodes, at micro-batches ``local[a]`` with
    ``accum[a]`` accumulation steps where ``valid[a]`` (each ``(A, G)``); goodput is examples at
    the initial batch per second."""
    num_rows, grid = local.shape
    for a in range(num_rows):
        alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = (
            theta[a, 0], theta[a, 1], theta[a, 2], theta[a, 3], theta[a, 4], theta[a, 5],
            theta[a, 6])
        k = replicas[a]
        multi_node = 1.0 if nodes[a] > 1 else 0.0
        multi_replica = 1.0 if k > 1 else 0.0
        retro = max(k - 2.0, 0.0)
        t_n = (multi_node * (alpha_n + beta_n * retro)
               + (1 - multi_node) * multi_replica * (alpha_r + beta_r * retro) + TINY)
        t_n_g = t_n**gamma
        top = -np.inf
        choice = 0
        for g in range(grid):
            if not valid[a, g]:
                continue
            m = local[a, g]
            s = accum[a, g]
            t_c = alpha_c + beta_c * m
            t_o = (t_c**gamma + t_n_g) ** (1 / gamma)
            rate = k * m * (s + 1) / (s * t_c + t_o)
            scale = k * m * (s + 1) / init[a]
            value = rate * (1.0 - (scale - 1.0) / (phi[a] + scale))
            # np.argmax's order: the first NaN, else the first of the largest.
            if math.isnan(value):
                if not math.isnan(top):
                    top = value
                    choice = g
            elif value > top:
                top = value
                choice = g
        best[a] = choice
        scores[a] = top
