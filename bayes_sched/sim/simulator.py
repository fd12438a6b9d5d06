"""The simulated cluster: the nodes of a cluster spec running jobs with the artifact's physics.

Time advances in scheduling rounds. Within a round each running job trains at the goodput its
placement and batch give (:mod:`bayes_sched.sim.physics`), crossing epochs, re-tuning its batch at
each epoch and round through its agent, and finishing when it reaches its target progress. A job
that is started, moved or resized first pays its application's restart delay (the cluster spec's; 30
s by default: checkpoint and restart) on its new GPUs. With ``interference > 0``, a distributed job
that shares a node with another distributed job runs that much slower. With a ``hidden`` law
(:mod:`bayes_sched.sim.laws`), co-located jobs also slow each other as that law says, and where
the law models resources the cluster collects its counters, which policies see in
:attr:`ClusterState.counters`.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import xarray as xr

from bayes_sched.agent import JobAgent, choose_batches
from bayes_sched.cluster import Allocations, ClusterState, placement_of, validate_allocations
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.estimation import RefitRule
from bayes_sched.jobs import JobSettings, JobSpec, JobView
from bayes_sched.sim.laws import HiddenInterference, RunningJob
from bayes_sched.sim.physics import (
    GPU_TYPE,
    Application,
    get_application,
    reported_gradient_bytes,
)
from bayes_sched.sim.typed_profiles import (
    NO_TYPE_PROFILES,
    TypedApplication,
    TypeProfiles,
    check_cluster_types,
    slowest_type,
)
from bayes_sched.sim.workload import Workload
from perfmodel.efficiency import scale_invariant_gain
from perfmodel.throughput import seconds_per_step


@dataclass(frozen=True, init=False)
class SimConfig:
    """Simulation settings: the cluster and how the simulation runs.

    Build it from a cluster spec, ``SimConfig(cluster=parse_cluster_spec("16x4:t4"))``, or for a
    homogeneous cluster of the physics' GPU type as ``SimConfig(num_nodes=16, gpus_per_node=4)``
    (the default); ``interval`` and ``restart_delay``, where given, override the spec's.

    Attributes:
        cluster: nodes (one GPU type: the physics', :data:`~bayes_sched.sim.physics.GPU_TYPE`),
            restart delays (the artifact: 30 s) and the round interval (the artifact: 60 s).
        interference: fractional slowdown of distributed jobs sharing a node with another
            distributed job (the artifact's settings: 0, 0.25, 0.5).
        min_refit_interval: seconds between throughput refits of one job's model, by its agent
            or, for a job that reports no fit, by the loop's estimation stage; 0 (the
            default) refits as soon as a new shape is measured, as the artifact's agent does (a
            model left stale for a few rounds mis-tunes the batch and mis-states the speedups
            Pollux allocates by).
        refit_on_new_bsz: also refit when a new micro-batch size is measured (the artifact
            refits on every new ``(nodes, replicas, m)``); by default only new shapes, and new
            micro-batches while fewer than two were seen, trigger a refit.
        max_time: give up after this many simulated seconds (jobs left unfinished are reported).
        hidden: a hidden interference law (:mod:`bayes_sched.sim.laws`), or ``None``; it must
            fit the cluster (:meth:`HiddenInterference.check_cluster`).
        counter_rounds: rounds of counters kept in the window policies see.
        seed: seeds the simulator's own random stream (the measurement noise and gaps of the
            counters a hidden law emits); policies and hidden laws take their own seed options.
        profiles: step times measured per GPU type, used where present; the other types' are
            derived (:class:`~bayes_sched.sim.typed_profiles.TypeProfiles`).

    Raises:
        InputError: a bad setting, a cluster the physics cannot simulate (another GPU type, or
            several), or a hidden law that does not fit the cluster, naming the field.
    """

    cluster: ClusterSpec
    interference: float
    min_refit_interval: float
    refit_on_new_bsz: bool
    max_time: float
    hidden: HiddenInterference | None = field(compare=False)
    counter_rounds: int
    seed: int
    profiles: TypeProfiles = field(compare=False)

    def __init__(self, num_nodes: int | None = None, gpus_per_node: int | None = None,
                 interval: float | None = None, restart_delay: float | None = None,
                 interference: float = 0.0, min_refit_interval: float = 0.0,
                 refit_on_new_bsz: bool = False, max_time: float = 30 * 24 * 3600.0,
                 hidden: HiddenInterference | None = None, counter_rounds: int = 5, *,
                 cluster: ClusterSpec | None = None, seed: int = 0,
                 profiles: TypeProfiles = NO_TYPE_PROFILES) -> None:
        if cluster is None:
            cluster = ClusterSpec.homogeneous(16 if num_nodes is None else num_nodes,
                                              4 if gpus_per_node is None else gpus_per_node,
                                              GPU_TYPE)
        elif num_nodes is not None or gpus_per_node is not None:
            raise InputError("num_nodes/gpus_per_node given with a cluster spec: expected one "
                             "or the other")
        if interval is not None:
            if interval <= 0:
                raise InputError(f"interval is {interval}: expected seconds > 0",
                                 column="interval")
            cluster = replace(cluster, round_interval=float(interval))
        if restart_delay is not None:
            if restart_delay < 0:
                raise InputError(f"restart_delay is {restart_delay}: expected seconds >= 0",
                                 column="restart_delay")
            cluster = replace(cluster, restart_delay=float(restart_delay))
        if not 0 <= interference < 1:
            raise InputError(f"interference is {interference}: expected a slowdown in "
                             "[0, 1)", column="interference")
        # The Pollux profiles were measured on T4s; other types' are measured per type where
        # given, else derived (:mod:`bayes_sched.sim.typed_profiles`) where the rule covers them.
        try:
            check_cluster_types(cluster.types, (), profiles)
        except InputError as error:
            raise InputError(f"cluster {cluster.describe()}: {error}") from None
        if hidden is not None:
            hidden.check_cluster(cluster)
        for name, value in (("cluster", cluster), ("interference", interference),
                            ("min_refit_interval", min_refit_interval),
                            ("refit_on_new_bsz", refit_on_new_bsz), ("max_time", max_time),
                            ("hidden", hidden), ("counter_rounds", counter_rounds),
                            ("seed", seed), ("profiles", profiles)):
            object.__setattr__(self, name, value)

    @property
    def num_nodes(self) -> int:
        return self.cluster.num_nodes

    @property
    def refit_rule(self) -> RefitRule:
        """``min_refit_interval`` and ``refit_on_new_bsz``, the rule the estimation stage refits
        by (the agents get the same two settings)."""
        return RefitRule(self.min_refit_interval, self.refit_on_new_bsz)

    @property
    def gpus_per_node(self) -> int:
        """GPUs on each node (raises :class:`InputError` when nodes differ)."""
        return self.cluster.gpus_per_node

    @property
    def interval(self) -> float:
        """Seconds per scheduling round."""
        return self.cluster.round_interval

    @property
    def restart_delay(self) -> float:
        """Seconds a restarted job loses where its application's delay is not known."""
        return self.cluster.restart_delay


