"""Estimators by name: what the loop's estimation stage may run, chosen outside the policy.

:data:`ESTIMATORS` maps a name to a factory of a fresh
:class:`~bayes_sched.estimation.Estimator` with typed options (the factory's keyword arguments,
as for policies), and states which needs (:data:`bayes_sched.estimates.NEEDS`) each serves
(:meth:`EstimatorRegistry.serves`). The throughput learners
(:data:`bayes_sched.estimation.learners.LEARNERS`) are throughput estimators here: a
:class:`~bayes_sched.estimation.throughput_stage.ThroughputEstimator` around the learner, whose
options are the learner's and the stage's own (``refit_interval``: seconds between refits, 0:
every round with new reports; ``refit_growth``: the factor a cell's reported seconds grow by
before they make a refit due).

The truth is not here: a world supplies its ``oracle`` estimators in a registry of its own
(:func:`bayes_sched.sim.oracles.world_oracles`), so that estimation never imports the simulator.
A new estimator is one :meth:`EstimatorRegistry.register` line here (or in a plugin).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Annotated, Any

from bayes_sched.errors import InputError
from bayes_sched.estimates import NEEDS
from bayes_sched.estimation.learners import LEARNERS
from bayes_sched.estimation.throughput_stage import REFIT_GROWTH, ThroughputEstimator
from bayes_sched.registry import Option, Range, Registry, factory_options

if TYPE_CHECKING:
    from bayes_sched.estimation import Estimator


class EstimatorRegistry(Registry["Estimator"]):
    """Named estimator factories with typed options, each serving one or more needs.

    A plugin estimator (entry-point group ``bayes_sched.estimators``) states the needs it serves
    as its factory's ``serves`` attribute (a tuple of need names), read when it is first used.

    Args:
        kind: what the components are, for messages (``"estimator"``).
        group: the entry-point group of plugin estimators (``None``: built-ins only).
    """

    def __init__(self, kind: str = "estimator", group: str | None = None) -> None:
        super().__init__(kind, group)
        self._serves: dict[str, tuple[str, ...]] = {}
        self._learners: dict[str, str] = {}

    def register(self, name: str, factory: Callable[..., Estimator] | str, summary: str = "",
                 serves: Sequence[str] = ()) -> None:
        """Add ``factory`` under ``name``, serving ``serves`` (names of needs; at least one)."""
        unknown = [need for need in serves if need not in NEEDS]
        if not serves or unknown:
            raise ValueError(f"{self.kind} '{name}' serves {list(serves)}: expected one or more "
                             f"of {', '.join(NEEDS)}")
        super().register(name, factory, summary)
        self._serves[name] = tuple(serves)

    def register_learner(self, name: str, learner: str, summary: str = "") -> None:
        """Add ``name``: a throughput estimator around the learner ``learner`` (a name in
        :data:`~bayes_sched.estimation.learners.LEARNERS`, imported when first made)."""
        self.register(name, f"{__name__}:{learner}", summary, serves=("throughput",))
        self._learners[name] = learner

    def _register_plugin(self, name: str, path: str) -> None:
        Registry.register(self, name, path)  # its needs are read from its factory when used

    def serves(self, name: str) -> tuple[str, ...]:
        """The needs estimator ``name`` publishes."""
        known = self._known(name)
        if known not in self._serves:  # a plugin: its factory's ``serves``
            serves = tuple(getattr(self._factory(known), "serves", ()))
            unknown = [need for need in serves if need not in NEEDS]
            if not serves or unknown:
                raise InputError(f"{self.kind} '{known}' (plugin: {self.plugin_of(known)}) "
                                 f"serves {list(serves)}: expected a 'serves' attribute naming "
                                 f"one or more of {', '.join(NEEDS)}")
            self._serves[known] = serves
        return self._serves[known]

    def _factory(self, name: str) -> Callable[..., Estimator]:
        learner = self._learners.pop(name, None)
        if learner is not None:
            self._lazy.pop(name)
            self._add(name, throughput_factory(learner), self._summaries.get(name, ""))
        return super()._factory(name)


#: Seconds between refits, and the growth of a cell's reported seconds that makes one due.
RefitInterval = Annotated[float, Range(0.0, unit="s")]
RefitGrowth = Annotated[float, Range(1.0)]


def _stage_options(refit_interval: RefitInterval = 0.0,
                   refit_growth: RefitGrowth = REFIT_GROWTH) -> None:
    """The throughput stage's own options (their signature only)."""


