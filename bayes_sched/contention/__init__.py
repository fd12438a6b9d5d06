"""The contention network: infer hidden resource contention from noisy, multiplexed counters.

:mod:`.topology` (shared resources of a node), :mod:`.model` (the Pyro model),
:mod:`.inference` (data preparation, SVI, NUTS, summaries), :mod:`.report` (Markdown + PNG),
:mod:`.generator` (synthetic clusters with known ground truth).
"""