class SimJob:
    """Ground-truth state of one simulated job (the simulator's side; policies never see it)."""

    def __init__(self, spec: JobSpec, app: Application, agent: JobAgent,
                 num_nodes: int) -> None:
        self.spec = spec
        self.app = app
        #: Step times on the GPUs the job holds: the measured profile on a T4-only cluster, else
        #: the typed one (:meth:`reallocate` sets it where ``node_types`` is given).
        self.physics: Application | TypedApplication = app
        #: GPU type per node, on a cluster with a type other than the profiles' or with measured
        #: per-type profiles (else ``None``).
        self.node_types: np.ndarray | None = None
        self.profiles: TypeProfiles = NO_TYPE_PROFILES
        self.agent = agent
        self.counts = np.zeros(num_nodes, dtype=np.int64)
        self.placement: tuple[int, ...] = ()
        self.local_bsz = 0
        self.accum_steps = 0
        self.progress = 0.0
        self.epoch = 0
        self.restart_left = 0.0
        self.attained_service = 0.0
        self.num_restarts: int | None = None
        self.start_time: float | None = None
        self.completion_time: float | None = None
        self.allocation_history: list[tuple[float, tuple[int, ...]]] = []

    @property
    def active(self) -> bool:
        return self.completion_time is None

    @property
    def epochs(self) -> float:
        """Epochs completed, with the fraction of the current one (what the job counts)."""
        start = self.app.progress_at_epoch(self.epoch)
        end = self.app.progress_at_epoch(self.epoch + 1)
        if end <= start:
            return float(self.epoch)
        return self.epoch + min(max((self.progress - start) / (end - start), 0.0), 1.0)

    def reallocate(self, counts: np.ndarray, now: float, restart_delay: float) -> None:
        self.counts = counts.copy()
        self.allocation_history.append((now, tuple(int(c) for c in counts)))
        self.placement = placement_of(counts)
        if not self.placement:
            self.local_bsz, self.accum_steps = 0, 0
            return
        if self.node_types is not None:
            types = tuple(sorted(set(self.node_types[counts > 0].tolist())))
            self.physics = TypedApplication(self.app, types, self.profiles)
            # The job measures (and fits) per type; across types, the slowest paces it.
            self.agent.use_gpu_type(slowest_type(self.app, types, self.profiles))
        self.local_bsz, self.accum_steps = self.agent.choose_batch(self.placement)
        self.restart_left = restart_delay
        if self.num_restarts is None:
            self.num_restarts = 0
            self.start_time = now
        else:
            self.num_restarts += 1

    def begin(self, start: float, seconds: float) -> tuple[float, float]:
        """Start a span of ``seconds`` at time ``start`` on the current placement: the restart
        delay left is paid first. Returns ``(time, seconds left)`` after it."""
        delay = min(self.restart_left, seconds)
        self.restart_left -= delay
        self.attained_service += delay * sum(self.placement)
        return start + delay, seconds - delay

    def stretch(self, now: float, seconds: float, slowdown: float) -> tuple[float, float]:
        """Train from time ``now`` for ``seconds`` or up to the current epoch's end, whichever
        comes first, recording the step's measurements with the agent. Returns ``(time, seconds
        left)``; the agent re-tunes the batch after every stretch (the caller's:
        :meth:`SimulatedCluster.advance`)."""
        app = self.app
        gpus = sum(self.placement)
        nodes, replicas = len(self.placement), gpus
        batch = replicas * self.local_bsz * (self.accum_steps + 1)
        step, sync = self.physics.step_time(self.placement, self.local_bsz)
        sqr, var = app.grad_stats(batch, self.epoch)
        self.agent.record(nodes, replicas, self.local_bsz, step, sync, sqr, var)
        scale = batch / app.limits.init_batch_size
        gain = scale_invariant_gain(sqr, var, scale)
        rate = gain / seconds_per_step(step, sync, self.accum_steps) * (1.0 - slowdown)
        epoch_end = app.progress_at_epoch(self.epoch + 1)
        if self.progress + rate * seconds < epoch_end:
            self.progress += rate * seconds
            self.attained_service += seconds * gpus
            return now + seconds, 0.0
        # Whole seconds, as the artifact counts them.
        delta = min(float(round((epoch_end - self.progress) / rate)), seconds)
        self.epoch += 1
        self.progress = epoch_end
        self.attained_service += delta * gpus
        now += delta
        if self.epoch >= app.max_epochs:
            self.completion_time = now
        return now, seconds - delta


