"""Mechanisms shared by several policies, apart from any one policy's objective.

* :mod:`bayes_sched.mechanisms.pop`: POP (Narayanan et al., SOSP 2021): a granular allocation
  problem split into ``k`` random sub-problems (jobs and GPUs alike), each solved by the policy's
  own program, the answers joined.
"""
