"""Gavel's time-sharing family (Narayanan et al., OSDI 2020), laid out as Gavel's own
``scheduler/policies/`` is: one module per objective, its heterogeneity-aware and packed
variants beside it.

* :mod:`~bayes_sched.policies.gavel.max_min_fairness`: ``max_min_fairness`` (LAS),
  ``max_min_fairness_perf`` (Gavel) and ``max_min_fairness_packed``;
* :mod:`~bayes_sched.policies.gavel.max_sum_throughput`: ``max_sum_throughput_perf``;
* :mod:`~bayes_sched.policies.gavel.finish_time_fairness`: ``finish_time_fairness`` (Themis as
  Gavel states it), ``_perf`` and ``_packed``;
* :mod:`~bayes_sched.policies.gavel.min_total_duration`: ``min_total_duration`` and ``_packed``;
* :mod:`~bayes_sched.policies.gavel.fifo`: ``gavel_fifo``, ``fifo_perf`` and ``fifo_packed``.

What they share: the base policy (:mod:`~bayes_sched.policies.gavel.time_sharing`), the round
mechanism it drives to turn time fractions into GPUs each round
(:mod:`bayes_sched.mechanisms.rounds`, its per-combination state in
:mod:`~bayes_sched.mechanisms.combo_store`), how it reads the ``throughput`` estimate
(:mod:`~bayes_sched.policies.gavel.throughput_reading`) and the packed programs' entries
(:mod:`~bayes_sched.policies.gavel.packing`). The programs themselves are built and solved in
:mod:`bayes_sched.mechanisms.time_fraction_lp`. The policies are registered by name in
:data:`bayes_sched.policies.POLICIES`.
"""
