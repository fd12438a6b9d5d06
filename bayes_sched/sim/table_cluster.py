"""The throughput-table world: a simulated cluster whose jobs progress at measured steps/s.

The job physics beside the Pollux profiles (:mod:`bayes_sched.sim.physics`): a job (job type, scale
factor, total steps; :mod:`bayes_sched.sim.gavel_jobs`) runs only on exactly its scale factor of
GPUs, all of one type, at the table's steps/s for (job type, scale factor, GPU type)
(:func:`job_steps_per_second`; two jobs of one scale factor sharing their GPUs run at the measured
pair rates, :func:`pair_steps_per_second`). As in Gavel's simulator, a round of ``s`` seconds runs
``floor(rate * s)`` steps (no more than the job has left) and a job finishes ``steps / rate``
seconds into its last round; there is no restart cost (Gavel's simulator charges none). Jobs are
read from a finite trace or pulled lazily from an endless generator; the run ends when every job
of ``jobs_to_complete`` (or, without it, every job) has finished.

Space sharing: a decision that is a :class:`~bayes_sched.cluster.PackedAllocations` may put two
jobs on the same GPUs; each then runs at its measured rate in that pair. A pair the table marks as
not fitting in memory (rate 0) launches and fails, as it would on a real cluster: both jobs hold
their GPUs for the round and report out of memory in their paired cells (the other jobs of the
decision run as decided). A pair the table does not hold at all is rejected with a one-line error
naming it.

What policies see (:meth:`TableCluster.job_views`): the job's type and scale factor (the user's
request), submission time, attained GPU-seconds, its allocation and restarts, the steps it has
done and the steps its user declared (``target_steps``: Gavel's traces declare them, and its
finish-time-fairness and min-total-duration policies read them), and the throughput it measured
in the last round with the cell it ran in (``cell_observations``: job type, scale factor, GPU type,
partner job type when it shared its GPUs; steps/s over the seconds it ran). A measurement carries
seeded multiplicative noise: the true rate times ``exp(measurement_noise * z)``, ``z`` standard
normal from the cluster's own stream (``noise_seed``), so the noise changes what a job reports and
never how fast it runs: a policy that reads no report runs exactly as without noise.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bayes_sched.cells import Cell, CellObservation
from bayes_sched.cluster import (
    Allocations,
    ClusterState,
    PackedAllocations,
    shared_pairs,
    validate_allocations,
)
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.jobs import AllocationChange, AllocationHistory, BatchLimits, JobSettings, JobView
from bayes_sched.sim.gavel_jobs import TableJobSpec
from bayes_sched.throughputs import ThroughputTable

#: Default log-scale standard deviation of a reported steps/s (5 %): a round-long average of step
#: times still varies by a few percent between rounds on shared nodes (input pipelines, co-runners
#: on the host, clock boost); it changes reports only, never the jobs' progress.
DEFAULT_MEASUREMENT_NOISE = 0.05


def job_steps_per_second(table: ThroughputTable, job: TableJobSpec, gpu: str) -> float:
    """Steps/s of ``job`` alone on its scale factor of ``gpu`` GPUs (0 where it cannot run)."""
    return table.steps_per_second(job.job_type, job.scale_factor, gpu) or 0.0


def pair_steps_per_second(table: ThroughputTable, a: TableJobSpec, b: TableJobSpec, gpu: str
                          ) -> tuple[float, float]:
    """Steps/s of ``a`` and ``b`` sharing their GPUs of type ``gpu`` (0, 0 where the pair was
    not measured or does not fit in memory)."""
    rates = table.pair_steps_per_second(gpu, (a.job_type, a.scale_factor),
                                        (b.job_type, b.scale_factor))
    return rates or (0.0, 0.0)


@dataclass
class TableJob:
    """One job's state in the simulation (simulator side)."""

    spec: TableJobSpec
    steps_done: float = 0.0
    attained_service: float = 0.0
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    num_restarts: int | None = None
    start_time: float | None = None
    completion_time: float | None = None
    allocation_history: list[AllocationChange] = field(default_factory=list)
    reports: tuple[CellObservation, ...] = ()  # what it measured in the last round
    # Derived from ``counts`` when it changes (kept so a round does not recompute them): a
    # read-only view of the history, the GPUs held, their type (None: none, or several types);
    # the settings its views carry.
    history: Sequence[AllocationChange] = ()
    num_gpus: int = 0
    gpu_type: str | None = None
    settings: JobSettings = field(default_factory=JobSettings)
    # Kept from admission: steps/s alone on each GPU type of the cluster (0: cannot run), and
    # the fields of its views that never change (each round's view updates the others).
    solo_rates: dict[str, float] = field(default_factory=dict)
    view: JobView | None = None

    @property
    def active(self) -> bool:
        return self.completion_time is None


