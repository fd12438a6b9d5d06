"""Themis (Mahajan et al., NSDI 2020, "Themis: Fair and Efficient GPU Cluster Scheduling"):
finish-time fairness between *apps*, allocated by a partial-allocation auction.

The job-level finish-time-fairness programs (Gavel's formulation,
:mod:`bayes_sched.policies.gavel.finish_time_fairness`) stay as they are; here an app is a set of jobs
(option ``apps``: ``"tenant"``, default, every tenant's runnable jobs are one app; ``"job"``,
every job is its own app) and the arbiter divides each GPU type's GPUs between apps.

**From the paper.** An app's finish-time fairness is ``rho = T_sh / T_id``: its finish time
sharing the cluster over its finish time alone on a ``1/N`` share of it (``N`` contending apps).
The arbiter offers the GPUs to the ``1 - f`` fraction of apps with the worst ``rho`` (``f`` the
fairness knob: ``f -> 1`` offers only to the worst app, ``f = 0`` to every app). The offered apps
bid their ``rho`` under each bundle they could receive; the arbiter picks the allocation ``x*``
maximising the product of ``1 / rho`` (Nash social welfare: proportional fairness), and by the
partial-allocation mechanism (Cole, Gkatzelis and Goel) gives app ``a`` only the fraction
``c_a`` of its bundle::

    c_a = prod_{b != a} rho_b(x*)^-1 / prod_{b != a} rho_b(x^-a)^-1        (<= 1)

``x^-a`` the proportionally fair allocation of the same GPUs among the offered apps without
``a`` (the withheld ``1 - c_a`` is what ``a``'s presence costs the others: an app gains nothing by
misreporting its ``rho``). Resources the auction leaves (withheld, or unused) go to the apps that
were not offered.

**What we chose** (symbols ours). Per app ``a`` of jobs ``j`` (``s_j`` GPUs, ``R_j`` remaining
steps from the ``remaining_steps`` estimate, ``r_jt`` steps/s on type ``t`` from the ``throughput``
estimate, ``r*_j = max_t r_jt``):

* remaining work in best-type GPU-seconds ``W_a = sum_j s_j R_j / r*_j``, each type's efficiency
  ``e_at = sum_j (s_j R_j / r*_j) (r_jt / r*_j) / W_a`` (work-weighted), its demand
  ``D_a = sum_j s_j`` GPUs (it can use no more at a time);
* bundles are GPUs per type ``g_a`` (``(T,)``, divisible: Gavel's round mechanism turns shares into
  time fractions), with ``sum_t g_at <= D_a``; its capacity ``C_a(g) = sum_t e_at g_at``;
* ``T_sh(g) = S_a + W_a / C_a(g)``: ``S_a`` the seconds the app has had runnable jobs (added at
  every recomputation) plus its remaining time at rate ``C_a(g)``;
* ``T_id = I_a + W_a / C_a(g_iso)``: ``I_a`` the time its work done so far would have taken on its
  isolated share (each recomputation adds the best-type GPU-seconds its jobs did since the last,
  ``sum_j s_j dp_j / r*_j``, over ``C_a`` of the isolated share then; jobs that ended between
  recomputations lose their last stretch), ``g_iso`` the share ``G_t w_a / sum_b w_b`` of each
  type (``w`` the tenants' weights, 1 per job with ``apps="job"``: Themis's ``1/N``), scaled down
  to ``D_a`` GPUs;
* the arbiter's ``rho`` ranking reads each app's bundle from the last auction (0 GPUs for a new
  app: ``rho`` at its largest), and every recomputation of the allocation (arrivals, completions,
  at most every ``min_reset_interval``) is an auction of the whole cluster (a lease per
  recomputation); the offered apps are the ``max(1, ceil((1 - f) N))`` worst (default
  ``f = 0.8``: our choice, not checked against the paper's setting);
* the product of ``1 / rho`` is maximised as ``min sum_a log T_sh_a(g_a)`` (``T_id`` is fixed by
  the bids), convex in ``g`` (``log(S + W / C)`` has second derivative
  ``1 / C^2 - S^2 / (S C + W)^2 >= 0`` in ``C``), subject to ``sum_a g_at <= G_t``,
  ``sum_t g_at <= D_a``, ``g >= 0``; solved by SLSQP (:func:`proportionally_fair`);
* leftover GPUs (withheld or unused) go to the apps not offered, proportionally fair among them
  by the same program; what none of them can use stays without a share (Gavel's round mechanism
  still runs a job with a share on a GPU left idle). With ``leftover="all"`` (ours) that rest
  goes to every app with room, proportionally fair counting what each holds already: work
  conserving, at the cost of the mechanism's incentive (an offered app gets back part of what
  was withheld from it);
* within an app its GPUs of each type are water-filled equally over its jobs, none above its
  scale factor; a job's time fraction on a type is its GPUs there over its scale factor (each
  job's fractions scaled down to sum at most 1), as
  :mod:`bayes_sched.policies.gandiva_fair_tenants` does.

A job whose remaining steps are unknown (the ``ignored`` estimator, or no declaration): every
job's time is split equally (the rule of the job-level finish-time fairness).

Left out: Themis's per-app agents and their hyperparameter-tuning bids (an app's bid is computed
by the arbiter from the estimates), GPU placement sensitivity (the round mechanism places jobs),
and leases of a fixed length apart from the recomputations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from scipy.optimize import minimize

from bayes_sched.cluster import Allocations, ClusterState
from bayes_sched.estimates import Estimates
from bayes_sched.jobs import DEFAULT_TENANT, JobView
from bayes_sched.policies.gandiva_fair_tenants import _filled
from bayes_sched.policies.gavel.finish_time_fairness import steps_done
from bayes_sched.policies.gavel.time_sharing import AllocationInputs, TimeSharingPolicy

#: Where GPUs the auction leaves go: ``"others"`` (Themis: the apps not offered) or ``"all"``
#: (then what those cannot use, to every app with room: work conserving, but an offered app gets
#: back part of what the partial allocation withheld from it).
Leftover = Literal["others", "all"]

#: Capacity (best-type GPUs) below which an app counts as having none (keeps ``W / C`` finite).
MIN_CAPACITY = 1e-6


@dataclass(frozen=True)
class Apps:
    """The apps of one auction, ``A`` of them, on ``T`` GPU types.

    Attributes:
        shared: ``S_a``, seconds each app has been running so far, ``(A,)``.
        work: ``W_a``, remaining best-type GPU-seconds, ``(A,)`` (> 0).
        efficiency: ``e_at``, best-type GPUs one GPU of each type is worth, ``(A, T)``.
        demand: ``D_a``, the most GPUs each app can use at a time, ``(A,)``.
    """

    shared: np.ndarray
    work: np.ndarray
    efficiency: np.ndarray
    demand: np.ndarray

    def finish_times(self, gpus: np.ndarray) -> np.ndarray:
        """``T_sh`` of each app under ``gpus`` (``(A, T)``), seconds ``(A,)``."""
        capacity = np.maximum((self.efficiency * gpus).sum(axis=1), MIN_CAPACITY)
        return self.shared + self.work / capacity

    def subset(self, index: np.ndarray) -> Apps:
        return Apps(self.shared[index], self.work[index], self.efficiency[index],
                    self.demand[index])


def proportionally_fair(apps: Apps, capacities: np.ndarray, base: np.ndarray | None = None
                        ) -> np.ndarray:
    """The GPUs per type ``(A, T)`` maximising ``prod_a 1 / rho_a``: ``min sum_a log T_sh_a``
    subject to each type's ``capacities`` (``(T,)``) and each app's demand (see the module);
    ``base`` (``(A, T)``): GPUs the apps hold already, counted in their ``T_sh`` (the demand is
    then what they can use beyond it)."""
    num_apps, num_types = apps.efficiency.shape
    if num_apps == 0:
        return np.zeros((0, num_types))
    scale = max(float(capacities.max()), 1.0)
    cap = capacities / scale  # GPUs in units of the largest type's count: a well-scaled problem
    demand = apps.demand / scale
    shared, work, eff = apps.shared, apps.work / scale, apps.efficiency
    held = np.zeros(num_apps) if base is None else (eff * base).sum(axis=1) / scale

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        g = x.reshape(num_apps, num_types)
        c = np.maximum(held + (eff * g).sum(axis=1), MIN_CAPACITY / scale)
        t_sh = shared + work / c
        grad = -(work / (c * c * t_sh))[:, None] * eff
        return float(np.log(t_sh).sum()), grad.ravel()

    start = np.minimum(cap[None, :] / num_apps, demand[:, None] / num_types)
    constraints = [{"type": "ineq", "jac": _type_rows(num_apps, num_types),
                    "fun": lambda x: cap - x.reshape(num_apps, num_types).sum(axis=0)},
                   {"type": "ineq", "jac": _app_rows(num_apps, num_types),
                    "fun": lambda x: demand - x.reshape(num_apps, num_types).sum(axis=1)}]
    result = minimize(objective, start.ravel(), jac=True, method="SLSQP",
                      bounds=[(0.0, None)] * (num_apps * num_types), constraints=constraints,
                      options={"maxiter": 200, "ftol": 1e-10})
    gpus = np.maximum(result.x.reshape(num_apps, num_types), 0.0)
    return _within(gpus, cap, demand) * scale


def _type_rows(num_apps: int, num_types: int) -> object:
    rows = -np.tile(np.eye(num_types), (1, num_apps))  # d(cap_t - sum_a g_at) / dg
    return lambda _x: rows


def _app_rows(num_apps: int, num_types: int) -> object:
    rows = -np.kron(np.eye(num_apps), np.ones((1, num_types)))
    return lambda _x: rows


def _within(gpus: np.ndarray, capacities: np.ndarray, demand: np.ndarray) -> np.ndarray:
    """``gpus`` scaled down where the solver's tolerance let a type or an app overshoot."""
    used = gpus.sum(axis=0)
    gpus = gpus * np.minimum(1.0, capacities / np.maximum(used, 1e-12))[None, :]
    rows = gpus.sum(axis=1)
    return gpus * np.minimum(1.0, demand / np.maximum(rows, 1e-12))[:, None]


