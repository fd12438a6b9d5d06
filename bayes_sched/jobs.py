"""Jobs as a scheduler sees them: the job agent inside each job, and the public view of a job.

:class:`JobAgent` plays the role Pollux calls PolluxAgent. It runs with the job, records every
``(placement, m, s, step time)`` and the gradient statistics the job measures, refits perfmodel's
throughput model online, and re-tunes the per-GPU micro-batch ``m`` and accumulation steps ``s`` for
the allocation the job holds (the learning rate follows the batch size, e.g. by AdaScale, inside the
job). :class:`JobView` is everything a policy may read about a job: public state and the agent's
fitted models — never the simulator's ground truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from perfmodel.goodput import GoodputModel
from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import ThroughputParams, fit_throughput, identifiable


@dataclass(frozen=True)
class JobSpec:
    """One submitted job: what its user asked for.

    Attributes:
        name: unique job name.
        submit_time: submission time, seconds from the start of the workload.
        application: the model trained (a key of the shipped applications, e.g. ``"cifar10"``).
        num_replicas: GPUs the user requested.
        batch_size: total batch size the user requested, examples per optimiser step.
    """

    name: str
    submit_time: float
    application: str
    num_replicas: int
    batch_size: int


@dataclass(frozen=True)
class BatchLimits:
    """The batch-size limits of an application, as its job declares them (public, not physics).

    Attributes:
        init_batch_size: the batch size the learning rate was tuned for, ``B0`` (examples).
        max_batch_size: the largest total batch size the job accepts (examples).
        min_local_bsz: smallest per-GPU micro-batch (examples).
        max_local_bsz: largest per-GPU micro-batch that fits in GPU memory (examples).
    """

    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int

    @property
    def max_accum_steps(self) -> int:
        """Accumulation steps that reach the largest batch on one GPU (the artifact's agent does
        not bound them otherwise)."""
        return max(0, math.ceil(self.max_batch_size / self.max_local_bsz) - 1)


def split_batch(batch_size: int, num_replicas: int, limits: BatchLimits) -> tuple[int, int]:
    """Split a total batch over replicas into ``(local_bsz, accum_steps)`` like a fixed-batch job.

    Micro-batches stay within ``max_local_bsz`` by accumulating gradients; a single replica whose
    batch exceeds ``B0`` accumulates at least once (gradient statistics need two micro-batches); the
    total never exceeds ``max_batch_size``.
    """
    eps = 1e-8
    local = math.ceil(batch_size / num_replicas - eps)
    accum = math.ceil(local / limits.max_local_bsz - eps) - 1
    if num_replicas == 1 and batch_size > limits.init_batch_size:
        accum = max(1, accum)
    micro = math.ceil(local / (accum + 1) - eps)
    micro = min(micro, int(limits.max_batch_size / (num_replicas * (accum + 1))))
    return max(micro, 1), accum



@dataclass(frozen=True)
class JobSettings:
    """How a job runs under a policy.

    Attributes:
        batch_size: fixed total batch size, or ``None`` to let the agent tune it (Pollux).
        max_replicas: most GPUs the job may use, or ``None`` for no job-side cap.
    """

    batch_size: int | None = None
    max_replicas: int | None = None


@dataclass
class Observation:
    """One measured configuration: seconds per iteration at ``(nodes, replicas, m)`` (``s = 0``)."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    step_time: float
    sync_time: float