#: Simulated seconds jobs may wait with no GPU held before a run is given up as stalled (a
#: healthy policy runs something every round it has jobs; 30 days leaves any plan room).
STALL_LIMIT = 30 * 24 * 3600.0

#: A Gavel job declares no batch limits; the views carry this placeholder.
_NO_LIMITS = BatchLimits(1, 1, 1, 1)


def check_measured_types(table: ThroughputTable, spec: ClusterSpec) -> None:
    """Refuse a cluster with GPU types ``table`` has no steps/s for: in the throughput-table
    world a job runs at its measured rate, so such GPUs could never run a job and would sit idle
    for the whole run, quietly diluting its utilisation (a cluster of ``a100`` and ``v100`` on
    Gavel's table, which measures ``k80``, ``p100`` and ``v100``).

    Raises:
        InputError: one line naming the unmeasured types and the types the table measures.
    """
    measured = table.gpu_types()
    unmeasured = [t for t in dict.fromkeys(spec.gpu_types) if t not in measured]
    if unmeasured:
        where = f" ({Path(table.source).name})" if table.source else ""
        types, have, their = (("types", "have", "their") if len(unmeasured) > 1
                              else ("type", "has", "its"))
        raise InputError(
            f"GPU {types} {', '.join(unmeasured)} of the cluster ({spec.describe()}) {have} no "
            f"measured throughputs in the table{where}, so {their} GPUs could run no job: "
            f"expected types of {', '.join(measured)}")