def train(spans: list[tuple[SimJob, float, float, float]]) -> None:
    """Run each job's span ``(job, time, seconds, slowdown)`` (after :meth:`SimJob.begin`)
    stretch by stretch: each stretch ends at the span's end or an epoch's, after which the job's
    agent re-tunes its batch. The jobs' stretches run in lockstep, so that each round of
    re-tuning is one vectorised call across the jobs (:func:`~bayes_sched.agent.choose_batches`);
    each job's agent sees what it would see running alone (the agents share nothing)."""
    spans = [span for span in spans if span[2] > 0]
    while spans:
        stepped = [(job, *job.stretch(now, seconds, slowdown), slowdown)
                   for job, now, seconds, slowdown in spans]
        chosen = choose_batches([span[0].agent for span in stepped],
                                [span[0].placement for span in stepped])
        for (job, *_), (local_bsz, accum_steps) in zip(stepped, chosen, strict=True):
            job.local_bsz, job.accum_steps = local_bsz, accum_steps
        spans = [span for span in stepped if span[2] > 0 and span[0].active]


class GpuTimeline:
    """GPUs per job per round, stored as the rounds where some job's count changed (memory
    follows the changes, not ``rounds x jobs``).

    Args:
        num_jobs: the row length.
    """

    def __init__(self, num_jobs: int) -> None:
        self.num_jobs = num_jobs
        self.rounds = 0
        self._last = np.zeros(num_jobs, dtype=np.int64)
        # (round, jobs whose count changed, the change in GPUs)
        self._changes: list[tuple[int, np.ndarray, np.ndarray]] = []

    def append(self, gpus: np.ndarray) -> None:
        """Record one round's GPUs per job, shape ``(num_jobs,)``."""
        changed = np.flatnonzero(gpus != self._last)
        if changed.size:
            self._changes.append((self.rounds, changed, gpus[changed] - self._last[changed]))
            self._last[changed] = gpus[changed]
        self.rounds += 1

    def dense(self) -> np.ndarray:
        """Every round's row, shape ``(rounds, num_jobs)``, int64."""
        out = np.zeros((self.rounds, self.num_jobs), dtype=np.int64)
        for round_index, jobs, step in self._changes:
            out[round_index, jobs] = step
        return np.cumsum(out, axis=0, out=out)  # each change holds until the job's next