class JobAgent:
    """Records a job's measurements, fits its goodput model and tunes its batch configuration.

    Args:
        name: the job's name.
        limits: the job's declared batch limits.
        settings: fixed batch size (``None`` tunes it) and replica cap.
        min_refit_interval: seconds of job time between refits of the throughput model once it
            exists; a refit also needs a measurement of a new ``(nodes, replicas)`` shape, or of a
            new micro-batch while only one was seen. The L-BFGS fit costs 5-300 ms, and
            Pollux's agent refitting at every new ``m`` dominated the artifact's run time.
    """

    def __init__(self, name: str, limits: BatchLimits, settings: JobSettings = JobSettings(),
                 min_refit_interval: float = 240.0, refit_on_new_bsz: bool = False) -> None:
        self.name = name
        self.limits = limits
        self.settings = settings
        self.min_refit_interval = min_refit_interval
        self.refit_on_new_bsz = refit_on_new_bsz
        self.observations: dict[tuple[int, int, int], Observation] = {}
        self.grad_sqr: float | None = None
        self.grad_var: float | None = None
        self._params: ThroughputParams | None = None
        self.clock = 0.0  # the job's time in seconds, set by whoever runs the job
        self.num_refits = 0
        self._fitted_shapes: set[tuple[int, int]] = set()
        self._fitted_bsz: set[int] = set()
        self._stale = False
        self._last_fit_time = -np.inf
        self._model: GoodputModel | None = None
        self._model_stats: tuple[float, float] | None = None

    # --- measurements (called from inside the job) ---------------------------------------------

    def record(self, num_nodes: int, num_replicas: int, local_bsz: int, step_time: float,
               sync_time: float, grad_sqr: float, grad_var: float) -> None:
        """Record one measured iteration time (seconds) and the current gradient statistics."""
        self.grad_sqr, self.grad_var = grad_sqr, grad_var
        key = (num_nodes, num_replicas, local_bsz)
        if key in self.observations:
            return
        self.observations[key] = Observation(num_nodes, num_replicas, local_bsz, step_time,
                                             sync_time)
        new_shape = (num_nodes, num_replicas) not in self._fitted_shapes
        new_slope = ((self.refit_on_new_bsz or len(self._fitted_bsz) < 2)
                     and local_bsz not in self._fitted_bsz)
        if new_shape or new_slope:
            self._stale = True

    @property
    def max_profiled_replicas(self) -> int:
        """The most GPUs the job has been measured on (0 before the first measurement)."""
        return max((key[1] for key in self.observations), default=0)

    def profile(self) -> StepTimeProfile:
        """The measurements as a perfmodel profile (``accum_steps = 0`` rows)."""
        obs = list(self.observations.values())
        nodes = np.array([o.num_nodes for o in obs], dtype=np.int64)
        replicas = np.array([o.num_replicas for o in obs], dtype=np.int64)
        return StepTimeProfile(
            self.name, nodes, replicas,
            np.array([o.local_bsz for o in obs], dtype=np.int64),
            np.zeros(len(obs), dtype=np.int64),
            np.array([o.step_time for o in obs]), np.array([o.sync_time for o in obs]),
            np.array([f"n{n}r{r}" for n, r in zip(nodes, replicas, strict=True)], dtype=object),
        )

    @property
    def params(self) -> ThroughputParams | None:
        """The fitted throughput parameters (``None`` before any measurement), refitted lazily on
        access when :meth:`refresh` allows."""
        self.refresh(self.clock)
        return self._params

    def refresh(self, now: float) -> bool:
        """Refit the throughput model if new shapes were measured and the rate limit allows.

        Returns whether a refit happened. ``now`` is the job's clock in seconds.
        """
        if not self._stale or not self.observations:
            return False
        if self._params is not None and now - self._last_fit_time < self.min_refit_interval:
            return False
        profile = self.profile()
        self._params = optimistic_unidentified(fit_throughput(profile), profile)
        self.num_refits += 1
        self._last_fit_time = now
        self._stale = False
        self._fitted_shapes = {(k[0], k[1]) for k in self.observations}
        self._fitted_bsz = {k[2] for k in self.observations}
        self._model = None
        return True

    # --- models a policy may read ----------------------------------------------------------------

    def goodput_model(self) -> GoodputModel | None:
        """The fitted goodput model, or ``None`` before the first fit; rebuilt when the throughput
        fit or the gradient statistics change (compare identities to cache derived tables)."""
        params = self.params
        if params is None or self.grad_sqr is None or self.grad_var is None:
            return None
        stats = (self.grad_sqr, self.grad_var)
        if self._model is None or self._model_stats != stats:
            self._model = GoodputModel(params, self.grad_sqr, self.grad_var,
                                       self.limits.init_batch_size)
            self._model_stats = stats
        return self._model

    # --- batch tuning ----------------------------------------------------------------------------

    def choose_batch(self, placement: tuple[int, ...]) -> tuple[int, int]:
        """``(local_bsz, accum_steps)`` for a placement (GPUs per used node)."""
        replicas = int(sum(placement))
        nodes = sum(1 for c in placement if c > 0)
        limits = self.limits
        batch = self.settings.batch_size
        model = self.goodput_model() if batch is None else None
        if model is None:
            if batch is None:
                batch = max(limits.init_batch_size, limits.min_local_bsz * replicas)
            return split_batch(batch, replicas, limits)
        choice = model.optimize(
            np.array([nodes]), np.array([replicas]), limits.max_batch_size,
            (limits.min_local_bsz, limits.max_local_bsz), max_accum_steps=limits.max_accum_steps,
            accumulate_alone=True)
        local, accum = int(choice.local_bsz[0]), int(choice.accum_steps[0])
        if local <= 0:
            batch = max(limits.init_batch_size, limits.min_local_bsz * replicas)
            return split_batch(batch, replicas, limits)
        local = min(local, int(limits.max_batch_size / (replicas * (accum + 1))))
        return max(local, 1), accum


