"""The contention network: infer hidden resource contention from noisy, multiplexed counters.

:mod:`.model` (the Pyro model), :mod:`.inference` (data preparation, SVI, NUTS, summaries),
:mod:`.report` (Markdown + PNG), :mod:`.discovery` (a node's layout from sysfs / NVML). The
node's shared resources are the core's :mod:`bayes_sched.topology`.
"""
