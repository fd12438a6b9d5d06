"""Pollux's allocation search (Qiao et al., OSDI 2021), shared by ``pollux``, ``bo`` and Sia's
restart penalty: a genetic search over GPUs per node for every job.

* :mod:`~bayes_sched.mechanisms.genetic_allocation.search`: the problem (scores, repair), the
  search (the artifact's NSGA-II or an elitist one), the status quo, replica caps and restart
  penalties of a round's jobs;
* :mod:`~bayes_sched.mechanisms.genetic_allocation.speedups`: the speedup tables from job
  models, cached per job;
* :mod:`~bayes_sched.mechanisms.genetic_allocation.nsga2`: NSGA-II's ranking for two objectives;
* :mod:`~bayes_sched.mechanisms.genetic_allocation.sparse`: populations by their nonzero
  entries, and the array helpers the search shares;
* :mod:`~bayes_sched.mechanisms.genetic_allocation.kernels`: the compiled (numba) loops;
* :mod:`~bayes_sched.mechanisms.genetic_allocation.generations`: the NSGA-II search run whole as
  one compiled kernel.
"""
