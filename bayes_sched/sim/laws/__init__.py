"""Ground-truth interference laws of the simulator, one per module: slowdowns that co-located jobs
cause each other, which no policy sees directly.

* :mod:`.base`: the :class:`HiddenInterference` protocol and :class:`RunningJob`;
* :mod:`.contention`: :class:`ContentionLaw`, max-min shares of each node's PCIe switches, DRAM and
  NIC from demands derived per application (emits counters);
* :mod:`.contention_generator`: a synthetic cluster with hidden contention and its ground truth
  (counters datasets for the contention inference to be judged on), and the max-min sharing law;
* :mod:`.gavel_pairs`: :class:`GavelLaw`, node sharing from Gavel's measured GPU-sharing pairs;
* :mod:`.none`: no law.

Laws are registered by name in :data:`HIDDEN_LAWS` with typed options (their fields), each by its
``"module:Class"`` path so that listing names loads no law; a law checks at the start that it fits
the cluster (:meth:`HiddenInterference.check_cluster`).
"""

from __future__ import annotations

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.registry import Registry
from bayes_sched.sim.laws.base import HiddenInterference, RunningJob

#: Hidden interference laws by name (``"none"`` makes no law); options are the laws' fields.
HIDDEN_LAWS: Registry[HiddenInterference | None] = Registry("hidden law",
                                                           group="bayes_sched.laws")
HIDDEN_LAWS.register("none", "bayes_sched.sim.laws.none:no_interference", "No hidden interference.")
HIDDEN_LAWS.register("contention", "bayes_sched.sim.laws.contention:ContentionLaw",
                     "max-min shares of each node's PCIe switches, DRAM and NIC (emits counters)")
HIDDEN_LAWS.register("gavel", "bayes_sched.sim.laws.gavel_pairs:GavelLaw",
                     "node sharing from Gavel's measured GPU-sharing pairs")


def make_hidden(name: str, /, cluster: ClusterSpec | None = None, where: str = "",
                **options: object) -> HiddenInterference | None:
    """A hidden law by name with typed options (``None`` for ``"none"``), e.g.
    ``make_hidden("contention", seed=1)``.

    ``cluster`` gives a law with a topology option the cluster's node topology unless
    ``options`` set one. Raises :class:`InputError` for an unknown law, option or type
    (``where`` prefixes the message: a flag or a file).
    """
    context: dict[str, object] = {}
    if cluster is not None and name in HIDDEN_LAWS and "topology" in HIDDEN_LAWS.options(name):
        context["topology"] = cluster.topology
    return HIDDEN_LAWS.make(name, where=where, context=context, **options)


__all__ = ["HIDDEN_LAWS", "HiddenInterference", "RunningJob", "make_hidden"]
