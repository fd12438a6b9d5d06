"""What a world is: the simulated setting a policy runs in, with everything that setting decides.

A *world* owns what a run needs besides a policy: its default cluster and round length, its truth
(the physics jobs progress by: the Pollux world's measured profiles and goodput laws, a
throughput-table world's measured steps/s), how its jobs are read, which policies can run in it
and the options they run with there unless told otherwise, and how a run is driven to one
:class:`~bayes_sched.sim.result.RunResult`. The command line and the experiments read these from
the world (:data:`bayes_sched.worlds.WORLDS`) instead of redeclaring them.

A world object is light: it imports the simulator only when it reads jobs or runs, so listing the
worlds (``--help``) stays instant.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bayes_sched.errors import InputError

if TYPE_CHECKING:
    from bayes_sched.cluster import Cluster
    from bayes_sched.cluster_spec import ClusterSpec
    from bayes_sched.policies.base import Policy
    from bayes_sched.sim.result import RunResult


@dataclass(frozen=True)
class World(ABC):
    """A simulated setting (see the module).

    Attributes:
        name: the world's name in :data:`~bayes_sched.worlds.WORLDS`.
        description: one line: what runs there and whose artifact it reproduces.
        default_cluster: the cluster a run gets when none is given (a cluster spec string,
            :func:`~bayes_sched.cluster_spec.load_cluster_spec`).
        round_seconds: the scheduling round a run gets when none is given, seconds.
        policies: the policies that can run in this world (names in
            :data:`~bayes_sched.policies.POLICIES`).
        default_policy: the policy a run gets when none is named.
        policy_defaults: per policy, the options it runs with here unless told otherwise (the
            published setting's); an option a policy does not take is not given to it.
    """

    name: str
    description: str
    default_cluster: str
    round_seconds: float
    policies: tuple[str, ...]
    default_policy: str
    policy_defaults: Mapping[str, Mapping[str, object]] = field(default_factory=dict)

    # --- what every world decides the same way -------------------------------------------------

    def cluster(self, spec: ClusterSpec | None = None,
                round_seconds: float | None = None) -> ClusterSpec:
        """The cluster a run simulates: ``spec`` (default :attr:`default_cluster`) with the
        round ``round_seconds`` (default :attr:`round_seconds`)."""
        from dataclasses import replace

        from bayes_sched.cluster_spec import load_cluster_spec

        base = load_cluster_spec(self.default_cluster) if spec is None else spec
        return replace(base, round_interval=float(round_seconds or self.round_seconds))

    def runs(self, name: str) -> bool:
        """Whether policy ``name`` runs here: one of :attr:`policies`, or a plugin policy
        (entry-point group ``bayes_sched.policies``) whose class names this world in its
        ``worlds`` attribute."""
        if name in self.policies:
            return True
        from bayes_sched.policies import POLICIES

        if name not in POLICIES or POLICIES.plugin_of(name) is None:
            return False
        return self.name in tuple(getattr(POLICIES[name], "worlds", ()))

    def check_policy(self, name: str, flag: str = "--policy") -> None:
        """Refuse a policy that cannot run here, in one line naming ``flag``."""
        if not self.runs(name):
            raise InputError(f"{flag} {name}: not a policy of the {self.name} world; expected "
                             f"one of {', '.join(self.policies)}")

    def policy_options(self, name: str) -> dict[str, object]:
        """The options policy ``name`` runs with here unless told otherwise (only those it
        takes)."""
        from bayes_sched.policies import POLICIES

        accepted = POLICIES.options(name)
        return {key: value for key, value in self.policy_defaults.get(name, {}).items()
                if key in accepted}

    def make_policy(self, name: str, seed: int = 0, **options: Any) -> Policy:
        """A fresh policy ``name`` with this world's defaults for it, then ``options``; ``seed``
        for a seed option neither sets."""
        from bayes_sched.policies import POLICIES

        self.check_policy(name)
        return POLICIES.make(name, context={"seed": seed},
                             **{**self.policy_options(name), **options})

    # --- what each world decides ---------------------------------------------------------------

    @abstractmethod
    def accepts(self, source: str) -> bool:
        """Whether ``source`` (a file or a shipped name) holds this world's jobs."""

    @abstractmethod
    def read_jobs(self, source: str, max_jobs: int | None = None) -> tuple[str, Any]:
        """The jobs of ``source`` (the first ``max_jobs``), with the name results carry.

        Raises:
            InputError: no such source, or a bad row (one line naming the file and row).
        """

    @abstractmethod
    def run(self, jobs: Sequence[Any], policy: Policy, spec: ClusterSpec | None = None, *,
            name: str = "", seed: int = 0, on_round: Callable[[Cluster], None] | None = None,
            clock: Callable[[], float] = time.perf_counter, **options: Any) -> RunResult:
        """Run ``jobs`` under ``policy`` on ``spec`` (default :meth:`cluster`) until they end or
        the run's horizon; ``name`` labels the result (the jobs' source), ``seed`` seeds the
        world's own randomness, ``on_round`` is called with the cluster after every round,
        ``clock`` times estimation and decisions. ``options``: the world's run settings (each
        world documents them)."""


__all__ = ["World"]