class TableCluster:
    """A simulated cluster of typed GPUs running throughput-table jobs (a
    :class:`~bayes_sched.cluster.Cluster`).

    Args:
        jobs: the jobs, sorted by submission time (a tuple, or an endless iterator).
        spec: the nodes (GPU types from the table) and round interval.
        table: the measured throughputs the jobs run at.
        jobs_to_complete: names of the jobs whose completion ends the run (default: all).
        max_time: give up after this many simulated seconds.
        source: where the jobs came from (for messages).
        measurement_noise: log-scale standard deviation of the noise on a reported steps/s
            (:data:`DEFAULT_MEASUREMENT_NOISE`; 0: reports are the true rates).
        noise_seed: seeds the measurement noise (a stream of its own).
        stall_limit: give up once jobs have waited this many simulated seconds with no GPU
            held by any job (the policy stalled: a solver failing every round, say), where the
            run would otherwise go on to ``max_time``; ``stalled_at`` says when it began.

    Raises:
        InputError: a GPU type of the cluster without measurements in ``table``
            (:func:`check_measured_types`), a job no GPU type of the cluster can run (naming
            it), jobs out of order.
    """

    def __init__(self, jobs: Iterable[TableJobSpec], spec: ClusterSpec, table: ThroughputTable,
                 jobs_to_complete: Iterable[str] | None = None,
                 max_time: float = 1e9, source: str = "",
                 measurement_noise: float = DEFAULT_MEASUREMENT_NOISE, noise_seed: int = 0,
                 stall_limit: float = STALL_LIMIT) -> None:
        if not (math.isfinite(measurement_noise) and measurement_noise >= 0):
            raise ValueError(f"measurement_noise is {measurement_noise}: expected a log-scale "
                             "standard deviation >= 0")
        self.measurement_noise = float(measurement_noise)
        self._noise = np.random.default_rng(noise_seed)
        check_measured_types(table, spec)
        self.spec = spec
        self.table = table
        self.max_time = float(max_time)
        self.stall_limit = float(stall_limit)
        self._idle_since: float | None = None  # since when jobs wait and no GPU is held
        self.stalled_at: float | None = None
        self.source = source
        self._now = 0.0
        self._types = spec.gpu_types
        self._node_type = np.array(self._types)
        self._incoming: Iterator[TableJobSpec] = iter(jobs)
        self._next: TableJobSpec | None = None
        self._exhausted = False
        self.jobs: dict[str, TableJob] = {}
        self._active: dict[str, TableJob] = {}
        self._last_submit = 0.0
        # Jobs whose completion ends the run, not yet finished (None: every job).
        self._waiting = None if jobs_to_complete is None else set(jobs_to_complete)
        self._allocations: Allocations = {}
        self._partner: dict[str, str] = {}  # job -> the job sharing its GPUs this round
        self.misfit_rounds = 0  # rounds a job held GPUs it could not run on
        self._cells: dict[tuple[str, int, str, str | None], Cell] = {}  # reported cells, reused
        # Per round: time and busy GPUs per GPU type (sorted type names in busy_types).
        self.busy_types = tuple(sorted(set(self._types)))
        self._node_type_index = np.array([self.busy_types.index(t) for t in self._types])
        self._busy_index = {t: i for i, t in enumerate(self.busy_types)}
        self.timeline_time: list[float] = []
        self.timeline_busy: list[np.ndarray] = []
        self.timeline_active: list[int] = []
        self._pull()

    # --- arrivals -------------------------------------------------------------------------------

    def _check(self, job: TableJobSpec) -> None:
        runnable = [g for g in set(self._types)
                    if job_steps_per_second(self.table, job, g) > 0
                    and self.spec.gpus_of_type(g) >= job.scale_factor]
        if not runnable:
            raise InputError(
                f"job '{job.name}' ({job.job_type}, {job.scale_factor} GPUs) can run on no GPU "
                f"type of the cluster ({self.spec.describe()}): expected a measured throughput "
                "on a type with enough GPUs", self.source or None, column="job_type")

    def _pull(self) -> None:
        """Admit every job submitted by now (reading ahead one job)."""
        while not self._exhausted:
            if self._next is None:
                nxt = next(self._incoming, None)
                if nxt is None:
                    self._exhausted = True
                    return
                if nxt.submit_time < self._last_submit:
                    raise InputError(f"job '{nxt.name}' is submitted before the previous one: "
                                     "expected jobs sorted by submission time",
                                     self.source or None)
                self._check(nxt)
                self._next, self._last_submit = nxt, nxt.submit_time
            if self._next.submit_time > self._now:
                return
            counts = np.zeros(self.spec.num_nodes, np.int64)
            counts.flags.writeable = False  # replaced, never written: views share it
            job = TableJob(self._next, counts=counts,
                           settings=JobSettings(self._next.batch_size, self._next.scale_factor),
                           solo_rates={gpu: job_steps_per_second(self.table, self._next, gpu)
                                       for gpu in self.busy_types})
            self.jobs[job.spec.name] = job
            self._active[job.spec.name] = job
            self._next = None

    def standalone_seconds(self, spec: TableJobSpec) -> float:
        """Seconds the job would take alone on its GPUs of the fastest type of the cluster
        (the denominator of its finish-time fairness)."""
        rates = [job_steps_per_second(self.table, spec, g) for g in set(self._types)]
        best = max(rates, default=0.0)
        return spec.total_steps / best if best > 0 else float("inf")

    # --- Cluster interface ----------------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        return ClusterState(spec=self.spec, now=self._now)

    def job_views(self) -> list[JobView]:
        views = []
        now = self._now
        for job in self._active.values():
            spec = job.spec
            if job.view is None:  # built once with construction's checks, then updated
                job.view = JobView(
                    name=spec.name, application=spec.job_type, submit_time=spec.submit_time,
                    age=0.0, attained_service=0.0, allocation=job.counts, num_restarts=0,
                    requested_replicas=spec.scale_factor, requested_batch_size=spec.batch_size,
                    settings=job.settings, limits=_NO_LIMITS, target_steps=spec.total_steps,
                    tenant=spec.tenant)
            views.append(job.view.updated(
                age=now - spec.submit_time, attained_service=job.attained_service,
                allocation=job.counts, num_restarts=job.num_restarts or 0,
                progress=job.steps_done, allocation_history=job.history,
                cell_observations=job.reports))
        return views

    def true_remaining_steps(self, name: str) -> float:
        """Steps job ``name`` truly has left before it stops (its true total less the steps
        done; a job that ends early stops before its declaration): simulator truth, for the
        world's oracle (``0`` for a job not active)."""
        job = self._active.get(name)
        return 0.0 if job is None else max(self._true_total_steps(job) - job.steps_done, 0.0)

    def _true_total_steps(self, job: TableJob) -> float:
        return float(job.spec.total_steps)

    def _job_type(self, job: TableJob) -> str:
        """The job type the job runs as now."""
        return job.spec.job_type

    def _report(self, job: TableJob, steps_per_second: float, seconds: float) -> None:
        """Record what the job measured this round: ``steps_per_second`` over ``seconds`` in the
        cell it ran in, with the cluster's measurement noise (nothing when it did not run)."""
        self._report_all([(job, steps_per_second, seconds)])

    def _report_all(self, ran: Sequence[tuple[TableJob, float, float]]) -> None:
        """:meth:`_report` for each ``(job, steps/s, seconds)`` in order, the noise drawn in one
        call (the same draws, in the same order, as one call per job)."""
        measuring = []
        for item in ran:
            if item[2] <= 0 or item[1] <= 0:
                item[0].reports = ()
            else:
                measuring.append(item)
        if not measuring:
            return
        factors = ([math.exp(self.measurement_noise * z)
                    for z in self._noise.standard_normal(len(measuring)).tolist()]
                   if self.measurement_noise > 0 else [1.0] * len(measuring))
        for (job, steps_per_second, seconds), factor in zip(measuring, factors, strict=True):
            gpu = job.gpu_type or str(self._node_type[job.counts > 0][0])
            other = self._partner.get(job.spec.name)
            partner = (self._job_type(self._active[other])
                       if other is not None and other in self._active else None)
            key = (self._job_type(job), job.spec.scale_factor, gpu, partner)
            cell = self._cells.get(key)
            if cell is None:
                cell = self._cells[key] = Cell(*key)
            job.reports = (CellObservation(cell, steps_per_second * factor, seconds,
                                           self._now + seconds),)

    def allocations(self) -> Allocations:
        pairs = {(min(p), max(p)) for p in self._partner.items()
                 if p[0] in self._allocations and p[1] in self._allocations}
        return PackedAllocations({name: counts.copy() for name, counts in
                                  self._allocations.items()}, sorted(pairs))

    def apply(self, allocations: Mapping[str, np.ndarray]) -> None:
        new = validate_allocations(allocations, self.state, list(self._active), sharing=True)
        partner: dict[str, str] = {}
        for a, b in shared_pairs(allocations):
            gpu = str(self._node_type[new[a] > 0][0])
            spec_a, spec_b = self._active[a].spec, self._active[b].spec
            if self.table.pair_steps_per_second(gpu, (spec_a.job_type, spec_a.scale_factor),
                                                (spec_b.job_type, spec_b.scale_factor)) is None:
                raise AllocationError(f"jobs '{a}' and '{b}' share {gpu} GPUs but the throughput "
                                      "table holds no measured pair rate for them: expected a "
                                      "measured pair")
            # A pair marked as not fitting (rate 0) launches and fails: see advance().
            partner[a], partner[b] = b, a
        empty = np.zeros(self.spec.num_nodes, dtype=np.int64)
        active = list(self._active.values())
        if active:
            # Most jobs' GPUs change in a round of time sharing: derive what the changed jobs
            # keep (GPUs held, their one type or None) for all of them at once.
            wanted = np.stack([new.get(job.spec.name, empty) for job in active])
            changed = np.flatnonzero(
                (np.stack([job.counts for job in active]) != wanted).any(axis=1))
            rows = wanted[changed]
            gpus = rows.sum(axis=1).tolist()
            used = rows > 0
            lowest = np.where(used, self._node_type_index, len(self.busy_types)).min(axis=1)
            one_type = (lowest == np.where(used, self._node_type_index, -1).max(axis=1)).tolist()
            for k, (i, counts, held) in enumerate(zip(changed.tolist(), rows.tolist(), gpus,
                                                      strict=True)):
                job = active[i]
                job.counts = rows[k].copy()  # its own (a view would keep the whole round's)
                job.counts.flags.writeable = False  # shared with the job's views
                job.allocation_history.append((self._now, tuple(counts)))
                job.history = AllocationHistory(job.allocation_history)
                job.num_gpus = held
                job.gpu_type = self.busy_types[lowest[k]] if one_type[k] else None
                if held:
                    if job.num_restarts is None:
                        job.num_restarts, job.start_time = 0, self._now
                    else:
                        job.num_restarts += 1
        self._allocations = new
        self._partner = partner

    def _rate(self, job: TableJob) -> float:
        """Steps/s on the job's current GPUs: 0 unless they are exactly its scale factor of GPUs
        of one type."""
        if not job.num_gpus:
            return 0.0
        if job.gpu_type is None or job.num_gpus != job.spec.scale_factor:
            self.misfit_rounds += 1
            return 0.0
        return self._steps_per_second(job, job.gpu_type)

    def _fits_nowhere_here(self, job: TableJob) -> bool:
        """Whether the job holds exactly its scale factor of GPUs of one type and still cannot
        run (its table entry there, alone or beside its partner, is 0 or missing: out of
        memory)."""
        used = job.counts > 0
        return (bool(used.any()) and len(set(self._node_type[used])) == 1
                and int(job.counts.sum()) == job.spec.scale_factor)

    def _out_of_memory_report(self, job: TableJob, seconds: float) -> CellObservation:
        gpu = str(self._node_type[job.counts > 0][0])
        other = self._partner.get(job.spec.name)
        partner = (self._job_type(self._active[other])
                   if other is not None and other in self._active else None)
        cell = Cell(self._job_type(job), job.spec.scale_factor, gpu, partner)
        return CellObservation(cell, 0.0, seconds, self._now + seconds, out_of_memory=True)

    def _steps_per_second(self, job: TableJob, gpu: str) -> float:
        """Steps/s of the job on its GPUs of type ``gpu`` (the physics' rate law): at its
        measured pair rate where it shares them this round, else alone."""
        other = self._partner.get(job.spec.name)
        if other is not None and other in self._active:
            return pair_steps_per_second(self.table, job.spec, self._active[other].spec, gpu)[0]
        return job.solo_rates[gpu]

    def _count_busy(self, job: TableJob, busy: np.ndarray) -> None:
        """Add the job's GPUs to ``busy`` (GPUs per type, :attr:`busy_types` order); a GPU two
        jobs share is busy once."""
        gpus = job.num_gpus
        shared_with = self._partner.get(job.spec.name)
        if gpus and (shared_with is None or shared_with not in self._active
                     or job.spec.name < shared_with):
            gpu_type = job.gpu_type or str(self._node_type[job.counts > 0][0])
            busy[self._busy_index[gpu_type]] += gpus

    def _end_round(self, seconds: float, busy: np.ndarray, finished: list[str]) -> None:
        """Record the timeline (jobs of the round: those submitted by its start and unfinished
        then), retire the finished jobs, move the clock, admit arrivals."""
        self.timeline_active.append(len(self._active))
        for name in finished:
            del self._active[name]
            if self._waiting is not None:
                self._waiting.discard(name)
            self._allocations.pop(name, None)
        if self._active and not busy.any():
            self._idle_since = self._now if self._idle_since is None else self._idle_since
        else:
            self._idle_since = None
        self._now += seconds
        self.timeline_time.append(self._now)
        self.timeline_busy.append(busy)
        self._pull()

    def advance(self, seconds: float) -> None:
        busy = np.zeros(len(self.busy_types), dtype=np.int64)
        finished = []
        ran = []  # reported after the loop, the noise drawn at once
        for name, job in self._active.items():
            if not job.num_gpus:  # waiting: nothing runs, nothing to report
                job.reports = ()
                continue
            self._count_busy(job, busy)
            rate = self._rate(job)
            if rate <= 0:
                job.reports = ()
                if self._fits_nowhere_here(job):  # a failed launch: the job learns it
                    job.reports = (self._out_of_memory_report(job, seconds),)
                continue
            gpus = job.num_gpus
            left = job.spec.total_steps - job.steps_done
            # Whole steps per round, as Gavel's simulator counts them.
            steps = min(float(math.floor(rate * seconds)), left)
            elapsed = steps / rate
            ran.append((job, rate, elapsed))
            job.steps_done += steps
            job.attained_service += elapsed * gpus
            if job.spec.total_steps - job.steps_done <= 0:
                job.completion_time = self._now + elapsed
                finished.append(name)
        self._report_all(ran)
        self._end_round(seconds, busy, finished)

    def done(self) -> bool:
        if self._now >= self.max_time:
            return True
        if self._idle_since is not None and self._now - self._idle_since >= self.stall_limit:
            self.stalled_at = self._idle_since
            return True
        if self._waiting is not None:
            return not self._waiting
        return self._exhausted and self._next is None and not self._active
