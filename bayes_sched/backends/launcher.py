"""Starting and stopping a job's processes: what differs between the local and the Ray backend.

A real-cluster backend (the part that meets :class:`~bayes_sched.cluster.Cluster`: reads reports,
writes controls, asks for checkpoints, restarts jobs) is one piece of code; only how processes are
placed on nodes and started differs, and that is a :class:`Launcher`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import AllocationError, InputError


@dataclass(frozen=True)
class LaunchSpec:
    """One start of one job.

    Attributes:
        job_name: the job's name (unique in the scheduler).
        argv: the command every replica runs, e.g. ``("python", "train.py", "--lr", "0.1")``.
        gpus_per_node: GPUs (replicas) on each node of the cluster spec, shape ``(num_nodes,)``;
            one process per GPU.
        job_dir: the job's directory (:mod:`bayes_sched.client.protocol`), shared by its processes.
        attempt: 0 for the first start, +1 for each restart.
        env: extra environment variables for every replica (the local launcher sets them over
            the allow-listed part of its own environment, :mod:`bayes_sched.backends.job_env`;
            every launcher adds the job directory's variables, ``torch.distributed``'s and
            ``CUDA_VISIBLE_DEVICES`` over them).
        cwd: working directory of the processes (``None``: the job directory).
    """

    job_name: str
    argv: tuple[str, ...]
    gpus_per_node: tuple[int, ...]
    job_dir: str
    attempt: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None

    @property
    def world_size(self) -> int:
        return sum(self.gpus_per_node)

    @property
    def placement(self) -> str:
        """GPUs per used node as a digit string, e.g. ``"22"`` (the Pollux profiles' notation)."""
        return "".join(str(count) for count in self.gpus_per_node if count > 0)


@dataclass(frozen=True)
class ExitStatus:
    """How a job's processes ended: ``returncode`` of the first replica to fail (0 when all
    succeeded; negative: killed by that signal, as :mod:`subprocess` reports it; ``None``: not
    known, for processes a launcher reattached to and so cannot wait for: the job's ``exit``
    report tells), the end of that replica's log, and whether it ended because its node left
    the cluster, or its workers were gone when a restarted scheduler reattached (``node_lost``:
    not the job's failure; it restarts from its checkpoint, elsewhere where need be)."""

    returncode: int | None
    log_tail: str = ""
    node_lost: bool = False


class JobProcesses(Protocol):
    """The running processes of one start of one job."""

    def poll(self) -> ExitStatus | None:
        """``None`` while any replica runs; the exit status once all have ended (a failed
        replica stops the others)."""
        ...

    def stop(self, grace_seconds: float) -> ExitStatus:
        """SIGTERM every replica (the client checkpoints on it), wait up to ``grace_seconds``,
        then SIGKILL what is left; returns the exit status."""
        ...

    def handle(self) -> dict[str, Any]:
        """What identifies these processes, as plain JSON data, so a restarted scheduler can
        reattach to them (:meth:`Launcher.reattach`); e.g. PIDs with their start times."""
        ...


class Launcher(Protocol):
    """Places and starts job processes on a cluster's nodes."""

    def cluster_spec(self) -> ClusterSpec:
        """The nodes (GPU type, GPU count, topology) processes can be placed on now; read again
        every round, so a node that left is gone from it (indices follow :attr:`node_ids`)."""
        ...

    @property
    def node_ids(self) -> tuple[str, ...]:
        """A name of each node of the last :meth:`cluster_spec`, in its order, that stays the
        node's while it lives: how an allocation follows its nodes when the spec changes."""
        ...

    def node_aliases(self) -> dict[str, str]:
        """Names a node of the last :meth:`cluster_spec` is known by elsewhere (its host name,
        its address; as a node's collector records itself in its counters) -> its id in
        :attr:`node_ids`; each id maps to itself. A name several nodes share is left out."""
        ...

    def start(self, spec: LaunchSpec) -> JobProcesses:
        """Start one process per GPU of ``spec.gpus_per_node``; raises
        :class:`~bayes_sched.errors.AllocationError` (starting nothing) where the GPUs are not
        free."""
        ...

    def start_many(self, specs: Sequence[LaunchSpec]
                   ) -> Sequence[JobProcesses | AllocationError | InputError]:
        """Start several jobs (a round's starts): per spec its processes, or the error
        :meth:`start` would have raised for it (the others start all the same). A launcher whose
        starts wait on remote workers starts them together (Ray)."""
        ...

    def reattach(self, spec: LaunchSpec, handle: Mapping[str, Any]) -> JobProcesses | None:
        """The processes of ``spec`` that a previous scheduler started (``handle`` is their
        :meth:`JobProcesses.handle`), now held by this launcher, or ``None`` where none of them
        runs any more (a process whose ID was reused by another is not one of them). A launcher
        that can tell its workers vanished (Ray: the actors are gone) returns processes whose
        first poll reports them ``node_lost`` instead, so no failure is counted."""
        ...

    def release_strays(self, job_dirs: Sequence[str]) -> list[str]:
        """Release what runs for the jobs of ``job_dirs`` that this launcher does not hold (a
        start a killed scheduler made but had not recorded), after every recorded start was
        reattached; returns what it released (names, for the log)."""
        ...

    def close(self) -> None:
        """Stop every process this launcher started or reattached to and release what it holds
        (a scheduler that means to be reattached to its jobs later exits without calling it)."""
        ...


def rank_layout(gpus_per_node: Sequence[int]) -> list[tuple[int, int, int]]:
    """``(node index, local rank, global rank)`` of every replica: ranks fill nodes in order."""
    layout = []
    rank = 0
    for node, count in enumerate(gpus_per_node):
        for local in range(count):
            layout.append((node, local, rank))
            rank += 1
    return layout
