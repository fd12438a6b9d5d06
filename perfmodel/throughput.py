"""Pollux's step-time model of data-parallel training, and its point fit.

For a job on ``num_nodes`` nodes with ``K = num_replicas`` GPUs, per-GPU micro-batch ``m`` and ``s``
gradient-accumulation steps (all times in seconds):

* compute time of one micro-step: ``T_c = alpha_c + beta_c * m``;
* network time: ``T_n = alpha_r + beta_r * max(K - 2, 0)`` when all replicas share a node,
  ``alpha_n + beta_n * max(K - 2, 0)`` across nodes, and 0 for ``K = 1``;
* optimiser step, compute and communication overlapping: ``T_o = (T_c**gamma + T_n**gamma)**(1/gamma)``;
* one iteration: ``T_iter = s * T_c + T_o``; throughput ``K * m * (s + 1) / T_iter`` examples/s.

The formulas are written once against operators that numpy arrays and torch tensors share, so the
same code serves prediction (numpy) and the Bayesian fit (torch autograd); the point fit's objective
has its gradient written out (:func:`_rmsle_objective`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import astuple, dataclass, fields
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from threadpoolctl import threadpool_limits

from perfmodel.errors import InputError
from perfmodel.profiles import StepTimeProfile

# torch is imported where tensors are made: prediction and the point fit run on numpy, so a
# command that needs no Bayesian fit pays no torch import (seconds per process).
if TYPE_CHECKING:
    import torch

ArrayT = TypeVar("ArrayT", np.ndarray, "torch.Tensor")

#: Smallest network time; keeps ``T_n ** gamma`` differentiable for a single replica.
_TINY = 1e-8
GAMMA_BOUNDS = (1.0, 10.0)
PARAM_NAMES = ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma")
#: Unit of each parameter: seconds, seconds per example of the micro-batch, seconds per GPU beyond
#: two (the retrogression slopes), and none for the overlap exponent.
#: Log compute-time factor of a multi-GPU class against one GPU at the same micro-batch: GPUs
#: sharing a host share its memory bandwidth, PCIe lanes, data loaders and power budget, so their
#: compute steps differ from a lone GPU's (the Bayesian fit learns these; the point fit has none).
SHIFT_NAMES = ("shift_within", "shift_across")
#: Columns of a parameter draw: the seven step-time parameters, optionally followed by the two
#: compute shifts.
DRAW_NAMES = PARAM_NAMES + SHIFT_NAMES
PARAM_UNITS = {"alpha_c": "s", "beta_c": "s/example", "alpha_n": "s", "beta_n": "s/GPU",
               "alpha_r": "s", "beta_r": "s/GPU", "gamma": "1"}


@dataclass(frozen=True)
class ThroughputParams:
    """Parameters of the step-time model (seconds, seconds per example, and ``gamma`` unitless)."""

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float

    def as_array(self) -> np.ndarray:
        """The parameters in :data:`PARAM_NAMES` order, shape ``(7,)``."""
        # The fields read directly: dataclasses.astuple deep-copies field by field, and this
        # runs for every goodput model built.
        return np.array([self.alpha_c, self.beta_c, self.alpha_n, self.beta_n, self.alpha_r,
                         self.beta_r, self.gamma], dtype=np.float64)

    @classmethod
    def from_array(cls, values: np.ndarray) -> ThroughputParams:
        return cls(*(float(v) for v in np.asarray(values).reshape(-1)[: len(fields(cls))]))

    def as_dict(self) -> dict[str, float]:
        return dict(zip(PARAM_NAMES, astuple(self), strict=True))


def compute_time(alpha_c: ArrayT, beta_c: ArrayT, local_bsz: ArrayT) -> ArrayT:
    """Seconds of one micro-step of ``local_bsz`` examples on one GPU."""
    return alpha_c + beta_c * local_bsz


def network_time(alpha_n: ArrayT, beta_n: ArrayT, alpha_r: ArrayT, beta_r: ArrayT,
                 num_nodes: ArrayT, num_replicas: ArrayT) -> ArrayT:
    """Seconds of one gradient all-reduce; the slowest link (across nodes or within one) rules."""
    multi_node = (num_nodes > 1) * 1.0
    multi_replica = (num_replicas > 1) * 1.0
    retrogression = (num_replicas - 2).clip(min=0)
    across = alpha_n + beta_n * retrogression
    within = alpha_r + beta_r * retrogression
    return multi_node * across + (1 - multi_node) * multi_replica * within + _TINY


def optimizer_time(t_compute: ArrayT, t_network: ArrayT, gamma: ArrayT) -> ArrayT:
    """Seconds of the last micro-step, where computation and all-reduce overlap (``gamma >= 1``)."""
    return (t_compute**gamma + t_network**gamma) ** (1 / gamma)


def compute_factor(shift_within: ArrayT, shift_across: ArrayT, num_nodes: ArrayT,
                   num_replicas: ArrayT) -> ArrayT:
    """Factor on one GPU's compute time for each configuration: ``exp(shift)`` of its class
    (:data:`SHIFT_NAMES`; 1 for one GPU); arguments broadcast."""
    multi_node = (num_nodes > 1) * 1.0
    within = (1 - multi_node) * (num_replicas > 1)
    return math.e ** (within * shift_within + multi_node * shift_across)


def step_time_terms(theta: ArrayT, num_nodes: ArrayT, num_replicas: ArrayT, local_bsz: ArrayT
                    ) -> tuple[ArrayT, ArrayT]:
    """``(T_c, T_o)`` for parameters ``theta`` of shape ``(..., 7)`` in :data:`PARAM_NAMES` order,
    or ``(..., 9)`` in :data:`DRAW_NAMES` order (multi-GPU compute times then scale by
    :func:`compute_factor`).

    The leading dimensions of ``theta`` (e.g. posterior samples) broadcast against the configuration
    arrays, so ``theta[..., None, :]`` against configurations of shape ``(N,)`` gives ``(S, N)``.
    """
    alpha_c, beta_c, alpha_n, beta_n, alpha_r, beta_r, gamma = (theta[..., i] for i in range(7))
    t_c = compute_time(alpha_c, beta_c, local_bsz)
    if theta.shape[-1] == len(DRAW_NAMES):
        t_c = t_c * compute_factor(theta[..., 7], theta[..., 8], num_nodes, num_replicas)
    t_n = network_time(alpha_n, beta_n, alpha_r, beta_r, num_nodes, num_replicas)
    return t_c, optimizer_time(t_c, t_n, gamma)


def seconds_per_step(step_time: float, sync_time: float, accum_steps: int) -> float:
    """Seconds per optimiser step from one measured iteration: ``accum_steps`` more micro-steps
    each repeat the iteration's compute (its time less the synchronisation), not the sync."""
    return step_time + (step_time - sync_time) * accum_steps