@dataclass(frozen=True)
class Auction:
    """One partial-allocation auction's outcome.

    Attributes:
        optimum: ``x*``, the proportionally fair GPUs per type of the offered apps, ``(A, T)``.
        kept: ``c_a``, the fraction of its bundle each offered app receives, ``(A,)``.
        gpus: what each app receives, ``c_a x*_a``, ``(A, T)``.
    """

    optimum: np.ndarray
    kept: np.ndarray
    gpus: np.ndarray


def partial_allocation(apps: Apps, capacities: np.ndarray) -> Auction:
    """Cole, Gkatzelis and Goel's partial allocation among ``apps`` of ``capacities`` (``(T,)``):
    ``x*`` proportionally fair, each app keeping ``c_a`` of its bundle (see the module)."""
    optimum = proportionally_fair(apps, capacities)
    log_t = np.log(apps.finish_times(optimum))
    num_apps = len(apps.work)
    kept = np.ones(num_apps)
    for a in range(num_apps):
        others = np.flatnonzero(np.arange(num_apps) != a)
        if not len(others):
            continue
        without = apps.subset(others)
        alone = np.log(without.finish_times(proportionally_fair(without, capacities)))
        # prod 1/rho_b(x*) over prod 1/rho_b(x^-a): the T_id of each b cancels.
        kept[a] = math.exp(min(0.0, float((alone - log_t[others]).sum())))
    return Auction(optimum, kept, optimum * kept[:, None])