class SimulatedCluster:
    """A simulated GPU cluster running one workload (a :class:`~bayes_sched.cluster.Cluster`).

    Args:
        workload: the jobs and their submission times.
        config: cluster shape and simulation settings.
        job_settings: how each job runs under the policy (fixed or tuned batch, replica cap).
    """

    def __init__(self, workload: Workload, config: SimConfig = SimConfig(),
                 job_settings: Callable[[JobSpec], JobSettings] | None = None) -> None:
        self.workload = workload
        self.config = config
        self._now = 0.0
        self.jobs: dict[str, SimJob] = {}
        typed = config.cluster.types != (GPU_TYPE,) or bool(config.profiles)
        if typed:
            check_cluster_types(config.cluster.types,
                                [spec.application for spec in workload.jobs], config.profiles)
        node_types = np.array(config.cluster.gpu_types)
        for row, spec in enumerate(workload.jobs, start=2):
            app = get_application(spec.application)
            if spec.num_replicas > config.cluster.total_gpus:
                raise InputError(
                    f"job '{spec.name}' asks for {spec.num_replicas} GPUs but the cluster has "
                    f"{config.cluster.total_gpus} ({config.cluster.describe()}): expected a "
                    "cluster that fits every job",
                    workload.source or None, row=row, column="num_replicas")
            settings = job_settings(spec) if job_settings else JobSettings(spec.batch_size)
            # Jobs report their measurements under the physics' GPU type, the only one the
            # cluster may hold (SimConfig refuses others), so their models are per-type.
            agent = JobAgent(spec.name, app.limits, settings, config.min_refit_interval,
                             config.refit_on_new_bsz, gpu_type=GPU_TYPE)
            self.jobs[spec.name] = SimJob(spec, app, agent, config.num_nodes)
            if typed:
                self.jobs[spec.name].node_types = node_types
                self.jobs[spec.name].profiles = config.profiles
        self._allocations: Allocations = {}
        # Timeline: each round's end time and active jobs, and the GPUs each job held during it,
        # kept as changes (a dense row per round grew by the job count every round).
        self.timeline_time: list[float] = []
        self.timeline_active: list[int] = []
        self._timeline_gpus = GpuTimeline(len(self.jobs))
        #: The cluster's GPU types, and the GPUs of each held during each round, ``(rounds, T)``.
        self.timeline_types: tuple[str, ...] = config.cluster.types
        self.timeline_type_gpus: list[np.ndarray] = []
        self._node_type_index = np.array([self.timeline_types.index(t)
                                          for t in config.cluster.gpu_types], dtype=np.int64)
        self._counters: list[xr.Dataset] = []
        self._counter_window: xr.Dataset | None = None
        self._counter_rng = np.random.default_rng(config.seed)
        # The submitted, unfinished jobs (workload indices, ascending) as of ``_live_at``, so a
        # round walks those instead of the whole workload: jobs in order of submission, and how
        # many of them have been admitted.
        self._job_list = list(self.jobs.values())
        self._by_submit = sorted(range(len(self._job_list)),
                                 key=lambda i: self._job_list[i].spec.submit_time)
        self._admitted = 0
        self._live: list[int] = []
        self._live_at = -np.inf

    @property
    def refit_count(self) -> int:
        return sum(job.agent.num_refits for job in self.jobs.values())

    # --- Cluster interface ---------------------------------------------------------------------

    @property
    def state(self) -> ClusterState:
        return ClusterState(spec=self.config.cluster, now=self._now,
                            counters=self._counter_window)

    def _live_jobs(self) -> list[int]:
        """Workload indices (ascending) of the jobs submitted by now and unfinished."""
        if self._live_at != self._now:
            jobs, order = self._job_list, self._by_submit
            while (self._admitted < len(order)
                   and jobs[order[self._admitted]].spec.submit_time <= self._now):
                bisect.insort(self._live, order[self._admitted])
                self._admitted += 1
            self._live = [i for i in self._live if jobs[i].active]
            self._live_at = self._now
        return self._live

    def job_views(self) -> list[JobView]:
        """The active jobs' reports: their own measurements, fits and progress in epochs against
        the epochs their users asked for; never the physics behind them."""
        views = []
        for job in (self._job_list[i] for i in self._live_jobs()):
            agent = job.agent
            agent.clock = self._now
            views.append(JobView(
                name=job.spec.name, application=job.spec.application, tenant=job.spec.tenant,
                submit_time=job.spec.submit_time, age=self._now - job.spec.submit_time,
                attained_service=job.attained_service, allocation=job.counts.copy(),
                num_restarts=job.num_restarts or 0,
                requested_replicas=job.spec.num_replicas,
                requested_batch_size=job.spec.batch_size, settings=agent.settings,
                limits=job.app.limits, progress=job.progress, epochs=job.epochs,
                target_epochs=job.app.max_epochs,
                examples_per_epoch=job.app.examples_per_epoch,
                allocation_history=tuple(job.allocation_history),
                gradient_bytes=reported_gradient_bytes(job.spec.application),
                **agent.report_fields()))  # type: ignore[arg-type]
        return views

    def allocations(self) -> Allocations:
        return {name: counts.copy() for name, counts in self._allocations.items()}

    def apply(self, allocations: Mapping[str, np.ndarray]) -> None:
        active = [self._job_list[i].spec.name for i in self._live_jobs()]
        new = validate_allocations(allocations, self.state, active)
        empty = np.zeros(self.config.num_nodes, dtype=np.int64)
        # Only jobs holding GPUs before or after can change (in workload order, as before).
        touched = self._allocations.keys() | new.keys()
        for name, job in self.jobs.items():
            if name not in touched:
                continue
            old = self._allocations.get(name, empty)
            counts = new.get(name, empty)
            if not np.array_equal(old, counts):
                job.reallocate(counts, self._now,
                               self.config.cluster.restart_delay_of(job.spec.application))
        self._allocations = new

    def advance(self, seconds: float) -> None:
        slowdown = self._slowdowns()
        gpus = np.zeros(len(self.jobs), dtype=np.int64)
        node_gpus = np.zeros(self.config.num_nodes, dtype=np.int64)
        # Jobs the round is for: submitted by its start and unfinished (those ending in it too).
        live = self._live_jobs()
        self.timeline_active.append(len(live))
        spans = []
        for i in live:  # only live jobs hold GPUs
            job = self._job_list[i]
            if job.placement:
                gpus[i] = sum(job.placement)
                node_gpus += job.counts
                spans.append((job, *job.begin(self._now, seconds),
                              slowdown.get(job.spec.name, 0.0)))
        train(spans)
        emit = getattr(self.config.hidden, "counters", None)
        if emit is not None:
            self._counters.append(emit(self._now, seconds, self.config.num_nodes,
                                       self._counter_rng))
            self._counters = self._counters[-self.config.counter_rounds:]
            self._counter_window = xr.concat(self._counters, dim="time")
        self._now += seconds
        self.timeline_time.append(self._now)
        self._timeline_gpus.append(gpus)
        self.timeline_type_gpus.append(np.bincount(self._node_type_index, weights=node_gpus,
                                                   minlength=len(self.timeline_types)))

    def timeline_gpus(self) -> np.ndarray:
        """GPUs each job held during each round, shape ``(rounds, jobs)`` (jobs in workload
        order)."""
        return self._timeline_gpus.dense()

    def done(self) -> bool:
        return ((self._admitted == len(self._job_list) and not self._live_jobs())
                or self._now >= self.config.max_time)

    # --- helpers ---------------------------------------------------------------------------------

    def _slowdowns(self) -> dict[str, float]:
        """Interference slowdown per job: the simple rule (distributed jobs sharing a node) and the
        hidden law, combined as independent losses."""
        slowdown = self._simple_slowdowns()
        hidden = self.config.hidden
        if hidden is None:
            return slowdown
        running = {name: RunningJob(self.jobs[name].app.name, counts, self.jobs[name].local_bsz)
                   for name, counts in self._allocations.items()
                   if self.jobs[name].active and self.jobs[name].placement}
        for name, extra in hidden.slowdowns(running).items():
            slowdown[name] = 1.0 - (1.0 - slowdown.get(name, 0.0)) * (1.0 - extra)
        return slowdown

    def _simple_slowdowns(self) -> dict[str, float]:
        """Distributed jobs sharing a node with another one slow by ``interference``."""
        if self.config.interference <= 0:
            return {}
        distributed = {n: c for n, c in self._allocations.items()
                       if np.count_nonzero(c) > 1 and self.jobs[n].active}
        if len(distributed) < 2:
            return {}
        sharing = np.sum([c > 0 for c in distributed.values()], axis=0) > 1
        return {n: self.config.interference for n, c in distributed.items()
                if np.any((c > 0) & sharing)}
