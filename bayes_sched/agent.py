"""The job agent: the part of a job that measures itself and tunes its own batch.

:class:`JobAgent` plays the role Pollux calls PolluxAgent. It runs with the job (on the cluster
side: in a real cluster, inside the job's process), records every ``(placement, m, step time)`` and
the gradient statistics the job measures, refits perfmodel's throughput model online
(:class:`~bayes_sched.estimation.ThroughputFitter`), and re-tunes the per-GPU micro-batch ``m``
and accumulation steps ``s`` for the allocation the job holds (the learning rate follows the batch
size, e.g. by AdaScale, inside the job). A policy never sees it: it sees the job's reports
(:class:`~bayes_sched.jobs.JobView`), built by :meth:`JobAgent.report_fields`.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import numpy as np

from bayes_sched.estimation.job_models import ThroughputFitter, profile_of
from bayes_sched.jobs import (
    DEFAULT_GPU_TYPE,
    BatchLimits,
    GradientStats,
    JobSettings,
    Observation,
    split_batch,
)
from perfmodel.goodput import GoodputModel, optimize_each
from perfmodel.profiles import StepTimeProfile
from perfmodel.throughput import ThroughputParams

#: A job whose batch the agent tunes, with no replica cap.
_TUNED = JobSettings()


class JobAgent:
    """Records a job's measurements, fits its goodput model and tunes its batch configuration.

    Args:
        name: the job's name.
        limits: the job's declared batch limits.
        settings: fixed batch size (``None`` tunes it) and replica cap.
        min_refit_interval: seconds of job time between refits of the throughput model once it
            exists; a refit also needs a measurement of a new ``(nodes, replicas)`` shape, or of a
            new micro-batch while only one was seen. Each L-BFGS fit costs milliseconds, and
            Pollux's agent refitting at every new ``m`` dominated the artifact's run time.
        refit_on_new_bsz: refit on every new micro-batch too.
        gpu_type: the GPU type the job runs on.
        skip_within_noise: keep the fit when new measurements lie within its noise
            (:class:`~bayes_sched.estimation.ThroughputFitter`).
    """

    def __init__(self, name: str, limits: BatchLimits, settings: JobSettings = _TUNED,
                 min_refit_interval: float = 240.0, refit_on_new_bsz: bool = False,
                 gpu_type: str = DEFAULT_GPU_TYPE, skip_within_noise: bool = True) -> None:
        self.name = name
        self.limits = limits
        self.settings = settings
        self.gpu_type = gpu_type
        self.observations: dict[tuple[int, int, int], Observation] = {}
        self.grad_sqr: float | None = None
        self.grad_var: float | None = None
        self.clock = 0.0  # the job's time in seconds, set by whoever runs the job
        self._fitter = ThroughputFitter(name, min_refit_interval, refit_on_new_bsz,
                                        skip_within_noise)
        self._model: GoodputModel | None = None
        self._model_key: tuple[ThroughputParams, float, float] | None = None
        # Other GPU types' measurements and fitters (a typed cluster: :meth:`use_gpu_type`).
        self._other_types: dict[str, tuple[dict[tuple[int, int, int], Observation],
                                           ThroughputFitter]] = {}
        # choose_batch's tuned choices for the current model, by (nodes, replicas).
        self._choices: dict[tuple[int, int], tuple[int, int]] = {}
        self._choices_key: tuple[ThroughputParams, float, float] | None = None

    @property
    def num_refits(self) -> int:
        return self._fitter.num_refits + sum(f.num_refits for _, f in self._other_types.values())

    def use_gpu_type(self, gpu_type: str) -> None:
        """Run on ``gpu_type`` from now on (a typed cluster moved the job): the job keeps its
        measurements and throughput fit per GPU type, since a step time measured on one type says
        nothing of another's; its report and batch tuning use the current type's."""
        if gpu_type == self.gpu_type:
            return
        self._other_types[self.gpu_type] = (self.observations, self._fitter)
        saved = self._other_types.pop(gpu_type, None)
        if saved is None:
            fitter = self._fitter
            saved = ({}, ThroughputFitter(self.name, fitter.min_refit_interval,
                                          fitter.refit_on_new_bsz, fitter.skip_within_noise))
        self.observations, self._fitter = saved
        self.gpu_type = gpu_type
        self._model, self._model_key = None, None

    # --- measurements (called from inside the job) ---------------------------------------------

    def record(self, num_nodes: int, num_replicas: int, local_bsz: int, step_time: float,
               sync_time: float, grad_sqr: float, grad_var: float) -> None:
        """Record one measured iteration time (seconds) and the current gradient statistics."""
        self.grad_sqr, self.grad_var = grad_sqr, grad_var
        key = (num_nodes, num_replicas, local_bsz)
        if key in self.observations:
            return
        self.observations[key] = Observation(num_nodes, num_replicas, local_bsz, step_time,
                                             sync_time, gpu_type=self.gpu_type)
        self._fitter.note(key)

    @property
    def max_profiled_replicas(self) -> int:
        """The most GPUs the job has been measured on (0 before the first measurement)."""
        return max((key[1] for key in self.observations), default=0)

    def profile(self) -> StepTimeProfile:
        """The measurements as a perfmodel profile (``accum_steps = 0`` rows)."""
        return profile_of(self.name, list(self.observations.values()))

    @property
    def params(self) -> ThroughputParams | None:
        """The fitted throughput parameters (``None`` before any measurement), refitted lazily on
        access when :meth:`refresh` allows."""
        self.refresh(self.clock)
        return self._fitter.params

    def refresh(self, now: float) -> bool:
        """Refit the throughput model if new measurements say something new
        (:class:`~bayes_sched.estimation.ThroughputFitter`) and the rate limit allows.

        Returns whether a refit happened. ``now`` is the job's clock in seconds.
        """
        return self._fitter.refresh(self.observations, now)

    # --- what the job reports --------------------------------------------------------------------

    def report_fields(self) -> dict[str, object]:
        """The agent's part of the job's report (:class:`~bayes_sched.jobs.JobView` fields): a
        snapshot of its measurements and gradient statistics, and its own fit where it tunes its
        batch (a fixed-batch job reports none: it has no use for one)."""
        gradient = None
        if self.grad_sqr is not None and self.grad_var is not None:
            gradient = GradientStats(self.grad_sqr, self.grad_var)
        tunes = self.settings.batch_size is None
        if tunes:
            self.refresh(self.clock)  # a job tuning its batch keeps its own fit current
        return {"observations": MappingProxyType(dict(self.observations)), "gradient": gradient,
                "fit": self._fitter.params if tunes else None,
                "fit_version": self._fitter.num_refits if tunes else 0}

    def goodput_model(self) -> GoodputModel | None:
        """The fitted goodput model, or ``None`` before the first fit; rebuilt when the throughput
        fit or the gradient statistics change."""
        params = self.params
        if params is None or self.grad_sqr is None or self.grad_var is None:
            return None
        key = (params, self.grad_sqr, self.grad_var)
        if self._model is None or self._model_key != key:
            self._model = GoodputModel(params, self.grad_sqr, self.grad_var,
                                       self.limits.init_batch_size)
            self._model_key = key
        return self._model

    # --- batch tuning ----------------------------------------------------------------------------

    def choose_batch(self, placement: tuple[int, ...]) -> tuple[int, int]:
        """``(local_bsz, accum_steps)`` for a placement (GPUs per used node)."""
        return choose_batches([self], [placement])[0]

    def _known_batch(self, placement: tuple[int, ...]
                     ) -> tuple[tuple[int, int] | None, GoodputModel | None, int, int]:
        """``(batch, model, nodes, replicas)`` for ``placement``: ``batch`` where no optimisation
        is needed (a fixed batch, no model yet, or a choice made before for this model and
        shape), else ``None`` and the ``model`` to tune by."""
        replicas = int(sum(placement))
        nodes = sum(1 for c in placement if c > 0)
        limits = self.limits
        batch = self.settings.batch_size
        model = self.goodput_model() if batch is None else None
        if model is None:
            if batch is None:
                batch = max(limits.init_batch_size, limits.min_local_bsz * replicas)
            return split_batch(batch, replicas, limits), None, nodes, replicas
        # The choice is a function of the model and the shape: a job keeps its model for many
        # reallocations, and the optimisation would otherwise run at every one of them.
        if self._choices_key != self._model_key:
            self._choices, self._choices_key = {}, self._model_key
        return self._choices.get((nodes, replicas)), model, nodes, replicas

    def _tuned_batch(self, model: GoodputModel, nodes: int, replicas: int) -> tuple[int, int]:
        """:meth:`choose_batch` by the goodput model ``model`` on ``replicas`` GPUs of ``nodes``
        nodes (not remembered)."""
        limits = self.limits
        choice = model.optimize(
            np.array([nodes]), np.array([replicas]), limits.max_batch_size,
            (limits.min_local_bsz, limits.max_local_bsz), max_accum_steps=limits.max_accum_steps,
            accumulate_alone=True)
        return self._settle(int(choice.local_bsz[0]), int(choice.accum_steps[0]), replicas)

    def _settle(self, local: int, accum: int, replicas: int) -> tuple[int, int]:
        """The goodput optimum ``(local, accum)`` on ``replicas`` GPUs as the job runs it: the
        initial batch split where nothing is feasible, the micro-batch within the largest total
        batch."""
        limits = self.limits
        if local <= 0:
            batch = max(limits.init_batch_size, limits.min_local_bsz * replicas)
            return split_batch(batch, replicas, limits)
        local = min(local, int(limits.max_batch_size / (replicas * (accum + 1))))
        return max(local, 1), accum


def choose_batches(agents: Sequence[JobAgent], placements: Sequence[tuple[int, ...]]
                   ) -> list[tuple[int, int]]:
    """:meth:`JobAgent.choose_batch` of each agent for its placement, the goodput optimisations
    of all the agents that need one made in one vectorised call
    (:func:`perfmodel.goodput.optimize_each`); each answer equals the agent's own
    ``choose_batch``, and is remembered by it as that is."""
    out: list[tuple[int, int] | None] = []
    tune: list[tuple[int, JobAgent, GoodputModel, int, int]] = []
    for i, (agent, placement) in enumerate(zip(agents, placements, strict=True)):
        known, model, nodes, replicas = agent._known_batch(placement)
        out.append(known)
        if known is None:
            assert model is not None
            tune.append((i, agent, model, nodes, replicas))
    if tune:
        limits = [agent.limits for _, agent, _, _, _ in tune]
        choice = optimize_each(
            np.concatenate([model.theta for _, _, model, _, _ in tune]),
            np.concatenate([model.noise_to_signal for _, _, model, _, _ in tune]),
            np.array([model.init_bsz for _, _, model, _, _ in tune]),
            np.array([nodes for _, _, _, nodes, _ in tune]),
            np.array([replicas for _, _, _, _, replicas in tune]),
            np.array([lim.max_batch_size for lim in limits]),
            np.array([lim.min_local_bsz for lim in limits]),
            np.array([lim.max_local_bsz for lim in limits]),
            np.array([lim.max_accum_steps for lim in limits]), accumulate_alone=True)
        for row, (i, agent, _, nodes, replicas) in enumerate(tune):
            chosen = agent._settle(int(choice.local_bsz[row]), int(choice.accum_steps[row]),
                                   replicas)
            agent._choices[(nodes, replicas)] = chosen
            out[i] = chosen
    return [chosen for chosen in out if chosen is not None]