#: Where Pollux pins network terms its measurements cannot inform (its lower bound).
_UNINFORMED = 1e-8


def optimistic_unidentified(params: ThroughputParams, profile: StepTimeProfile
                            ) -> ThroughputParams:
    """Network terms the measurements cannot inform, set as Pollux's agent sets them: to ~0.

    Pollux pins uninformed network parameters at their lower bound, so a job measured on one GPU
    is assumed to scale well until measured otherwise (and across-node links are assumed no faster
    than within-node ones). perfmodel's fit holds them at its starting values (0.1 s, 0.01 s per
    GPU), which made new jobs look 0.1 s per step slower on several GPUs and kept them small for
    minutes. Terms that multiply to zero on every measured configuration do not affect the fit
    of the others, so resetting them afterwards is exact (up to the small retrogression penalty).
    """
    ok = identifiable(profile)
    values = params.as_dict()
    if not ok["across"]:
        values["alpha_n"] = values["beta_n"] = _UNINFORMED
    if not ok["within"]:
        values["alpha_r"] = values["beta_r"] = _UNINFORMED
    if not ok["retrogression"]:
        values["beta_n"] = values["beta_r"] = _UNINFORMED
    if not ok["across"]:
        values["alpha_n"] = max(values["alpha_n"], 1.1 * values["alpha_r"])
        values["beta_n"] = max(values["beta_n"], 1.1 * values["beta_r"])
    return ThroughputParams(**values)


@dataclass(frozen=True)
class JobView:
    """What a policy may see of one active job at a scheduling round.

    Attributes:
        name: job name.
        application: the model's name (a label the user gave; policies may use it for display).
        submit_time: seconds since the start of the workload.
        age: seconds since submission.
        attained_service: GPU-seconds the job has held so far.
        allocation: GPUs per node it holds now, shape ``(num_nodes,)``.
        num_restarts: times it was restarted (moved or resized) after its first start.
        requested_replicas: GPUs its user asked for.
        requested_batch_size: total batch its user asked for (examples).
        settings: how it runs under the current policy (fixed or tuned batch, replica cap).
        limits: its declared batch limits.
        progress: training progress so far, in steps at the initial batch size.
        target_progress: progress at which it completes (from the epochs its user asked for).
        agent: the job's agent: measurements, gradient statistics and fitted models.
    """

    name: str
    application: str
    submit_time: float
    age: float
    attained_service: float
    allocation: np.ndarray
    num_restarts: int
    requested_replicas: int
    requested_batch_size: int
    settings: JobSettings
    limits: BatchLimits
    progress: float
    target_progress: float
    agent: JobAgent = field(repr=False)

    @property
    def num_gpus(self) -> int:
        return int(self.allocation.sum())
