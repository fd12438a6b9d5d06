"""Shockwave's job physics in the throughput-table world: batch sizes that change while jobs run.

A :class:`ShockwaveCluster` runs :class:`~bayes_sched.sim.shockwave_jobs.ShockwaveJobSpec` jobs
the way Shockwave's simulator does (``scheduler/scheduler.py``, ``simulate``,
``_simulate_accordion``, ``_simulate_gns``, ``_scale_bs_and_iters``):

* **Rates.** A job runs at the measured steps/s of its *current* job type (model and batch size)
  on its GPUs; a round of ``s`` seconds runs ``floor(rate * s)`` steps, no more than it has left.
* **Restart cost.** A job that did not run in the previous round and runs (nearly) a whole round
  loses 20 s of it: its steps are scaled by ``(t - 20) / t`` for run time ``t`` (Shockwave's
  injected checkpoint/resume overhead; not charged in the first round of the run).
* **Batch-size requests.** After every round, each job checks its mode's rule at its current epoch
  ``ceil(steps done / iterations per epoch)``: under Accordion it asks for the model's largest batch
  outside a critical regime and for its initial batch inside one (the simulator's regimes: the
  head, ResNet-18's epochs 150-159 and 250-259, ResNet-50's first 10 of every 30; unlike the
  profile, without the 30 % floor or Recommendation's later regimes); under GNS it asks to double
  when the GNS schedule is above its batch size at this epoch or the next. Jobs that start at the
  model's largest batch size never change.
* **Applying a request** when the job next completes a round it ran in (Shockwave handles it in
  the job's done callback): the new job type's steps/s; total steps rescaled by the batch-size
  ratio, keeping the number of epochs; steps done set to the completed epochs (rounded up, as
  Shockwave does) times the new iterations per epoch.
* **Deadline.** A job whose run time exceeds 1.5 x its trace duration is completed (Shockwave's
  ``is_over_deadline``).

Jobs report (:meth:`ShockwaveCluster.job_views`) their current job type (``application``), the
batch size they run at, epochs done and the epochs their user asked for, their declared mode, and
the steps declared and done as Shockwave's scheduler keeps them (``target_steps``: the trace's
total steps, rescaled on each batch-size change as above; ``progress``: the steps done, set to the
completed epochs at the new batch size), so that policies reading remaining steps
(``num_steps_remaining = total_steps - total_steps_run`` in its ``_get_allocation_state``) get
what Shockwave's gave them.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from bayes_sched.batch_modes import (
    DATASET_SIZE,
    GNS_LIMIT,
    MAX_BATCH_SIZE,
    MIN_BATCH_SIZE,
    gns_schedule,
    iterations_per_epoch,
    job_type_of,
)
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobSettings, JobView
from bayes_sched.sim.shockwave_jobs import ShockwaveJobSpec, profile_epoch_seconds
from bayes_sched.sim.table_cluster import (
    _NO_LIMITS,
    DEFAULT_MEASUREMENT_NOISE,
    STALL_LIMIT,
    TableCluster,
    TableJob,
)
from bayes_sched.throughputs import ThroughputTable

#: Seconds a job loses when it (re)starts (Shockwave's ``preemption_overhead``).
RESTART_SECONDS = 20.0
#: A job's run time may exceed its trace duration by this factor before it is completed.
DEADLINE_FACTOR = 1.5


@dataclass
class BatchState:
    """A job's batch-size state in the simulation (simulator side)."""

    batch_size: int
    total_steps: float
    request: str | None = None  # "big" or "small", applied after the job's next round
    ran_last_round: bool = False
    run_seconds: float = 0.0
    changes: int = 0


def accordion_critical_now(model: str, initial_batch_size: int, epoch: int) -> bool | None:
    """Whether Shockwave's simulator holds a job at ``epoch`` in a critical regime (``None``:
    the model does not adapt under Accordion)."""
    if model == "LM":
        return epoch < 10
    if model == "Recommendation":
        return epoch < {512: 30, 1024: 30, 2048: 40}.get(initial_batch_size, 10)
    if model == "ResNet-50":
        return epoch % 30 < 10
    if model == "ResNet-18":
        head = 20 if initial_batch_size == 256 else 10
        return epoch < head or 150 <= epoch < 160 or 250 <= epoch < 260
    return None


