"""Bayesian optimisation of one job's configuration (GPUs, spread over nodes, batch, accumulation).

A GP surrogate whose prior mean is perfmodel's goodput prediction learns the residual from short
trial runs; Log Expected Improvement over a discrete set of candidates, encoded by physical
attributes, picks the next trial; the search stops when the expected improvement is small. Trials
run through a :class:`~bayes_sched.search.trials.TrialRunner` (the simulator's physics:
:class:`bayes_sched.sim.trials.PhysicsTrialRunner`).

Typical use::

    from bayes_sched.search import search_configuration
    from bayes_sched.sim.trials import PhysicsTrialRunner
    runner = PhysicsTrialRunner("cifar10", seed=0)
    result = search_configuration(runner.candidates(), runner.prior(), runner, seed=0)
    result.best
"""

from bayes_sched.search.candidates import CandidateSet, Configuration, enumerate_candidates
from bayes_sched.search.optimizer import SearchResult, Trial, search_configuration
from bayes_sched.search.prior import model_prior
from bayes_sched.search.trials import TrialError, TrialRunner

__all__ = ["CandidateSet", "Configuration", "SearchResult", "Trial",
           "TrialError", "TrialRunner", "enumerate_candidates", "model_prior",
           "search_configuration"]