#: Configuration classes whose measurements scatter differently: one GPU, several GPUs within one
#: node, several nodes.
CONFIGURATION_CLASSES = ("1gpu", "within", "across")


def configuration_class(num_nodes: np.ndarray, num_replicas: np.ndarray) -> np.ndarray:
    """Index into :data:`CONFIGURATION_CLASSES` per configuration, shape of the broadcast inputs."""
    nodes, replicas = np.broadcast_arrays(np.asarray(num_nodes), np.asarray(num_replicas))
    return np.where(nodes > 1, 2, np.where(replicas > 1, 1, 0)).astype(np.int64)


def predict_step_time(params: ThroughputParams, num_nodes: np.ndarray | int,
                      num_replicas: np.ndarray | int, local_bsz: np.ndarray | float,
                      accum_steps: np.ndarray | int = 0) -> np.ndarray:
    """Seconds per optimiser step, ``s * T_c + T_o``; arguments broadcast (numpy)."""
    nodes, replicas, m, s = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in
                                                  (num_nodes, num_replicas, local_bsz, accum_steps)))
    t_c, t_o = step_time_terms(params.as_array(), nodes, replicas, m)
    return s * t_c + t_o


#: :func:`total_batch`'s arguments: arrays, or plain counts.
CountT = TypeVar("CountT", np.ndarray, int)