def throughput_factory(learner: str) -> Callable[..., ThroughputEstimator]:
    """A factory of a :class:`ThroughputEstimator` around a fresh ``learner`` whose options are
    the learner's and the stage's (``refit_interval``, ``refit_growth``), all keyword-only."""
    make_learner = LEARNERS[learner]
    learner_options = LEARNERS.options(learner)
    stage_options = factory_options(_stage_options)
    clash = set(learner_options) & set(stage_options)
    if clash:
        raise TypeError(f"learner {learner!r} has options of the stage: {sorted(clash)}")

    def make(**options: Any) -> ThroughputEstimator:
        stage = {key: options.pop(key) for key in list(options) if key in stage_options}
        return ThroughputEstimator(make_learner(**options),
                                   min_refit_interval=stage.get("refit_interval", 0.0),
                                   refit_growth=stage.get("refit_growth", REFIT_GROWTH))

    merged: list[Option] = [*learner_options.values(), *stage_options.values()]
    make.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
        inspect.Parameter(option.name, inspect.Parameter.KEYWORD_ONLY, default=option.default,
                          annotation=option.annotation) for option in merged])
    make.__annotations__ = {option.name: option.annotation for option in merged}
    make.__doc__ = inspect.getdoc(make_learner)
    return make


#: Estimator name -> factory of a fresh estimator, with the needs it serves.
ESTIMATORS = EstimatorRegistry(group="bayes_sched.estimators")
for _name in ("uniform", "per_cell", "bayes", "gavel", "sia"):
    ESTIMATORS.register_learner(_name, _name, LEARNERS.summary(_name))
ESTIMATORS.register("job_models", "bayes_sched.estimation.job_models:point_job_models",
                    "each job's throughput fit per GPU type (Pollux's point fit)",
                    serves=("job_goodput",))
ESTIMATORS.register("job_posterior", "bayes_sched.estimation.job_models:posterior_job_models",
                    "each job's throughput fit with draws from perfmodel's posterior",
                    serves=("job_goodput",))
ESTIMATORS.register("dirichlet", "bayes_sched.estimation.remaining_work:dirichlet",
                    "Shockwave's Dirichlet posterior over batch-size regimes (a point)",
                    serves=("remaining_work",))
ESTIMATORS.register("noise_scale", "bayes_sched.estimation.remaining_work:noise_scale",
                    "ours: a posterior over the job's gradient-noise-scale curve",
                    serves=("remaining_work",))
ESTIMATORS.register("declared", "bayes_sched.estimation.remaining_steps:declared",
                    "the steps each job declared less the steps done (its declaration trusted)",
                    serves=("remaining_steps",))
ESTIMATORS.register("ignored", "bayes_sched.estimation.remaining_steps:ignored",
                    "no duration: remaining steps unknown, the policy's rule for jobs that "
                    "declare none", serves=("remaining_steps",))
ESTIMATORS.register("survival", "bayes_sched.estimation.remaining_steps:survival_steps",
                    "ours: a survival model of the fraction of its declaration a job runs, "
                    "posterior per tenant or application", serves=("remaining_steps",))
ESTIMATORS.register("bo_colocation", "bayes_sched.interference.colocation:colocation_learning",
                    "bo's co-location learning: contention prior from counters, then pair "
                    "residuals", serves=("colocation",))
ESTIMATORS.register("contention_network",
                    "bayes_sched.contention.state:ContentionNetworkEstimator",
                    "the contention network's posterior over each node's hidden resource use, "
                    "from the counters window (an SVI fit per round read)",
                    serves=("resource_use",))


def make_estimator(name: str, /, seed: int = 0, where: str = "", **options: Any) -> Estimator:
    """A fresh estimator by name with typed ``options``; ``seed`` goes to the factories that
    take one.

    Raises:
        InputError: an unknown estimator, an option it does not take or of the wrong type.
    """
    return ESTIMATORS.make(name, where=where, context={"seed": seed}, **options)


__all__ = ["ESTIMATORS", "EstimatorRegistry", "RefitGrowth", "RefitInterval", "make_estimator",
           "throughput_factory"]
