"""The typed keys of what the estimators publish in the :class:`~bayes_sched.estimates.Estimates`
bundle, and where their uncertainty objects become :class:`~bayes_sched.estimates.Posterior` s.

The adapters are core contracts beside the protocols they bind, so that a policy applies an
exploration rule (:mod:`bayes_sched.acquisition`) without importing an estimator:

* :class:`~bayes_sched.throughput_estimates.CellPosterior`: a throughput belief over ``N``
  cells, steps/s, shape ``(N,)``;
* :class:`~bayes_sched.jobs.GoodputPosterior`: a :class:`~bayes_sched.jobs.JobModel` over ``A``
  allocations, goodput at the job's best batch in examples (at its initial batch) per second,
  shape ``(A,)``;
* the co-location and contention keys and their adapter beside the slowdown predictor's
  protocol (:mod:`bayes_sched.colocation`), the remaining-work key and adapter
  (:class:`bayes_sched.remaining_work.RemainingWorkPosterior`).
"""

from __future__ import annotations

from collections.abc import Mapping

from bayes_sched.estimates import Need
from bayes_sched.jobs import JobModel
from bayes_sched.throughput_estimates import THROUGHPUT

#: ``{job name: {GPU type: JobModel}}`` for the jobs with a fitted model
#: (:class:`~bayes_sched.jobs.GoodputPosterior`).
JOB_GOODPUT: Need[Mapping[str, Mapping[str, JobModel]]] = Need("job_goodput")


__all__ = ["JOB_GOODPUT", "THROUGHPUT"]
