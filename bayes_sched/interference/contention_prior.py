"""The contention posterior as a co-location prior: a
:class:`~bayes_sched.colocation.SlowdownPredictor` learned from counters (the ``bo``
policy's first predictor).

Where the cluster collects counters (:attr:`bayes_sched.cluster.ClusterState.counters`), every few
rounds the contention network (:mod:`bayes_sched.contention.inference`: ``prepare`` -> ``fit_svi`` ->
``summarise``) denoises the window's NIC and host-DRAM traffic per node. Each round's node traffic
is then attributed to the jobs that ran there by non-negative least squares over *job classes*
(application x distributed or not), so the demand of a class is learned from every node and round
it appeared in:

    nic[round, node]  ~ sum over jobs on the node of  nic_demand[class]            (per node)
    dram[round, node] ~ sum over jobs on the node of  dram_demand[class] x GPUs there

For a candidate allocation, a job's prior log slowdown is then ``min`` over its nodes and those two
resources of ``log(capacity / offered)`` where the summed offered demand exceeds the capacity and
the job itself offers a noticeable share (proportional sharing: deliberately simpler than any
particular ground-truth law, which the GP residual corrects). Without counters the prior is 0: the
goodput models alone.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import scipy.optimize
import xarray as xr

from bayes_sched.colocation import ColocationRound, SparseCandidates, state_entries
from bayes_sched.topology import NodeTopology
from counters import schema
from counters.errors import CountersError
from perfmodel.errors import UnreliableFitWarning

LOG = logging.getLogger(__name__)

#: Resources the prior models, with the summarise() variable denoising each.
RESOURCES: tuple[str, ...] = ("nic", "dram")


class ContentionPrior:
    """Per-class demand estimates from counters, and the prior log slowdown they imply.

    Args:
        topology: the nodes' layout and capacities (as the counters' producer describes them);
            ``None``: the cluster's, from the first round that brings counters.
        applications: the application names job classes are built from (more are added as
            they are seen).
        every: rounds between contention-network fits.
        max_rows: most recent (round, node) equations kept for the least-squares fit.
        min_share: a job offering less than this fraction of a resource's capacity is not slowed
            by its contention.
        svi_steps: SVI steps per fit.
    """

    name = "contention prior"
    #: :meth:`log_slowdown` reads candidates by their nonzero entries too.
    takes_entries = True

    def __init__(self, topology: NodeTopology | None = None, applications: Sequence[str] = (),
                 every: int = 10, max_rows: int = 2000, min_share: float = 0.05,
                 svi_steps: int = 60) -> None:
        self.topology = topology
        self.applications = list(applications)
        self.every = every
        self.max_rows = max_rows
        self.min_share = min_share
        self.svi_steps = svi_steps
        # A node's NIC and host-DRAM capacity, byte/s (zeros until a topology is known; no
        # prior is predicted before a fit, which needs one).
        self.capacity = (np.zeros(len(RESOURCES)) if topology is None
                         else np.array([topology.nic_capacity, topology.dram_capacity]))
        # Demand per class (application x distributed) and resource, byte/s; NIC per node,
        # DRAM per GPU.
        self.demand = np.zeros((len(self.applications), 2, len(RESOURCES)))
        self.known = False
        self.fits = 0
        self.fit_seconds: list[float] = []
        self.problems: list[str] = []
        #: One line per fit used although it did not converge (perfmodel.convergence).
        self.unconverged: list[str] = []
        self._rows: list[np.ndarray] = []      # each (2 resources, classes) design row pair
        self._targets: list[np.ndarray] = []   # each (2,) observed node traffic
        self._rounds: list[tuple[float, float, dict[str, np.ndarray], dict[str, str]]] = []
        self._calls = 0

    def class_of(self, application: str) -> int:
        if application not in self.applications:
            self.applications.append(application)
            self.demand = np.concatenate([self.demand, np.zeros((1, 2, len(RESOURCES)))])
        return self.applications.index(application)

    # --- the predictor ---------------------------------------------------------------------------

    def learn(self, observation: ColocationRound) -> None:
        """Where the cluster collects counters: remember the round (if time passed) and, every
        ``every`` such rounds, refit (:meth:`update`, with the round's time origin: the
        counters' time axis may be wall-clock). Rounds without counters are ignored."""
        if observation.counters is None:
            return
        if self.topology is None:
            if observation.topology is None:
                raise ValueError("contention prior: counters came without the nodes' topology")
            self.topology = observation.topology
            self.capacity = np.array([self.topology.nic_capacity, self.topology.dram_capacity])
        if observation.start < observation.end:
            allocation = observation.allocation
            self.record_round(
                observation.start, observation.end,
                {name: allocation[j] for j, name in enumerate(observation.names)
                 if allocation[j].any()},
                dict(zip(observation.names, observation.applications, strict=True)))
        self.update(observation.counters, origin=observation.time_origin)

    def diagnostics(self, allocation: np.ndarray | SparseCandidates,
                    applications: Sequence[str]) -> dict[str, float]:
        """``contention_fits`` so far and ``prior_chosen``, the mean prior log slowdown in
        ``allocation`` ``(J, N)`` (or that one state by its entries, ``(1, J, N)``)."""
        return {"contention_fits": float(self.fits),
                "prior_chosen": float(self.log_slowdown(
                    allocation[None] if isinstance(allocation, np.ndarray) else allocation,
                    applications).mean())}

    # --- learning ---------------------------------------------------------------------------------

    def record_round(self, start: float, end: float, allocations: Mapping[str, np.ndarray],
                     applications: Mapping[str, str]) -> None:
        """Remember which jobs ran where during ``[start, end]`` (seconds since the start)."""
        self._rounds.append((start, end, {k: np.asarray(v) for k, v in allocations.items()},
                             dict(applications)))

    def update(self, counters: xr.Dataset | None, origin: float = 0.0) -> None:
        """Every ``every`` calls, fit the contention network on ``counters`` and refit demands.

        ``origin``: the epoch second the cluster's time 0 corresponds to in the counters' time
        axis. A window the network cannot use is reported in :attr:`problems` and skipped.
        """
        self._calls += 1
        if counters is None or self._calls % self.every or not self._rounds:
            return
        if self.topology is None:
            raise ValueError("the contention prior has no topology: give one, or learn() a round")
        # Imported here, not at module level: the contention network loads torch and pyro,
        # and reading this predictor's options (``bayes-sched list estimators``) needs neither.
        from bayes_sched.contention.inference import fit_svi, prepare, summarise

        start = time.perf_counter()
        try:
            window = prepare(counters, self.topology, where="cluster counters")
            with warnings.catch_warnings(record=True) as caught:
                # A fit that did not converge is still this round's best estimate (a per-round
                # budget of steps, not a final fit): used, and its verdict kept in unconverged.
                warnings.simplefilter("always", UnreliableFitWarning)
                draws = fit_svi(window, num_steps=self.svi_steps, num_samples=32, seed=self.fits)
            for warning in caught:
                if issubclass(warning.category, UnreliableFitWarning):
                    self.unconverged.append(str(warning.message))
                else:
                    warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                           warning.lineno)
            posterior = summarise(window, draws)
        except (CountersError, ValueError, RuntimeError) as error:
            self.problems.append(str(error))
            LOG.warning("bo: contention posterior unavailable (%s); models alone", error)
            return
        self.fits += 1
        seconds = (posterior[schema.TIME].values.astype("datetime64[ns]").astype(np.int64)
                   / 1e9 - origin)
        nic = posterior["nic_rate"].sel(quantile=0.5).transpose(schema.TIME, schema.NODE).values
        dram = posterior["dram_rate"].sel(quantile=0.5).transpose(schema.TIME, schema.NODE).values
        first_time = seconds.min()
        for round_start, round_end, allocations, apps in self._rounds:
            inside = (seconds > round_start) & (seconds <= round_end + 1e-6)
            if round_start < first_time - 1e-6 or not inside.any():
                continue
            self._add_round(allocations, apps, nic[inside].mean(0), dram[inside].mean(0))
        self._rounds = [r for r in self._rounds if r[1] > seconds.max()]
        self._solve()
        self.fit_seconds.append(time.perf_counter() - start)

    def _add_round(self, allocations: Mapping[str, np.ndarray], apps: Mapping[str, str],
                   nic: np.ndarray, dram: np.ndarray) -> None:
        num_nodes = len(nic)
        for name in allocations:
            self.class_of(apps[name])
        design = np.zeros((num_nodes, 2, len(self.applications) * 2))
        for name, counts in allocations.items():
            counts = np.asarray(counts)
            if not counts.any():
                continue
            column = self.class_of(apps[name]) * 2 + int(np.count_nonzero(counts) > 1)
            used = counts > 0
            design[used, 0, column] += 1.0
            design[used, 1, column] += counts[used]
        for n in range(num_nodes):
            if np.isfinite(nic[n]) and np.isfinite(dram[n]):
                self._rows.append(design[n])
                self._targets.append(np.array([nic[n], dram[n]]))
        self._rows = self._rows[-self.max_rows:]
        self._targets = self._targets[-self.max_rows:]

    def _solve(self) -> None:
        if not self._rows:
            return
        classes = len(self.applications) * 2
        rows = [np.pad(r, ((0, 0), (0, classes - r.shape[1]))) for r in self._rows]
        design = np.stack(rows)                                 # (M, 2, classes)
        target = np.stack(self._targets)                        # (M, 2)
        demand = np.zeros((classes, len(RESOURCES)))
        for k in range(len(RESOURCES)):
            a, b = design[:, k, :], target[:, k]
            seen = a.any(axis=0)
            if not seen.any():
                continue
            scale = self.capacity[k]
            solution, _ = scipy.optimize.nnls(a[:, seen], b / scale)
            demand[seen, k] = solution * scale
        self.demand = demand.reshape(len(self.applications), 2, len(RESOURCES))
        self.known = True

    # --- the prior ----------------------------------------------------------------------------------

    def pair_table(self, applications: Sequence[str], draws: bool = False
                   ) -> tuple[np.ndarray, np.ndarray] | None:
        """Before any demand is known the prior predicts no slowdown: a table of no classes
        (``(0, 0)``); after, ``None`` (shared capacity is not a sum of pair effects)."""
        if self.known:
            return None
        return np.zeros(len(applications), np.int64), np.zeros((0, 0))

    def log_slowdown(self, states: np.ndarray | SparseCandidates, applications: Sequence[str],
                     draws: bool = False) -> np.ndarray:
        """Prior log slowdown (<= 0) of every job in every candidate, ``(P, J, N) -> (P, J)``
        (``states`` dense or by their entries; the posterior median's demands: no draws, so
        ``draws`` changes nothing)."""
        size, num_jobs, num_nodes = states.shape
        out = np.zeros((size, num_jobs))
        if not self.known:
            return out
        app = np.array([self.class_of(a) for a in applications])
        p, j, n, gpus = state_entries(states)
        if p.size == 0:
            return out
        pj = p * num_jobs + j
        pn = p * num_nodes + n
        nodes = np.bincount(pj, minlength=size * num_jobs)
        distributed = (nodes[pj] > 1).astype(int)
        gpus = gpus.astype(np.float64)
        per_entry = self.demand[app[j], distributed]                    # (E, 2)
        offered = np.stack([per_entry[:, 0], per_entry[:, 1] * gpus], axis=1)
        offered = np.minimum(offered, self.capacity)
        total = np.stack([np.bincount(pn, weights=offered[:, k], minlength=size * num_nodes)
                          for k in range(len(RESOURCES))], axis=1)[pn]  # (E, 2)
        share = np.where(offered > self.min_share * self.capacity,
                         np.log(np.minimum(1.0, self.capacity / np.maximum(total, 1e-9))), 0.0)
        worst = share.min(axis=1)
        flat = np.zeros(size * num_jobs)
        np.minimum.at(flat, pj, worst)
        return flat.reshape(size, num_jobs)
