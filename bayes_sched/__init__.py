"""The scheduling side of bayes-sched: contention inference, interference, search, policies, simulator.

Depends on :mod:`counters` and :mod:`perfmodel`; only :mod:`bayes_sched.cli` may import every package.
"""

__version__ = "0.1.0"
