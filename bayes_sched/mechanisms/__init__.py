"""Mechanisms shared by several policies, apart from any one policy's objective.

A mechanism turns a policy's decision into something the cluster can run, or solves the program
a policy states; it reads no estimator and imports no policy (``pyproject.toml``'s import-linter
contracts: policies sit above mechanisms, and neither sees the simulator).

* :mod:`bayes_sched.mechanisms.placement`: GPUs per node for a job (consolidated, spread), and
  the GPUs free per node; :mod:`bayes_sched.mechanisms.placement_steps`: one round's placement
  built one step at a time (the learned schedulers' state and action).
* :mod:`bayes_sched.mechanisms.time_fraction_lp`: the time-fraction programs of the Gavel family
  (max-min, max-sum, finish-time ratio, makespan), built as sparse matrices and solved by
  CLARABEL or HiGHS; :mod:`bayes_sched.mechanisms.highs_process`: what HiGHS keeps per process.
* :mod:`bayes_sched.mechanisms.rounds`: Gavel's round mechanism (time received, priorities,
  greedy selection per type, placement with lease extension) turning a time-fraction allocation
  into one round's GPUs per node; its per-combination state in
  :mod:`bayes_sched.mechanisms.combo_store`.
* :mod:`bayes_sched.mechanisms.value_of_information`: which unknown cells an LP policy should
  try, from the LP's prices.
* :mod:`bayes_sched.mechanisms.pop`: POP (Narayanan et al., SOSP 2021): a granular allocation
  problem split into ``k`` random sub-problems (jobs and GPUs alike), each solved by the policy's
  own program, the answers joined.
* :mod:`bayes_sched.mechanisms.genetic_allocation`: Pollux's genetic search over GPUs per node.
"""