def offered_apps(rho: np.ndarray, f: float) -> np.ndarray:
    """Indices of the ``max(1, ceil((1 - f) N))`` apps with the largest ``rho`` (ties: the
    earlier app), worst first."""
    count = max(1, math.ceil((1.0 - f) * len(rho) - 1e-9)) if len(rho) else 0
    return np.argsort(-rho, kind="stable")[:count]


def themis_allocation(apps: Apps, rho: np.ndarray, capacities: np.ndarray, f: float,
                      leftover: Leftover = "others") -> tuple[np.ndarray, np.ndarray, Auction]:
    """GPUs per type of every app ``(A, T)``: the auction among the offered apps (``rho`` each
    app's current finish-time fairness, ``(A,)``), leftovers proportionally fair among the rest
    (and, ``leftover="all"``, what they leave among every app with room). Returns the GPUs, the
    offered apps' indices and the auction."""
    offered = offered_apps(rho, f)
    auction = partial_allocation(apps.subset(offered), capacities)
    gpus = np.zeros_like(apps.efficiency)
    gpus[offered] = auction.gpus
    rest = np.setdiff1d(np.arange(len(rho)), offered)
    left = np.maximum(capacities - gpus.sum(axis=0), 0.0)
    if len(rest) and left.sum() > 1e-9:
        gpus[rest] = proportionally_fair(apps.subset(rest), left)
    left = np.maximum(capacities - gpus.sum(axis=0), 0.0)
    room = apps.demand - gpus.sum(axis=1)
    if leftover == "all" and left.sum() > 1e-9 and room.max() > 1e-9:
        gpus += proportionally_fair(dataclasses.replace(apps, demand=np.maximum(room, 0.0)),
                                    left, base=gpus)
    return gpus, offered, auction


