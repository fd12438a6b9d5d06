"""Jobs as a scheduler sees them: read-only reports and fitted models.

:class:`JobView` is everything a policy may read about one job: what the job itself could report
(submission, attained service, allocation history and restarts, measured step times, gradient
statistics, progress in its own units against the epochs its user asked for, the throughput fit
its own agent made) and, attached by the loop's estimation stage, its fitted models per GPU type
(:class:`JobModel`). Nothing here is live: views are frozen, arrays are read-only and mappings are
proxies, so a policy cannot change what the next one sees. Never the simulator's ground truth, and
no live fitter: the job's agent (:mod:`bayes_sched.agent`) stays with the job, on the cluster side.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import TYPE_CHECKING, Annotated, overload

import numpy as np

from bayes_sched.estimates import check_quantile, resample_draws
from bayes_sched.registry import GPU_COUNT, Range
from bayes_sched.tenants import DEFAULT_TENANT as _DEFAULT_TENANT
from perfmodel.goodput import BatchChoice, GoodputModel
from perfmodel.throughput import ThroughputParams, predict_step_time

if TYPE_CHECKING:  # the estimation package imports this module
    from bayes_sched.cells import CellObservation

#: The GPU type of a cluster that names none (a homogeneous cluster).
DEFAULT_GPU_TYPE = "default"

#: The tenant of a job whose submission names none (:data:`bayes_sched.tenants.DEFAULT_TENANT`).
DEFAULT_TENANT = _DEFAULT_TENANT


@dataclass(frozen=True)
class JobSpec:
    """One submitted job: what its user asked for.

    Attributes:
        name: unique job name.
        submit_time: submission time, seconds from the start of the workload.
        application: the model trained (a key of the shipped applications, e.g. ``"cifar10"``).
        num_replicas: GPUs the user requested.
        batch_size: total batch size the user requested, examples per optimiser step.
        tenant: the team that submitted it (:data:`DEFAULT_TENANT` where none is named);
            keyword-only, so subclasses keep their positional fields.
    """

    name: str
    submit_time: float
    application: str
    num_replicas: int
    batch_size: int
    tenant: str = field(default=DEFAULT_TENANT, kw_only=True)


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

    batch_size: Annotated[int | None, Range(1, 2**31)] = None   # perfmodel.textio.MAX_BATCH
    max_replicas: Annotated[int | None, GPU_COUNT] = None


@dataclass(frozen=True)
class Observation:
    """One measured configuration: seconds per iteration (one micro-step, ``accum_steps = 0``) and
    the synchronisation part of it, at ``num_nodes`` nodes, ``num_replicas`` GPUs of ``gpu_type``
    and per-GPU micro-batch ``local_bsz``."""

    num_nodes: int
    num_replicas: int
    local_bsz: int
    step_time: float
    sync_time: float
    accum_steps: int = 0
    gpu_type: str = DEFAULT_GPU_TYPE

    @property
    def key(self) -> tuple[int, int, int]:
        """``(num_nodes, num_replicas, local_bsz)``: a job keeps its first measurement per key."""
        return (self.num_nodes, self.num_replicas, self.local_bsz)


@dataclass(frozen=True)
class GradientStats:
    """The gradient statistics a job measures (normalised to its initial batch size)."""

    grad_sqr: float
    grad_var: float

    @property
    def noise_to_signal(self) -> float:
        return self.grad_var / max(self.grad_sqr, np.finfo(float).tiny)


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.flags.writeable = False
    return array


class JobModel:
    """A job's fitted models on one GPU type, read-only (built by the estimation stage).

    Args:
        gpu_type: the GPU type the model is for.
        version: changes whenever the throughput fit changes (cache derived tables on it; the
            gradient noise is :attr:`noise_to_signal`, compare it separately).
        params: the point fit of the step-time model.
        gradient: the gradient statistics the job reported.
        limits: the job's batch limits.
        draws: posterior draws of the step-time parameters, shape ``(S, 7)`` in
            ``perfmodel.throughput.PARAM_NAMES`` order or ``(S, 9)`` with the multi-GPU compute
            shifts (``DRAW_NAMES``), or ``None`` (point fit only).
    """

    __slots__ = ("_draws", "_point", "_posterior", "gpu_type", "gradient", "limits", "params",
                 "version")

    def __init__(self, gpu_type: str, version: int, params: ThroughputParams,
                 gradient: GradientStats, limits: BatchLimits,
                 draws: np.ndarray | None = None) -> None:
        init = limits.init_batch_size
        point = GoodputModel(params, gradient.grad_sqr, gradient.grad_var, init)
        point.theta.flags.writeable = False
        point.noise_to_signal.flags.writeable = False
        posterior = None
        if draws is not None:
            draws = _read_only(np.atleast_2d(draws))
            posterior = GoodputModel(draws, gradient.grad_sqr, gradient.grad_var, init)
            posterior.theta.flags.writeable = False
            posterior.noise_to_signal.flags.writeable = False
        for name, value in (("gpu_type", gpu_type), ("version", version), ("params", params),
                            ("gradient", gradient), ("limits", limits), ("_draws", draws),
                            ("_point", point), ("_posterior", posterior)):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"JobModel is read-only: cannot set '{name}'")

    gpu_type: str
    version: int
    params: ThroughputParams
    gradient: GradientStats
    limits: BatchLimits
    _draws: np.ndarray | None
    _point: GoodputModel
    _posterior: GoodputModel | None

    @property
    def draws(self) -> np.ndarray | None:
        """Posterior draws of the step-time parameters ``(S, 7)`` or ``(S, 9)`` (read-only), or
        ``None``."""
        return self._draws

    @property
    def noise_to_signal(self) -> float:
        return float(self._point.noise_to_signal[0])

    def goodput_model(self, quantile: float | None = None) -> GoodputModel:
        """perfmodel's goodput model: the point fit, or the posterior draws when ``quantile`` is
        given and the model has them."""
        if quantile is not None and self._posterior is not None:
            return self._posterior
        return self._point

    def optimize(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                 quantile: float | None = None) -> BatchChoice:
        """The job's best batch per allocation (its own tuning rule: micro-batch and accumulation
        within its limits, accumulating on one GPU beyond ``B0``), shapes ``(A,)``.

        ``quantile``: ``None`` maximises goodput under the point fit; ``q`` maximises the
        ``q``-quantile of goodput over the posterior draws (the point fit without draws)."""
        limits = self.limits
        model = self.goodput_model(quantile)
        return model.optimize(num_nodes, num_replicas, limits.max_batch_size,
                              (limits.min_local_bsz, limits.max_local_bsz),
                              max_accum_steps=limits.max_accum_steps,
                              quantile=quantile if model is self._posterior else None,
                              accumulate_alone=True)

    def goodput(self, num_nodes: np.ndarray, num_replicas: np.ndarray,
                quantile: float | None = None) -> np.ndarray:
        """Goodput at the best batch, examples (at ``B0``) per second, shape ``(A,)``: for the
        point fit, or the ``quantile`` of the posterior (see :meth:`optimize`)."""
        return self.optimize(num_nodes, num_replicas, quantile).goodput

    def step_time(self, num_nodes: np.ndarray, num_replicas: np.ndarray, local_bsz: np.ndarray,
                  accum_steps: np.ndarray | int = 0) -> np.ndarray:
        """Seconds per optimiser step under the point fit, broadcast shape."""
        return predict_step_time(self.params, num_nodes, num_replicas, local_bsz, accum_steps)

    def efficiency(self, batch_size: np.ndarray) -> np.ndarray:
        """Statistical efficiency at total batch ``batch_size``, shape ``batch_size.shape``."""
        return self._point.efficiency(batch_size)[0]


class GoodputPosterior:
    """Goodput of ``model``'s job at its best batch on ``num_nodes``/``num_replicas``
    allocations (shape ``(A,)``), examples at its initial batch per second.

    ``mean`` is the point fit's goodput (:meth:`JobModel.goodput`), ``quantile(q)`` the model's
    own ``q``-quantile rule (the batch that maximises that quantile over its posterior draws; the
    point fit for a model without draws), ``draws`` the goodput of each posterior draw of the
    step-time parameters at the point fit's batch (the point fit repeated without draws).
    """

    def __init__(self, model: JobModel, num_nodes: np.ndarray, num_replicas: np.ndarray) -> None:
        self.model = model
        self.num_nodes, self.num_replicas = np.broadcast_arrays(
            np.atleast_1d(np.asarray(num_nodes)), np.atleast_1d(np.asarray(num_replicas)))

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.num_nodes.shape)

    def mean(self) -> np.ndarray:
        return self.model.goodput(self.num_nodes, self.num_replicas)

    def quantile(self, q: float) -> np.ndarray:
        return self.model.goodput(self.num_nodes, self.num_replicas, check_quantile(q))

    def draws(self, n: int, seed: int = 0) -> np.ndarray:
        choice = self.model.optimize(self.num_nodes, self.num_replicas)
        posterior = self.model.goodput_model(quantile=0.5)  # the draws' model where it has them
        with np.errstate(divide="ignore", invalid="ignore"):
            goodput = posterior.goodput(self.num_nodes, self.num_replicas, choice.local_bsz,
                                        choice.accum_steps)
        # Infeasible allocations (no batch fits) have goodput 0 under every draw.
        return resample_draws(np.where(choice.local_bsz > 0, goodput, 0.0), n, seed)


#: One change of a job's allocation: ``(time in seconds, GPUs per node)``.
AllocationChange = tuple[float, tuple[int, ...]]


class AllocationHistory(Sequence[AllocationChange]):
    """A read-only view of the first ``length`` entries of an append-only list of allocation
    changes: taken in O(1) each round where copying the history into a tuple would cost
    O(changes) (a job of a long run changes its allocation thousands of times). The owner only
    ever appends to ``entries``, so the view never changes; it compares equal to a sequence
    with the same entries."""

    __slots__ = ("_entries", "_length")

    def __init__(self, entries: list[AllocationChange], length: int | None = None) -> None:
        self._entries = entries
        self._length = len(entries) if length is None else length

    def __len__(self) -> int:
        return self._length

    @overload
    def __getitem__(self, index: int) -> AllocationChange: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[AllocationChange, ...]: ...

    def __getitem__(self, index: int | slice) -> AllocationChange | tuple[AllocationChange, ...]:
        if isinstance(index, slice):
            return tuple(self._entries[:self._length][index])
        return self._entries[range(self._length)[index]]

    def __iter__(self) -> Iterator[AllocationChange]:
        return iter(self._entries[:self._length])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(other) == self._length and all(
            a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"AllocationHistory({list(self)!r})"


_NO_MODELS: Mapping[str, JobModel] = MappingProxyType({})
_NO_OBSERVATIONS: Mapping[tuple[int, int, int], Observation] = MappingProxyType({})


@dataclass(frozen=True)
class JobView:
    """What a policy may see of one active job at a scheduling round.

    Attributes:
        name: job name.
        application: the model's name (a label the user gave; policies may use it for display).
        submit_time: seconds since the start of the workload.
        age: seconds since submission.
        attained_service: GPU-seconds the job has held so far.
        allocation: GPUs per node it holds now, shape ``(num_nodes,)`` (read-only).
        num_restarts: times it was restarted (moved or resized) after its first start.
        requested_replicas: GPUs its user asked for.
        requested_batch_size: total batch its user asked for (examples).
        settings: how it runs under the current policy (fixed or tuned batch, replica cap).
        limits: its declared batch limits.
        progress: training progress so far, in steps at the initial batch size (scale-invariant
            iterations, as the job's AdaScale optimiser counts them).
        epochs: epochs completed, with the fraction of the current one.
        target_epochs: epochs its user asked for (the job completes after them).
        examples_per_epoch: examples in one epoch (the job's dataset size).
        batch_size_mode: how the job adapts its batch size, as its user declared it at
            submission: ``"static"`` (never), ``"accordion"`` or ``"gns"`` (Shockwave's jobs);
            ``settings.batch_size`` is the batch size it runs at now.
        observations: its measured step times by ``(num_nodes, num_replicas, local_bsz)``.
        gradient: its latest gradient statistics, ``None`` before it has run.
        fit: the throughput fit the job's own agent made to tune its batch, ``None`` where it
            made none (a fixed-batch job); ``fit_version`` counts its fits.
        allocation_history: ``(time, GPUs per node)`` of every change of its allocation (a
            tuple, or an :class:`AllocationHistory`).
        models: fitted models by GPU type, attached by the estimation stage (empty before it or
            for a policy that reads none).
        target_steps: the steps its user declared it will train for, where the user declares
            them (a Gavel job's ``total_steps``; the remaining-work input of finish-time fairness
            and min total duration); ``None`` where the job declares no such target.
        cell_observations: the throughputs the job measured in the last round, each with the
            cell it ran in (job type, scale factor, GPU type, partner type when it shared its
            GPUs): what a throughput-table job reports (empty where it did not run, and in the
            Pollux world, whose jobs report ``observations``).
        tenant: the team that submitted it (:data:`DEFAULT_TENANT` where none is named).
        gradient_bytes: bytes of one gradient all-reduce, as the job's client reports them
            (its ``start`` report, :mod:`bayes_sched.client.elastic`); ``None`` where unknown.
            What the physics prior of sync time reads (:mod:`perfmodel.sync_prior`).
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
    progress: float = 0.0
    epochs: float = 0.0
    target_epochs: int = 1
    examples_per_epoch: int = 1
    batch_size_mode: str = "static"
    observations: Mapping[tuple[int, int, int], Observation] = field(
        default_factory=lambda: _NO_OBSERVATIONS)
    gradient: GradientStats | None = None
    fit: ThroughputParams | None = None
    fit_version: int = 0
    allocation_history: Sequence[AllocationChange] = ()
    models: Mapping[str, JobModel] = field(default_factory=lambda: _NO_MODELS, repr=False)
    target_steps: float | None = None
    cell_observations: tuple[CellObservation, ...] = ()
    tenant: str = DEFAULT_TENANT
    gradient_bytes: float | None = None

    def __post_init__(self) -> None:
        if self.allocation.flags.writeable:
            object.__setattr__(self, "allocation", _read_only(self.allocation))
        if not isinstance(self.observations, MappingProxyType):
            object.__setattr__(self, "observations", MappingProxyType(dict(self.observations)))
        if not isinstance(self.models, MappingProxyType):
            object.__setattr__(self, "models", MappingProxyType(dict(self.models)))

    def updated(self, **changes: object) -> JobView:
        """This view with ``changes`` (field name -> value), built without construction's
        checks, for a cluster that keeps one view per job and changes a few fields each round
        (the simulator's hot path: ``dataclasses.replace`` costs several times more). The
        caller keeps construction's invariants; an ``allocation`` must be read-only."""
        if not changes.keys() <= _VIEW_FIELDS:
            unknown = sorted(changes.keys() - _VIEW_FIELDS)
            raise TypeError(f"JobView.updated: no such fields {unknown}")
        allocation = changes.get("allocation")
        if isinstance(allocation, np.ndarray) and allocation.flags.writeable:
            raise ValueError("JobView.updated: expected a read-only allocation array")
        view = object.__new__(JobView)
        state = view.__dict__
        state.update(self.__dict__)
        state.update(changes)
        return view

    @property
    def num_gpus(self) -> int:
        return int(self.allocation.sum())

    @property
    def max_profiled_replicas(self) -> int:
        """The most GPUs the job has been measured on (0 before the first measurement)."""
        return max((key[1] for key in self.observations), default=0)

    @property
    def model(self) -> JobModel | None:
        """The fitted model on the cluster's GPU type where there is one type (``None`` before
        the job's first fit, or when the estimation stage attached none)."""
        if len(self.models) == 1:
            return next(iter(self.models.values()))
        return self.models.get(DEFAULT_GPU_TYPE)


_VIEW_FIELDS = frozenset(f.name for f in fields(JobView))