def total_batch(num_replicas: CountT, local_bsz: CountT, accum_steps: CountT) -> CountT:
    """Examples per optimiser step, ``K * m * (s + 1)``: micro-batch ``local_bsz`` on each of
    ``num_replicas`` GPUs over ``accum_steps`` accumulation steps and the step itself; arguments
    broadcast (numpy) or plain numbers, evaluated in that order (so every caller rounds alike)."""
    return num_replicas * local_bsz * (accum_steps + 1)


def predict_throughput(params: ThroughputParams, num_nodes: np.ndarray | int,
                       num_replicas: np.ndarray | int, local_bsz: np.ndarray | float,
                       accum_steps: np.ndarray | int = 0) -> np.ndarray:
    """Examples per second, ``K * m * (s + 1) / T_iter``; arguments broadcast (numpy)."""
    t_iter = predict_step_time(params, num_nodes, num_replicas, local_bsz, accum_steps)
    return total_batch(np.asarray(num_replicas), np.asarray(local_bsz),
                       np.asarray(accum_steps)) / t_iter


#: How many :func:`single_thread` blocks are open (the process-wide limits are set once, by the
#: outermost).
_SINGLE_THREAD_DEPTH = 0


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch and the BLAS under numpy and scipy on one thread: the arrays here are small, and
    on a busy machine the synchronisation of their worker threads costs several times the work
    itself.

    The limits are process-wide, so a block inside another changes nothing: it only counts
    itself (setting them scans the loaded libraries, milliseconds per entry, and a simulation
    inside one block fits thousands of times)."""
    global _SINGLE_THREAD_DEPTH
    if _SINGLE_THREAD_DEPTH:
        _SINGLE_THREAD_DEPTH += 1
        try:
            yield
        finally:
            _SINGLE_THREAD_DEPTH -= 1
        return
    # torch's own pool, where torch is loaded (a Bayesian fit imports it before it enters here).
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else 0
    if torch is not None:
        torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            _SINGLE_THREAD_DEPTH = 1
            try:
                yield
            finally:
                _SINGLE_THREAD_DEPTH = 0
    finally:
        if torch is not None:
            torch.set_num_threads(threads)


# --- point fit ---------------------------------------------------------------------------------

def identifiable(profile: StepTimeProfile) -> dict[str, bool]:
    """Which parameter groups the profile's configurations can inform at all.

    ``compute_slope``: more than one micro-batch size seen; ``across``: a multi-node run seen;
    ``within``: a single-node run with several GPUs seen; ``retrogression``: more than 2 GPUs seen.
    """
    return {
        "compute_slope": len(np.unique(profile.local_bsz)) > 1,
        "across": bool(np.any(profile.num_nodes > 1)),
        "within": bool(np.any((profile.num_nodes == 1) & (profile.num_replicas > 1))),
        "retrogression": bool(np.any(profile.num_replicas > 2)),
    }


@dataclass(frozen=True)
class _FitData:
    """A profile as the point fit reads it: configurations and log times, each ``(N,)``."""

    nodes: np.ndarray
    replicas: np.ndarray
    m: np.ndarray
    log_tc: np.ndarray
    log_to: np.ndarray

    @classmethod
    def of(cls, profile: StepTimeProfile) -> _FitData:
        def as_float(a: np.ndarray) -> np.ndarray:
            return np.asarray(a, dtype=np.float64)
        return cls(as_float(profile.num_nodes), as_float(profile.num_replicas),
                   as_float(profile.local_bsz), np.log(as_float(profile.compute_time)),
                   np.log(as_float(profile.step_time)))


def _rmsle_objective(theta: np.ndarray, data: _FitData) -> tuple[float, np.ndarray]:
    """Pollux's objective at ``theta`` ``(7,)`` and its gradient ``(7,)``, analytically.

    The objective: RMSLE of compute and optimiser time, a pull of gamma towards 1 (easier for the
    alphas and betas), and a penalty on retrogression (an optimistic model is preferred):
    ``err_c + err_o + 1e-3 (gamma - 1)^2 + 1e-2 ((beta_n / alpha_n)^2 + (beta_r / alpha_r)^2)``.
    The gradient is written out (the chain rule through :func:`step_time_terms`) and both are
    computed in one compiled pass over the rows (:func:`perfmodel.rmsle_kernel.rmsle_loss_grad`):
    the fit evaluates them about a hundred times per L-BFGS run, where an autograd graph, or
    whole-array numpy, costs more than the arithmetic. Where an RMSLE term is exactly 0 its
    (undefined) gradient is taken as 0.
    """
    from perfmodel.rmsle_kernel import rmsle_loss_grad

    grad = np.empty(7)
    loss = rmsle_loss_grad(np.asarray(theta, dtype=np.float64), data.nodes, data.replicas,
                           data.m, data.log_tc, data.log_to, _TINY, grad)
    return float(loss), grad


def profile_tensors(profile: StepTimeProfile) -> dict[str, torch.Tensor]:
    """The profile as float64 tensors: configuration and log compute/optimiser times, shape (N,)."""
    import torch

    def as_tensor(a: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(np.asarray(a, dtype=np.float64))
    return {
        "nodes": as_tensor(profile.num_nodes),
        "replicas": as_tensor(profile.num_replicas),
        "m": as_tensor(profile.local_bsz),
        "log_tc": torch.log(as_tensor(profile.compute_time)),
        "log_to": torch.log(as_tensor(profile.step_time)),
    }


#: Pollux's lower bound on the six positive parameters; terms the data cannot inform are pinned
#: here, so a configuration never measured is predicted optimistically (no network cost).
LOWER_BOUND = 1e-8
#: Pollux's prior when no multi-node run was measured: links across nodes are at least this much
#: slower than links within one.
ACROSS_OVER_WITHIN = 1.1
#: Pollux's starting point, in :data:`PARAM_NAMES` order.
POLLUX_START = (1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3)


def pinned_parameters(profile: StepTimeProfile) -> dict[str, float]:
    """Parameters the profile cannot inform and the values the fit holds them at, as Pollux does.

    With one micro-batch size the compute time is split evenly between ``alpha_c`` and
    ``beta_c * m``; network terms without measurements (no multi-node run: ``alpha_n, beta_n``;
    no single-node multi-GPU run: ``alpha_r, beta_r``; at most 2 GPUs: ``beta_n, beta_r``) are
    pinned at :data:`LOWER_BOUND`.
    """
    ok = identifiable(profile)
    pinned: dict[str, float] = {}
    if not ok["compute_slope"]:
        t_c = float(np.mean(profile.compute_time))
        pinned["alpha_c"] = t_c / 2
        pinned["beta_c"] = t_c / float(np.mean(profile.local_bsz)) / 2
    names = set()
    if not ok["across"]:
        names |= {"alpha_n", "beta_n"}
    if not ok["within"]:
        names |= {"alpha_r", "beta_r"}
    if not ok["retrogression"]:
        names |= {"beta_n", "beta_r"}
    pinned.update({name: LOWER_BOUND for name in names})
    return pinned


def fit_objective(theta: np.ndarray, profile: StepTimeProfile) -> float:
    """Pollux's objective (RMSLE of compute and step time plus its two penalties) at ``theta``
    of shape ``(7,)``; lower is better."""
    return _rmsle_objective(np.asarray(theta, dtype=np.float64), _FitData.of(profile))[0]


def _starts(profile: StepTimeProfile, count: int, seed: int) -> list[np.ndarray]:
    # Pollux's start first (so the best start is never worse than Pollux's own fit), then one
    # on the scale of the measured times, then log-uniform perturbations of that one: Pollux's
    # start of 0.1 s is far from models whose whole step takes a few milliseconds.
    starts = [np.array(POLLUX_START)]
    t_c = float(np.median(profile.compute_time))
    sync = profile.step_time - profile.compute_time
    t_n = float(np.median(sync[profile.num_replicas > 1])) if np.any(profile.num_replicas > 1) \
        else t_c
    t_n = max(t_n, 1e-3 * t_c)
    m = float(np.median(profile.local_bsz))
    scaled = np.array([t_c / 2, t_c / (2 * m), t_n, t_n / 10, t_n / 2, t_n / 20, 1.5])
    rng = np.random.default_rng(seed)
    for i in range(1, count):
        if i == 1:
            starts.append(scaled)
            continue
        jitter = np.exp(rng.uniform(-2.0, 2.0, 6))
        gamma = rng.uniform(*GAMMA_BOUNDS)
        starts.append(np.append(scaled[:6] * jitter, gamma))
    return starts


def fit_throughput(profile: StepTimeProfile, starts: int = 4, seed: int = 0) -> ThroughputParams:
    """Point fit of the step-time model: minimise Pollux's objective with L-BFGS-B under Pollux's
    bounds, from ``starts`` starting points, keeping the lowest objective.

    Parameters the profile cannot inform are pinned as Pollux pins them
    (:func:`pinned_parameters`), and without multi-node runs the across-node terms are raised to
    at least 1.1 times the within-node ones afterwards. The first start is Pollux's own, so with
    ``starts=1`` this is Pollux's fit; more starts escape its local minima (e.g. on models whose
    steps take milliseconds). ``seed`` draws the extra starts.
    """
    if len(profile) == 0:
        raise InputError(f"profile of '{profile.model}' has no rows: expected measurements")
    if starts < 1:
        raise ValueError(f"starts must be at least 1, not {starts}")
    pinned = pinned_parameters(profile)
    fixed = np.array([name in pinned for name in PARAM_NAMES])
    pinned_values = np.array([pinned.get(name, 0.0) for name in PARAM_NAMES])
    lower = np.array([LOWER_BOUND] * 6 + [GAMMA_BOUNDS[0]])
    upper = np.array([np.inf] * 6 + [GAMMA_BOUNDS[1]])

    # Here, not at module level: most users of the model (a simulation's physics, the goodput
    # search, the Bayesian fits) never minimise this objective, and scipy.optimize costs most of
    # a second of start-up. Imported before the single-thread block, so its BLAS is limited too.
    import scipy.optimize

    from perfmodel.rmsle_kernel import rmsle_loss_grad

    data = _FitData.of(profile)
    free = ~fixed
    theta = np.where(fixed, pinned_values, 0.0)
    grad = np.empty(7)
    rows = (data.nodes, data.replicas, data.m, data.log_tc, data.log_to)

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        # _rmsle_objective, without its per-call import and allocation.
        theta[free] = x
        loss = rmsle_loss_grad(theta, *rows, _TINY, grad)
        return float(loss), grad[free]

    best, best_loss = np.where(fixed, pinned_values, np.array(POLLUX_START)), np.inf
    if free.any():
        bounds = scipy.optimize.Bounds(lower[free], upper[free], keep_feasible=True)
        with single_thread():
            for start in _starts(profile, starts, seed):
                x0 = np.clip(start[free], lower[free], upper[free])
                result = scipy.optimize.minimize(objective, x0, jac=True, method="L-BFGS-B",
                                                 bounds=bounds)
                if np.isfinite(result.fun) and result.fun < best_loss:
                    best_loss = float(result.fun)
                    best = np.where(fixed, pinned_values, 0.0)
                    best[free] = result.x
    params = ThroughputParams.from_array(best)
    return params if identifiable(profile)["across"] else across_no_faster_than_within(params)


def across_no_faster_than_within(params: ThroughputParams) -> ThroughputParams:
    """Prior knowledge for a job never measured across nodes: links across nodes are no faster
    than links within one (``alpha_n, beta_n >= 1.1 x alpha_r, beta_r``)."""
    return dataclasses.replace(
        params, alpha_n=max(params.alpha_n, params.alpha_r * ACROSS_OVER_WITHIN),
        beta_n=max(params.beta_n, params.beta_r * ACROSS_OVER_WITHIN))


def rmsle(predicted: np.ndarray, measured: np.ndarray) -> float:
    """Root mean squared error of the logarithms (unitless)."""
    return float(np.sqrt(np.mean((np.log(predicted) - np.log(measured)) ** 2)))