class ThemisPolicy(TimeSharingPolicy):
    """Finish-time fairness between apps by Themis's partial-allocation auction (see the module).

    Args: as :class:`~bayes_sched.policies.gavel.time_sharing.TimeSharingPolicy`, and
        f: the fairness knob in ``[0, 1)``: the auction is among the ``1 - f`` fraction of apps
            with the worst finish-time fairness (at least one).
        apps: ``"tenant"`` (a tenant's runnable jobs are one app) or ``"job"`` (each job).
        leftover: where GPUs the auction leaves go (:data:`Leftover`): ``"others"`` (Themis)
            or ``"all"`` (work conserving).
    """

    name = "themis"
    needs: tuple[str, ...] = ("throughput", "remaining_steps")
    default_estimators: ClassVar[Mapping[str, str]] = {"throughput": "oracle",
                                                       "remaining_steps": "declared"}
    heterogeneity_aware = True

    def __init__(self, solver: Literal["CLARABEL", "HIGHS"] = "CLARABEL",
                 min_reset_interval: float = 1920.0, seed: int = 0,
                 acquisition: Literal["thompson", "mean"] = "thompson", f: float = 0.8,
                 apps: Literal["tenant", "job"] = "tenant", leftover: Leftover = "others"
                 ) -> None:
        super().__init__(solver, min_reset_interval, seed, acquisition)
        if not 0.0 <= f < 1.0:
            raise ValueError(f"f is {f}: expected a fairness knob in [0, 1)")
        if apps not in ("tenant", "job"):
            raise ValueError(f"apps is {apps!r}: expected 'tenant' or 'job'")
        if leftover not in ("others", "all"):
            raise ValueError(f"leftover is {leftover!r}: expected 'others' or 'all'")
        self.f, self.apps, self.leftover = float(f), apps, leftover
        self._app_of: dict[str, str] = {}
        self._weight: dict[str, float] = {}
        self._now = 0.0
        self._auction_time: float | None = None
        self._shared: dict[str, float] = {}  # S_a
        self._isolated: dict[str, float] = {}  # I_a
        self._done: dict[str, float] = {}  # best-type GPU-seconds done per job, last seen
        self._iso_capacity: dict[str, float] = {}  # C_a(g_iso) at the last recomputation
        self._bundle: dict[str, np.ndarray] = {}  # GPUs per type from the last auction
        self._active: set[str] = set()
        self.auctions = 0
        #: ``rho`` of each app at the last auction (under its previous bundle).
        self.last_rho: dict[str, float] = {}

    def stats(self) -> Mapping[str, float]:
        """The time-sharing figures and ``auctions`` (allocations the auction computed)."""
        return {**super().stats(), "auctions": float(self.auctions)}

    def decide(self, cluster: ClusterState, jobs: Sequence[JobView],
               estimates: Estimates) -> Allocations:
        self._now = cluster.now
        if self.apps == "tenant":
            self._app_of = {job.name: job.tenant for job in jobs}
            self._weight = {t.name: t.weight for t in cluster.spec.tenant_table().tenants}
        else:
            self._app_of = {job.name: job.name for job in jobs}
            self._weight = {}
        return super().decide(cluster, jobs, estimates)

    def allocate_combinations(self, inputs: AllocationInputs) -> np.ndarray | None:
        fallback = self.undeclared_fallback(inputs)
        if fallback is not None:
            return fallback
        names = list(dict.fromkeys(self._app_of.get(n, DEFAULT_TENANT) for n in inputs.names))
        index = {app: k for k, app in enumerate(names)}
        member = np.array([index[self._app_of.get(n, DEFAULT_TENANT)] for n in inputs.names],
                          dtype=np.int64)
        rates = np.where(inputs.throughputs > 0, inputs.throughputs, 0.0)
        best = rates.max(axis=1) if rates.size else np.zeros(inputs.num_jobs)
        runs = best > 0
        sizes = inputs.scale_factors.astype(float)
        safe = np.where(runs, best, 1.0)
        job_work = np.where(runs, sizes * np.maximum(inputs.remaining_steps, 0.0) / safe, 0.0)
        done = np.where(runs, sizes * steps_done(inputs) / safe, 0.0)
        apps, iso = self._apps(names, member, job_work, rates / safe[:, None], sizes,
                               inputs.capacities.astype(float))
        self._account_apps(names, member, inputs.names, done, iso)
        t_id = np.array([self._isolated.get(a, 0.0) for a in names]) + apps.work / iso
        previous = np.stack([self._bundle.get(a, np.zeros(len(inputs.capacities)))
                             for a in names]) if names else np.zeros((0, len(inputs.capacities)))
        rho = apps.finish_times(previous) / np.maximum(t_id, 1e-9)
        gpus, _, _ = themis_allocation(apps, rho, inputs.capacities.astype(float), self.f,
                                       self.leftover)
        self.auctions += 1
        self.last_rho = dict(zip(names, rho.tolist(), strict=True))
        self._bundle = {a: gpus[k] for k, a in enumerate(names)}
        job_gpus = np.zeros((inputs.num_jobs, len(inputs.capacities)))
        for k in range(len(names)):
            mine = np.flatnonzero((member == k) & runs)
            if len(mine):
                job_gpus[mine] = _filled(gpus[k], sizes[mine], np.ones(len(mine)))
        fractions = job_gpus / sizes[:, None]
        fractions[inputs.throughputs <= 0] = 0.0
        return fractions / np.maximum(fractions.sum(axis=1), 1.0)[:, None]

    def _apps(self, names: list[str], member: np.ndarray, job_work: np.ndarray,
              relative: np.ndarray, sizes: np.ndarray, capacities: np.ndarray
              ) -> tuple[Apps, np.ndarray]:
        """The round's :class:`Apps` and each app's isolated capacity ``C_a(g_iso)``."""
        num_apps, num_types = len(names), len(capacities)
        work = np.bincount(member, weights=job_work, minlength=num_apps)
        efficiency = np.zeros((num_apps, num_types))
        for k in range(num_apps):
            mine = member == k
            weights = job_work[mine] if work[k] > 0 else np.ones(int(mine.sum()))
            efficiency[k] = weights @ relative[mine] / max(float(weights.sum()), 1e-12)
        demand = np.bincount(member, weights=sizes, minlength=num_apps)
        shared = np.array([self._shared.get(a, 0.0) for a in names])
        apps = Apps(shared, np.maximum(work, 1e-9), efficiency, demand)
        w = np.array([self._weight.get(a, 1.0) for a in names])
        iso = capacities[None, :] * (w / max(float(w.sum()), 1e-12))[:, None]
        iso *= np.minimum(1.0, demand / np.maximum(iso.sum(axis=1), 1e-12))[:, None]
        return apps, np.maximum((efficiency * iso).sum(axis=1), MIN_CAPACITY)

    def _account_apps(self, names: list[str], member: np.ndarray, jobs: Sequence[str],
                 done: np.ndarray, iso: np.ndarray) -> None:
        """Add the seconds since the last recomputation to the apps active then (``S_a``) and
        the isolated time of the work done since (``I_a``); then this round's state."""
        dt = 0.0 if self._auction_time is None else max(self._now - self._auction_time, 0.0)
        self._auction_time = self._now
        for app in self._active:
            self._shared[app] = self._shared.get(app, 0.0) + dt
        gained = np.zeros(len(names))
        for j, job in enumerate(jobs):
            gained[member[j]] += max(done[j] - self._done.get(job, done[j]), 0.0)
        self._done = dict(zip(jobs, done.tolist(), strict=True))
        for k, app in enumerate(names):
            before = self._iso_capacity.get(app)
            if before:
                self._isolated[app] = self._isolated.get(app, 0.0) + gained[k] / before
            self._iso_capacity[app] = float(iso[k])
        self._active = set(names)


__all__ = ["Apps", "Auction", "Leftover", "ThemisPolicy", "offered_apps", "partial_allocation",
           "proportionally_fair", "themis_allocation"]