def batch_size_request(spec: ShockwaveJobSpec, batch_size: int, steps_done: float) -> str | None:
    """``"big"``, ``"small"`` or ``None``: what the job's mode asks for after a round."""
    model, initial = spec.model, spec.batch_size
    epoch = math.ceil(steps_done / iterations_per_epoch(model, batch_size))
    if spec.mode == "accordion":
        critical = accordion_critical_now(model, initial, epoch)
        if critical is None:
            return None
        if batch_size == initial and not critical and batch_size != GNS_LIMIT.get(model):
            return "big"
        if batch_size != initial and critical and batch_size != MIN_BATCH_SIZE.get(model):
            return "small"
        return None
    if spec.mode == "gns":
        schedule = gns_schedule(model, initial, max(760, epoch + 2), spec.scale_factor)
        if ((schedule[epoch + 1] > batch_size or schedule[epoch] > batch_size)
                and batch_size != GNS_LIMIT.get(model)):
            return "big"
    return None


class ShockwaveCluster(TableCluster):
    """A simulated cluster of typed GPUs running Shockwave's dynamic-batch jobs.

    Args: as :class:`~bayes_sched.sim.table_cluster.TableCluster` (``jobs`` are
    :class:`~bayes_sched.sim.shockwave_jobs.ShockwaveJobSpec`).
    """

    def __init__(self, jobs: Iterable[ShockwaveJobSpec], spec: ClusterSpec,
                 table: ThroughputTable, jobs_to_complete: Iterable[str] | None = None,
                 max_time: float = 1e9, source: str = "",
                 measurement_noise: float = DEFAULT_MEASUREMENT_NOISE, noise_seed: int = 0,
                 stall_limit: float = STALL_LIMIT) -> None:
        self.batch: dict[str, BatchState] = {}
        self._rounds_run = 0
        self._truth_cache: dict[tuple[str, float, int, str | None, float], float] = {}
        super().__init__(jobs, spec, table, jobs_to_complete, max_time, source,
                         measurement_noise, noise_seed, stall_limit)

    def _check(self, job: object) -> None:
        if not isinstance(job, ShockwaveJobSpec):
            raise InputError(f"job '{getattr(job, 'name', job)}' is not a Shockwave job: "
                             "expected a job read from a 12-column Shockwave trace",
                             self.source or None)
        super()._check(job)

    def _state(self, job: TableJob) -> BatchState:
        state = self.batch.get(job.spec.name)
        if state is None:
            state = BatchState(job.spec.batch_size, job.spec.total_steps)
            self.batch[job.spec.name] = state
        return state

    def _true_total_steps(self, job: TableJob) -> float:
        """The job's steps at its current batch size (it changes with the batch size)."""
        return float(self._state(job).total_steps)

    @staticmethod
    def _spec(job: TableJob) -> ShockwaveJobSpec:
        assert isinstance(job.spec, ShockwaveJobSpec)
        return job.spec

    def standalone_seconds(self, spec: object) -> float:
        """Seconds the job's profile takes alone on its GPUs of the fastest type (Shockwave's
        ``sum(duration_every_epoch)``, the denominator of its finish-time fairness)."""
        assert isinstance(spec, ShockwaveJobSpec)
        return min(sum(profile_epoch_seconds(spec, self.table, gpu))
                   for gpu in set(self.spec.gpu_types))

    def true_remaining_seconds(self, name: str) -> float:
        """Seconds job ``name`` truly has left alone on its GPUs of the fastest type, played
        forward round by round under this simulator's rules (its rate at each batch size, the
        batch-size requests of its mode applied a round late, the deadline), without restarts:
        simulator truth, for a benchmark's oracle (``0`` for a job not active)."""
        job = self._active.get(name)
        if job is None:
            return 0.0
        state = self._state(job)
        key = (name, job.steps_done, state.batch_size, state.request, state.run_seconds)
        cached = self._truth_cache.get(key)
        if cached is not None:
            return cached
        ghost, ghost_state = copy.copy(job), replace(state)
        spec, round_s = self._spec(ghost), self.spec.round_interval
        left_seconds = 0.0
        for _ in range(100_000):
            rate = max((self.table.steps_per_second(
                job_type_of(spec.model, ghost_state.batch_size), spec.scale_factor, gpu) or 0.0)
                for gpu in set(self._types))
            if rate <= 0:
                left_seconds = math.inf
                break
            steps = min(float(math.floor(rate * round_s)),
                        ghost_state.total_steps - ghost.steps_done)
            ghost.steps_done += steps
            left_seconds += steps / rate
            ghost_state.run_seconds += steps / rate
            if (ghost_state.total_steps - ghost.steps_done <= 0
                    or ghost_state.run_seconds > DEADLINE_FACTOR * spec.duration > 0):
                break
            self._apply_request(ghost, ghost_state)
            ghost_state.request = batch_size_request(spec, ghost_state.batch_size,
                                                     ghost.steps_done)
        self._truth_cache[key] = left_seconds
        return left_seconds

    def job_views(self) -> list[JobView]:
        views = []
        for job in self._active.values():
            spec, state = self._spec(job), self._state(job)
            views.append(JobView(
                name=spec.name, application=job_type_of(spec.model, state.batch_size),
                tenant=spec.tenant,
                submit_time=spec.submit_time, age=self._now - spec.submit_time,
                attained_service=job.attained_service, allocation=job.counts.copy(),
                num_restarts=job.num_restarts or 0, requested_replicas=spec.scale_factor,
                requested_batch_size=spec.batch_size,
                settings=JobSettings(state.batch_size, spec.scale_factor), limits=_NO_LIMITS,
                progress=job.steps_done,
                epochs=job.steps_done / iterations_per_epoch(spec.model, state.batch_size),
                target_epochs=spec.epochs, examples_per_epoch=DATASET_SIZE[spec.model],
                batch_size_mode=spec.mode, allocation_history=tuple(job.allocation_history),
                target_steps=state.total_steps, cell_observations=job.reports))
        return views

    def _job_type(self, job: TableJob) -> str:
        return job_type_of(self._spec(job).model, self._state(job).batch_size)

    def _steps_per_second(self, job: TableJob, gpu: str) -> float:
        """Steps/s at the job's current batch size."""
        rate = self.table.steps_per_second(
            job_type_of(self._spec(job).model, self._state(job).batch_size),
            job.spec.scale_factor, gpu)
        return rate or 0.0

    def _apply_request(self, job: TableJob, state: BatchState) -> None:
        """Shockwave's ``_scale_bs_and_iters`` for a job that just ran a round."""
        request, state.request = state.request, None
        spec = self._spec(job)
        model, initial, old = spec.model, spec.batch_size, state.batch_size
        if request is None or MAX_BATCH_SIZE.get(model) == initial:
            return
        if spec.mode == "gns":
            new = 2 * old
        elif spec.mode == "accordion":
            new = MAX_BATCH_SIZE[model] if request == "big" else initial
        else:
            return
        new_type = job_type_of(model, new)
        if any(self.table.steps_per_second(new_type, spec.scale_factor, gpu) is None
               for gpu in set(self._types)):
            return  # a batch size the table lacks: Shockwave keeps the old one
        old_iterations = iterations_per_epoch(model, old)
        new_iterations = iterations_per_epoch(model, new)
        epochs = math.ceil(state.total_steps / old_iterations)
        total = math.ceil(state.total_steps * old / new)
        if math.ceil(total / new_iterations) != epochs:
            total = new_iterations * epochs
        job.steps_done = math.ceil(job.steps_done / old_iterations) * new_iterations
        state.total_steps, state.batch_size = float(total), new
        state.changes += 1

    def advance(self, seconds: float) -> None:
        busy = np.zeros(len(self.busy_types), dtype=np.int64)
        finished = []
        for name, job in self._active.items():
            state = self._state(job)
            self._count_busy(job, busy)
            rate = self._rate(job)
            ran = rate > 0
            if ran:
                left = state.total_steps - job.steps_done
                steps = min(float(math.floor(rate * seconds)), left)
                elapsed = run = steps / rate
                if (not state.ran_last_round and self._rounds_run > 0
                        and elapsed > seconds - 5.0):
                    steps = float(math.floor(steps * (elapsed - RESTART_SECONDS) / elapsed))
                    run = elapsed - RESTART_SECONDS
                job.steps_done += steps
                job.attained_service += elapsed * int(job.counts.sum())
                self._report(job, rate, run)  # the batch size it ran at, before a change
                state.run_seconds += run
                spec = self._spec(job)
                if (state.total_steps - job.steps_done <= 0
                        or state.run_seconds > DEADLINE_FACTOR * spec.duration > 0):
                    job.completion_time = self._now + elapsed
                    finished.append(name)
                else:
                    self._apply_request(job, state)
            if not ran:
                job.reports = ()
            state.ran_last_round = ran
        for job in self._active.values():
            if job.spec.name in finished:
                continue
            state = self._state(job)
            request = batch_size_request(self._spec(job), state.batch_size, job.steps_done)
            if request is not None:
                state.request = request
        self._rounds_run += 1
        self._end_round(seconds, busy, finished)
