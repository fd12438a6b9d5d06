"""Every job's speedup over a fair share for every node and GPU count, from its job model.

A table holds the allocations a placement can have (:func:`_allocations`: ``r`` GPUs on ``n > 1``
nodes only where they fit, ``r <= capacity * n``; every ``r`` on one node, where the fair share
is taken) and 0 elsewhere: the search reads only repaired states, which never exceed a node.

:class:`SpeedupTables` builds a job's goodput table once per model (cached per job while the
model's version holds and its gradient noise stays within a tolerance; jobs whose models are
equal share one build) and its speedup table, the goodput over that on a fair share, once per
goodput table and round shape. A round then costs a few dictionary reads per job and one gather
into the ``(J, Nmax + 1, Rmax + 1)`` array the search reads: at thousands of jobs a per-job
numpy call each round costs more than the search.

A goodput table is the best of a grid of candidate batches per allocation, each scored as its
throughput (from the throughput fit) times its statistical efficiency (from the gradient noise).
Most rebuilds come from the gradient noise alone moving past the tolerance, so for a point fit
(``risk`` ``None``) the candidates' throughputs are kept per fit (:class:`_Rates`, in a table
bounded by :data:`RATE_CELLS`) and a rebuild only re-scores them: the same numbers, to the bit,
as :meth:`~bayes_sched.jobs.JobModel.goodput` (whose compiled loop makes the throughputs here,
and whose efficiency is :func:`perfmodel.efficiency.efficiency_from_noise`), without raising
every candidate's step time to the fit's ``gamma`` again.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from bayes_sched.acquisition import quantile
from bayes_sched.cluster import ClusterState
from bayes_sched.jobs import BatchLimits, GoodputPosterior, JobModel, JobView
from perfmodel.efficiency import efficiency_from_noise
from perfmodel.goodput import BATCH_GRID_SIZE, GoodputModel, best_valid, candidates_of
from perfmodel.throughput import ThroughputParams, total_batch

#: Most candidate cells (allocations x :data:`~perfmodel.goodput.BATCH_GRID_SIZE`) whose
#: throughputs the tables keep, over all fits (17 bytes a cell, so at most about 17 MB): past it,
#: those no job's table was built from go first, then the least recently used. A table of 16
#: nodes of 4 GPUs and 64 GPUs has about 23,000.
RATE_CELLS = 1_000_000

_RatesKey = tuple[ThroughputParams, BatchLimits, int, int, int]


def _allocations(num_nodes: int, max_r: int, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """The allocations ``(n, r)`` a goodput table holds, nodes and GPUs ``(A,)`` each: ``1 <= n
    <= num_nodes``, ``n <= r <= max_r``, and ``r <= capacity * n`` on several nodes (no more fit
    there; one node holds every ``r``, the fair share a speedup is taken over among them)."""
    rr, nn = np.meshgrid(np.arange(1, max_r + 1), np.arange(1, num_nodes + 1))
    held = (nn <= rr) & ((nn == 1) | (rr <= capacity * nn))
    return nn[held], rr[held]


class _JobEntry:
    """One job's cached goodput table and its last speedup table.

    ``version``, ``noise`` and ``replicas`` are the model version, gradient noise-to-signal ratio
    and GPU count the goodput ``table`` was taken for; ``checked`` the last model object found to
    match them (the estimation stage keeps a job's model object while it is unchanged, so an
    identity test spares the comparison); ``shape`` and ``speedup`` the last speedup table and
    what it was built for; ``capacity`` the GPUs per node it holds allocations for
    (:func:`_allocations`); ``rates`` the key of the candidates' throughputs ``table`` was scored
    from (``None``: none)."""

    __slots__ = ("capacity", "checked", "noise", "rates", "replicas", "shape", "speedup", "table",
                 "version")

    def __init__(self, version: tuple[str, int], noise: float, replicas: int, capacity: int,
                 table: np.ndarray, checked: JobModel, rates: _RatesKey | None) -> None:
        self.version = version
        self.capacity = capacity
        self.rates = rates
        self.noise = noise
        self.replicas = replicas
        self.table = table
        self.checked: JobModel | None = checked if math.isfinite(noise) else None
        self.shape: tuple[int, ...] = ()
        self.speedup: np.ndarray | None = None


class _Rates:
    """A point fit's candidates over the allocations of a goodput table (:func:`_allocations`):
    where each
    allocation's goodput goes in the table (``rows``, ``columns``), whether any batch fits it
    (``feasible``, ``(A,)``), and each candidate batch's throughput (``rate``, examples per
    second), total batch (``batch``) and validity (``invalid`` where it exceeds the largest
    batch), each ``(A, BATCH_GRID_SIZE)``."""

    __slots__ = ("batch", "columns", "feasible", "init", "invalid", "rate", "rows")

    def __init__(self, point: GoodputModel, limits: BatchLimits, num_nodes: int, max_r: int,
                 capacity: int) -> None:
        from perfmodel.goodput_kernel import best_point_batches

        self.rows, self.columns = _allocations(num_nodes, max_r, capacity)
        nodes = self.rows.astype(np.float64)
        replicas = self.columns.astype(np.float64)
        self.init = float(point.init_bsz)
        feasible, local, accum, fits = candidates_of(
            replicas, point.init_bsz, limits.max_batch_size, limits.min_local_bsz,
            limits.max_local_bsz, limits.max_accum_steps, BATCH_GRID_SIZE, True)
        count, grid = local.shape
        cells = count * grid
        # Each candidate as its own row, under infinite gradient noise: its efficiency is then
        # exactly 1, so the compiled loop's score is the candidate's throughput, computed as
        # the loop computes it when it scores the candidates of an allocation.
        rate = np.empty(cells)
        best_point_batches(np.broadcast_to(point.theta, (cells, 7)),
                           np.broadcast_to(np.inf, (cells,)), np.full(cells, self.init),
                           np.repeat(nodes, grid), np.repeat(replicas, grid),
                           local.reshape(cells, 1), accum.reshape(cells, 1),
                           fits.reshape(cells, 1), np.empty(cells, dtype=np.int64), rate)
        self.feasible = feasible
        self.rate = rate.reshape(count, grid)
        self.batch = total_batch(replicas[:, None], local, accum)
        self.invalid = ~fits

    @property
    def cells(self) -> int:
        return int(self.rate.size)

    def goodput(self, noise_to_signal: float) -> np.ndarray:
        """Each allocation's goodput at its best candidate for gradient noise
        ``noise_to_signal``, ``(A,)`` (0 where no batch fits): as
        :meth:`perfmodel.goodput.GoodputModel.optimize` scores and picks
        (:func:`perfmodel.goodput.best_valid`: the first of the largest, a NaN first of all)."""
        value = self.rate * efficiency_from_noise(noise_to_signal, self.init, self.batch)
        _, score = best_valid(value, self.invalid)
        return np.where(self.feasible, score, 0.0)


class SpeedupTables:
    """Every job's speedup over a fair share, from its job model, cached per job.

    Args:
        max_nodes_per_job: most nodes one job may span (the tables' node axis).
        speedup_tolerance: relative change of a job's gradient noise-to-signal ratio below which its
            cached table is reused (a table per job is costly to build).
        risk: ``None`` for the point fit's goodput, ``q`` for its ``q``-quantile under the
            posterior draws.
    """

    def __init__(self, max_nodes_per_job: int, speedup_tolerance: float = 0.02,
                 risk: float | None = None) -> None:
        self.max_nodes_per_job = max_nodes_per_job
        self.speedup_tolerance = speedup_tolerance
        self.risk = risk
        # job -> its cached tables: a job moved to another GPU type has another model, whose
        # versions count from 1 again.
        self._tables: dict[str, _JobEntry] = {}
        # Tables built this round and the last by their inputs: jobs whose models are equal
        # (the same fit, gradient statistics and limits) share one build.
        self._built: dict[tuple[object, ...], np.ndarray] = {}
        self._built_before: dict[tuple[object, ...], np.ndarray] = {}
        # Candidates' throughputs by fit, limits and table shape (point fits only), bounded.
        self._rates: OrderedDict[_RatesKey, _Rates] = OrderedDict()
        self._rate_cells = 0

    def _entry(self, job: JobView, model: JobModel, num_nodes: int, max_r: int,
               capacity: int) -> _JobEntry:
        """``job``'s cache entry holding a goodput table for ``n <= num_nodes`` nodes, ``r <=
        max_r`` GPUs and ``capacity`` GPUs per node, at least (:meth:`_goodput`): the cached one
        while the model's version holds and its noise stays within tolerance, else a new one."""
        entry = self._tables.get(job.name)
        if (entry is not None and entry.replicas >= max_r and entry.table.shape[0] > num_nodes
                and entry.capacity >= capacity):
            if entry.checked is model:
                return entry
            phi = model.noise_to_signal
            if (entry.version == (model.gpu_type, model.version)
                    and abs(phi - entry.noise) <= self.speedup_tolerance * abs(entry.noise)):
                entry.checked = model
                return entry
        phi = model.noise_to_signal
        draws = model.draws
        key = (model.params, model.gradient, model.limits,
               None if draws is None else draws.tobytes(), num_nodes, max_r, capacity)
        built = self._built.get(key)
        if built is None:
            built = self._built_before.get(key)
        if built is None:
            built = self._goodput(model, num_nodes, max_r, capacity)
        self._built[key] = built
        rates = (None if self.risk is not None
                 else self._rates_key(model, num_nodes, max_r, capacity))
        entry = _JobEntry((model.gpu_type, model.version), phi, max_r, capacity, built, model,
                          rates)
        self._tables[job.name] = entry
        return entry

    def _goodput(self, model: JobModel, num_nodes: int, max_r: int, capacity: int
                 ) -> np.ndarray:
        """Fitted goodput of the allocations of :func:`_allocations` (``n <= num_nodes`` nodes,
        ``r <= max_r`` GPUs, nodes of ``capacity`` GPUs), shape ``(num_nodes + 1, max_r + 1)``
        (0 elsewhere), read-only."""
        built = np.zeros((num_nodes + 1, max_r + 1))
        if self.risk is None:
            rates = self._rates_of(model, num_nodes, max_r, capacity)
            built[rates.rows, rates.columns] = rates.goodput(model.noise_to_signal)
            built.flags.writeable = False
            return built
        nodes, replicas = _allocations(num_nodes, max_r, capacity)
        # As in the artifact, speedups use the tuned batch even for a job run at a fixed batch.
        built[nodes, replicas] = quantile(GoodputPosterior(model, nodes, replicas), self.risk)
        built.flags.writeable = False
        return built

    def _rates_of(self, model: JobModel, num_nodes: int, max_r: int, capacity: int) -> _Rates:
        """The candidates' throughputs of ``model``'s point fit for a table of ``num_nodes``
        nodes, ``max_r`` GPUs and nodes of ``capacity`` GPUs: remembered, or made (dropping, while
        the kept ones hold over :data:`RATE_CELLS` cells, those no job's table was built from,
        then the least recently used)."""
        key = self._rates_key(model, num_nodes, max_r, capacity)
        rates = self._rates.get(key)
        if rates is not None:
            self._rates.move_to_end(key)
            return rates
        rates = _Rates(model.goodput_model(), model.limits, num_nodes, max_r, capacity)
        self._rate_cells += rates.cells
        if self._rate_cells > RATE_CELLS:
            used = {entry.rates for entry in self._tables.values()}
            for old in [old for old in self._rates if old not in used]:
                self._rate_cells -= self._rates.pop(old).cells
        while self._rate_cells > RATE_CELLS and self._rates:
            _, dropped = self._rates.popitem(last=False)
            self._rate_cells -= dropped.cells
        self._rates[key] = rates
        return rates

    @staticmethod
    def _rates_key(model: JobModel, num_nodes: int, max_r: int, capacity: int) -> _RatesKey:
        return (model.params, model.limits, num_nodes, max_r, capacity)

    def build(self, jobs: Sequence[JobView], cluster: ClusterState,
              max_replicas: np.ndarray) -> np.ndarray:
        """Speedup over a fair share for every job, node count and GPU count, shape
        ``(J, Nmax + 1, Rmax + 1)``: a job's goodput over its goodput on ``ceil(total GPUs / J)``
        GPUs on one node, for ``r`` up to the larger of its replica cap and that fair share (0
        beyond, and where ``r`` GPUs do not fit on ``n > 1`` nodes: :func:`_allocations`); a job
        without a model, or with no goodput on a fair share, scales linearly."""
        num_jobs = len(jobs)
        n_max = min(cluster.num_nodes, self.max_nodes_per_job)
        capacity = int(cluster.capacity().max())
        fair_r = max(1, math.ceil(cluster.total_gpus / num_jobs))
        r_max = int(max(max_replicas.max(), 1))
        r = np.arange(r_max + 1)
        n = np.arange(n_max + 1)[:, None]
        linear = np.where((n >= 1) & (n <= r), r / fair_r, 0.0)
        # Keep what the jobs of this round use: finished jobs' tables go (memory stays flat
        # however long the trace).
        names = {job.name for job in jobs}
        for name in [name for name in self._tables if name not in names]:
            del self._tables[name]
        self._built_before, self._built = self._built, {}
        # Speedup tables by their goodput table and width, this round: jobs sharing a goodput
        # table share the division too.
        scaled: dict[tuple[int, int], np.ndarray] = {}
        rows = {id(linear): 0}  # each distinct speedup table's row in ``distinct``
        distinct = [linear]
        index: list[int] = []
        cached = self._tables.get
        for job, cap in zip(jobs, np.maximum(max_replicas, fair_r).tolist(), strict=True):
            model = job.model
            if model is None:
                index.append(0)
                continue
            entry = cached(job.name)
            if (entry is None or entry.checked is not model or entry.replicas < cap
                    or entry.table.shape[0] <= n_max or entry.capacity < capacity):
                entry = self._entry(job, model, n_max, cap, capacity)
            width = min(r_max, cap) + 1
            shape = (n_max, width, fair_r, r_max)
            speedup = entry.speedup
            if speedup is None or entry.shape != shape:
                key = (id(entry.table), width)
                speedup = scaled.get(key)
                if speedup is None:
                    speedup = scaled[key] = _speedup(entry.table, n_max, width, fair_r, linear)
                entry.speedup, entry.shape = speedup, shape
            row = rows.get(id(speedup))
            if row is None:
                row = rows[id(speedup)] = len(distinct)
                distinct.append(speedup)
            index.append(row)
        # Each distinct table copied once, then gathered by job.
        stacked = np.concatenate(distinct).reshape(len(distinct), n_max + 1, r_max + 1)
        return np.take(stacked, np.array(index, dtype=np.int64), axis=0)


def _speedup(goodput: np.ndarray, n_max: int, width: int, fair_r: int,
             linear: np.ndarray) -> np.ndarray:
    """The speedup table ``(n_max + 1, Rmax + 1)`` of a goodput table: its first ``width`` GPU
    counts over its goodput on ``fair_r`` GPUs on one node (``linear`` where that is not
    positive), 0 beyond; read-only."""
    speedup = np.zeros_like(linear)
    base = goodput[1, fair_r]
    speedup[:, :width] = (goodput[: n_max + 1, :width] / base if base > 0
                          else linear[:, :width])
    speedup.flags.writeable = False
    return speedup

