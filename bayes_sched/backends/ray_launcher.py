"""The Ray launcher: a job's replicas placed on the nodes its allocation names, one Ray actor per
GPU, each running the job's command as a subprocess.

Nodes and GPU types come from Ray (:meth:`RayLauncher.cluster_spec`): every live node with GPUs,
its GPU count from its ``GPU`` resource, its type from Ray's accelerator type (the node label
``ray.io/accelerator-type``, else a resource ``accelerator_type:<T>``, which Ray sets itself on
NVIDIA nodes and ``ray start --resources`` can set by hand). Ray's names map onto
:data:`~bayes_sched.gpu_types.GPU_TYPES` as every device name does
(:func:`~bayes_sched.gpu_types.gpu_type_of_device`: case-insensitively, a memory variant falling
back to its family, ``A100-80G`` -> ``a100``); ``gpu_type_names`` maps other names; a node with no
accelerator type gets ``default_gpu_type`` (:data:`DEFAULT_GPU_TYPE`, the Pollux artifact's T4,
as :meth:`ClusterSpec.homogeneous`).

One start (:meth:`RayLauncher.start`):

1. a placement group per used node, one ``{"GPU": 1}`` bundle per replica, ``STRICT_PACK`` and
   pinned to that node by its ``ray.io/node-id`` label (Ray's bundle label selectors, Ray 2.49
   on); all-or-nothing within
   ``placement_timeout_seconds`` (else :class:`AllocationError`, every group removed);
2. one actor per bundle (no CPU asked: the job's process is the work, not the actor);
3. rank 0's actor picks a free port; every actor starts the command with the job directory's
   variables, ``torch.distributed``'s (``MASTER_ADDR`` = rank 0's node address) and
   ``CUDA_VISIBLE_DEVICES`` = the GPU ids Ray assigned it; stdout and stderr go to
   :func:`~bayes_sched.client.protocol.replica_log_path`. The process dies with its actor
   (``PR_SET_PDEATHSIG``), so a lost actor leaves no stray process.

The actors and placement groups are detached and named (:data:`RAY_NAMESPACE`; names start with
:func:`job_prefix` of the job directory), so a job's processes outlive the scheduler that started
them (the Ray cluster is not the scheduler's: ``serve`` connects to it by address). A killed and
restarted scheduler finds them by the names its state recorded (:meth:`RayLauncher.reattach`):
the same processes run on, and their actors, still their parents, report how they end. Starts
the killed scheduler had not recorded are released (:meth:`RayLauncher.release_strays`), so no
job runs twice.

:meth:`RayJobProcesses.stop` sends SIGTERM (the client checkpoints), waits, SIGKILLs the process
group, then kills the actors and removes the placement groups. A node that leaves the cluster:
its actors die, :meth:`RayJobProcesses.poll` reports the job failed (returncode
:data:`NODE_LOST_RETURNCODE`; the others are stopped), and ``cluster_spec()`` no longer lists it.

Node indices (an allocation's ``(num_nodes,)`` axis) follow the nodes of the last
:meth:`RayLauncher.cluster_spec`; :attr:`RayLauncher.node_ids` names them. A node keeps its place
relative to the others while it lives; a new node comes last.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.backends.job_env import LOOPBACK
from bayes_sched.backends.launcher import ExitStatus, JobProcesses, Launcher, LaunchSpec, rank_layout
from bayes_sched.backends.ray_replica import ReplicaProcess
from bayes_sched.backends.ray_session import DEFAULT_CONNECT_TIMEOUT, connect_ray
from bayes_sched.client.protocol import job_environment, log_tail, replica_log_path
from bayes_sched.cluster_spec import (
    DEFAULT_RESTART_DELAY,
    DEFAULT_ROUND_INTERVAL,
    ClusterSpec,
    NodeSpec,
    default_topology,
)
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.gpu_types import GPU_TYPES, gpu_type, gpu_type_of_device

LOG = logging.getLogger(__name__)

#: GPU type of a node whose Ray resources name no accelerator type.
DEFAULT_GPU_TYPE = "t4"

#: Ray's per-node accelerator resource (``accelerator_type:A100``) and node labels.
ACCELERATOR_RESOURCE_PREFIX = "accelerator_type:"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
NODE_ID_LABEL = "ray.io/node-id"

#: Set in every replica besides the protocol's variables: the Ray node it runs on.
ENV_RAY_NODE_ID = "BAYES_SCHED_RAY_NODE_ID"

#: Return code reported for a replica whose actor died with its node (as if SIGKILLed).
NODE_LOST_RETURNCODE = -int(signal.SIGKILL)

#: Bytes of a failed replica's log kept in :attr:`ExitStatus.log_tail`.
LOG_TAIL_BYTES = 4000

#: Ray namespace of the replicas' named, detached actors (whatever namespace the driver has).
RAY_NAMESPACE = "bayes-sched"


def job_prefix(job_dir: str) -> str:
    """The start of the Ray names of every actor and placement group of the job whose directory
    is ``job_dir``: unique to that directory (so to one job of one scheduler's state), the same
    for a restarted scheduler, which finds them by it."""
    digest = hashlib.sha1(str(Path(job_dir).resolve()).encode()).hexdigest()[:16]
    return f"bayes-sched:{digest}:"


def start_names(spec: LaunchSpec) -> tuple[str, Callable[[int], str], Callable[[int], str]]:
    """The Ray names of one start of ``spec``: its prefix (:func:`job_prefix` + attempt + a
    nonce, so no start reuses a name still being released), then the actor name of a rank and
    the placement group name of a node index."""
    prefix = f"{job_prefix(spec.job_dir)}a{spec.attempt}:{secrets.token_hex(4)}:"
    return prefix, (lambda rank: f"{prefix}rank{rank}"), (lambda node: f"{prefix}node{node}")


# --- on the scheduler's side ----------------------------------------------------------------------


@dataclass
class _Replica:
    rank: int
    node: int
    node_id: str
    actor: Any  # None: gone when a restarted scheduler looked for it
    name: str = ""
    returncode: int | None = None
    lost: bool = False
    gone: bool = False  # lost before this scheduler reattached (its node left, or it was killed)


@dataclass
class RayJobProcesses:
    """The replicas of one start of one job on a Ray cluster (:class:`JobProcesses`).

    Attributes:
        spec: what was started.
        timings: seconds spent, by part: ``placement_group_ready``, ``actors_up``,
            ``processes_started`` (by :meth:`RayLauncher.start`) and ``stop`` (by :meth:`stop`).
    """

    spec: LaunchSpec
    replicas: list[_Replica]
    placement_groups: list[Any]
    group_names: list[str]
    failure_grace_seconds: float
    poll_timeout_seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    _status: ExitStatus | None = None
    _failed_rank: int | None = None
    _kill_at: float | None = None
    _on_end: Callable[[RayJobProcesses], None] | None = None

    def poll(self) -> ExitStatus | None:
        """``None`` while any replica runs. The first replica to fail (a non-zero return code,
        or its actor lost with its node) has the others sent SIGTERM, and SIGKILL
        ``failure_grace_seconds`` later; once all have ended, the exit status (the failed
        replica's code and log tail)."""
        if self._status is not None:
            return self._status
        self._refresh()
        if self._failed_rank is None:
            failed = [r for r in self.replicas if r.lost or r.returncode not in (None, 0)]
            if failed:
                self._failed_rank = failed[0].rank
                self._signal(signal.SIGTERM)
                self._kill_at = time.monotonic() + self.failure_grace_seconds
        if self._kill_at is not None and time.monotonic() >= self._kill_at:
            self._signal(signal.SIGKILL)
        if any(r.returncode is None and not r.lost for r in self.replicas):
            return None
        return self._finish()

    def handle(self) -> dict[str, Any]:
        """The names of the replicas' detached actors (by rank, with their nodes) and the ids
        of the placement groups, by which a restarted scheduler finds them
        (:meth:`RayLauncher.reattach`)."""
        return {"backend": "ray", "attempt": self.spec.attempt, "namespace": RAY_NAMESPACE,
                "replicas": [{"rank": r.rank, "node_id": r.node_id, "actor": r.name}
                             for r in self.replicas],
                "groups": [{"id": group.id.hex(), "name": name} for group, name in
                           zip(self.placement_groups, self.group_names, strict=True)]}

    def stop(self, grace_seconds: float) -> ExitStatus:
        """SIGTERM every replica, wait up to ``grace_seconds`` for all to exit, SIGKILL what is
        left, then release the actors and placement groups."""
        if self._status is not None:
            return self._status
        began = time.perf_counter()
        self._signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_seconds
        while self._running() and time.monotonic() < deadline:
            time.sleep(0.05)
            self._refresh()
        if self._running():
            self._signal(signal.SIGKILL)
            deadline = time.monotonic() + max(grace_seconds, 5.0)
            while self._running() and time.monotonic() < deadline:
                time.sleep(0.05)
                self._refresh()
        status = self._finish()
        self.timings["stop"] = time.perf_counter() - began
        return status

    # --- parts ---

    def _running(self) -> bool:
        return any(r.returncode is None and not r.lost for r in self.replicas)

    def _refresh(self) -> None:
        """Ask every live replica for its return code (one round trip for all; a replica that
        does not answer within ``poll_timeout_seconds`` counts as running, this time)."""
        import ray
        from ray.exceptions import ActorDiedError, RayActorError

        live = [r for r in self.replicas if r.returncode is None and not r.lost]
        if not live:
            return
        refs = [r.actor.poll.remote() for r in live]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.poll_timeout_seconds)
        done = set(ready)
        for replica, ref in zip(live, refs, strict=True):
            if ref not in done:
                continue  # no answer yet: still running, as far as anyone knows
            try:
                replica.returncode = ray.get(ref)
            except ActorDiedError:
                replica.lost = True
            except RayActorError:  # unavailable for now (its node may be failing): ask again
                pass

    def _signal(self, signum: int) -> None:
        import ray
        from ray.exceptions import RayActorError

        refs = [r.actor.send.remote(int(signum)) for r in self.replicas
                if r.returncode is None and not r.lost]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.poll_timeout_seconds)
        for ref in ready:
            try:
                ray.get(ref)
            except RayActorError:
                pass  # lost: the next refresh says so

    def _release(self) -> None:
        """Kill the actors (and so what still runs under them), remove the placement groups."""
        import ray
        from ray.util.placement_group import remove_placement_group

        for replica in self.replicas:
            if replica.actor is not None:
                ray.kill(replica.actor, no_restart=True)
        for group in self.placement_groups:
            try:
                remove_placement_group(group)
            except Exception as error:  # removed already (its node left, or by hand)
                LOG.debug("placement group %s not removed: %s", group.id.hex(), error)

    def _finish(self) -> ExitStatus:
        """Record the exit status and release what the job held."""
        failed = next((r for r in self.replicas if r.rank == self._failed_rank), None) or next(
            (r for r in self.replicas if r.lost or r.returncode), None)
        if failed is None:
            status = ExitStatus(0)
        else:
            tail = log_tail(replica_log_path(self.spec.job_dir, self.spec.attempt,
                                             failed.rank), LOG_TAIL_BYTES)
            if failed.gone:
                tail += ("\n" if tail else "") + (
                    f"bayes-sched: replica rank {failed.rank} lost: its Ray actor "
                    f"{failed.name} was gone when the scheduler restarted (its node "
                    f"{failed.node_id} left the cluster, or the actor was killed)\n")
            elif failed.lost:
                tail += ("\n" if tail else "") + (
                    f"bayes-sched: replica rank {failed.rank} lost: its Ray node "
                    f"{failed.node_id} left the cluster\n")
            status = ExitStatus(NODE_LOST_RETURNCODE if failed.lost else int(failed.returncode
                                                                            or 0), tail,
                                node_lost=failed.lost)
        self._release()
        self._status = status
        if self._on_end is not None:
            self._on_end(self)
        return status


class RayLauncher:
    """Places and starts job processes on a Ray cluster (:class:`Launcher`).

    Args:
        address: the cluster (``auto`` or ``HOST:PORT``); a process already connected to Ray
            keeps its connection.
        default_gpu_type: the type of a node that names no accelerator type.
        gpu_type_names: Ray accelerator types -> our GPU types, for names that do not match.
        connect_timeout_seconds: bound on reaching ``address``.
        placement_timeout_seconds: bound on a start's placement groups becoming ready.
        actor_timeout_seconds: bound on a start's actors coming up and starting the processes
            (else :class:`AllocationError`, the actors killed, the groups removed).
        failure_grace_seconds: after one replica fails, seconds the others get after SIGTERM.
        poll_timeout_seconds: bound on one poll's round trip to a job's actors (a replica that
            does not answer in time counts as running until a later poll).
        restart_delay, round_interval: passed into :meth:`cluster_spec` (seconds).
        where: how the operator named ``address`` (a command-line flag), for error messages.

    Raises:
        InputError: Ray not installed, or no cluster answers at ``address``.
    """

    def __init__(self, address: str = "auto", *, default_gpu_type: str = DEFAULT_GPU_TYPE,
                 gpu_type_names: Mapping[str, str] | None = None,
                 connect_timeout_seconds: float = DEFAULT_CONNECT_TIMEOUT,
                 placement_timeout_seconds: float = 30.0, actor_timeout_seconds: float = 60.0,
                 failure_grace_seconds: float = 10.0, poll_timeout_seconds: float = 2.0,
                 restart_delay: float = DEFAULT_RESTART_DELAY,
                 round_interval: float = DEFAULT_ROUND_INTERVAL,
                 where: str = "Ray address") -> None:
        gpu_type(default_gpu_type, "default_gpu_type")
        self.default_gpu_type = default_gpu_type
        self.gpu_type_names = dict(gpu_type_names or {})
        self.placement_timeout_seconds = placement_timeout_seconds
        self.actor_timeout_seconds = actor_timeout_seconds
        self.failure_grace_seconds = failure_grace_seconds
        self.poll_timeout_seconds = poll_timeout_seconds
        self.restart_delay = restart_delay
        self.round_interval = round_interval
        self._session = connect_ray(address, connect_timeout_seconds, where=where)
        self._order: list[str] = []           # every node id seen, in first-seen order
        self._node_ids: tuple[str, ...] = ()  # the nodes of the last cluster_spec()
        self._addresses: dict[str, str] = {}
        self._hostnames: dict[str, str] = {}
        self._types: dict[str, str] = {}
        self._jobs: dict[int, RayJobProcesses] = {}
        self._actor_class: Any = None

    @property
    def node_ids(self) -> tuple[str, ...]:
        """Ray node ids of the nodes of the last :meth:`cluster_spec`, in its order."""
        return self._node_ids

    def cluster_spec(self) -> ClusterSpec:
        """Every live Ray node with at least one GPU, in a stable order.

        Raises:
            InputError: no live node has a GPU, or a node's accelerator type is unknown.
        """
        import ray

        nodes = []
        for node in ray.nodes():
            gpus = int(node.get("Resources", {}).get("GPU", 0))
            if node.get("Alive") and gpus >= 1:
                nodes.append((node, gpus))
        if not nodes:
            raise InputError("the Ray cluster has no live node with a GPU: expected nodes "
                             "started with GPUs (ray start --num-gpus N)")
        nodes.sort(key=lambda item: (item[0]["NodeManagerAddress"], item[0]["NodeID"]))
        found = {}
        for node, gpus in nodes:
            node_id = node["NodeID"]
            if node_id not in self._order:
                self._order.append(node_id)
            self._addresses[node_id] = node["NodeManagerAddress"]
            self._hostnames[node_id] = str(node.get("NodeManagerHostname") or "")
            self._types[node_id] = self._node_gpu_type(node)
            found[node_id] = gpus
        self._node_ids = tuple(n for n in self._order if n in found)
        specs = tuple(NodeSpec(self._types[n], found[n], default_topology(found[n]))
                      for n in self._node_ids)
        return ClusterSpec(specs, restart_delay=self.restart_delay,
                           round_interval=self.round_interval)

    def node_aliases(self) -> dict[str, str]:
        """Each node's host name and address (Ray's ``NodeManagerHostname`` and
        ``NodeManagerAddress``) -> its Ray node id, where no other node of the last
        :meth:`cluster_spec` shares it (several Ray nodes on one machine do); each id maps to
        itself. A collector started with ``--node`` set to its Ray node id is always matched."""
        names: dict[str, set[str]] = {}
        for node_id in self._node_ids:
            for name in (self._hostnames.get(node_id), self._addresses.get(node_id)):
                if name:
                    names.setdefault(name, set()).add(node_id)
        aliases = {name: next(iter(ids)) for name, ids in names.items() if len(ids) == 1}
        return {**aliases, **{node_id: node_id for node_id in self._node_ids}}

    def _node_gpu_type(self, node: Mapping[str, Any]) -> str:
        label = (node.get("Labels") or {}).get(ACCELERATOR_LABEL)
        names = [label] if label else sorted(
            key.removeprefix(ACCELERATOR_RESOURCE_PREFIX) for key in node.get("Resources", {})
            if key.startswith(ACCELERATOR_RESOURCE_PREFIX))
        if not names:
            return self.default_gpu_type
        where = f"Ray node {node['NodeID']} ({node['NodeManagerAddress']})"
        if len(names) > 1:
            raise InputError(f"{where}: accelerator types {', '.join(names)}: expected one")
        name = gpu_type_of_device(names[0], self.gpu_type_names)
        if name is None:
            raise InputError(f"{where}: accelerator type {names[0]!r} is not a known GPU type; "
                             f"expected one of {', '.join(GPU_TYPES)}, or a gpu_type_names "
                             "entry mapping it onto one")
        return name

    def start(self, spec: LaunchSpec) -> RayJobProcesses:
        """Reserve the GPUs ``spec.gpus_per_node`` names (nodes of the last
        :meth:`cluster_spec`) and start one replica on each.

        Raises:
            AllocationError: the counts do not fit the nodes, or the GPUs are not free within
                ``placement_timeout_seconds`` (nothing started, nothing left reserved).
        """
        (started,) = self.start_many([spec])
        if isinstance(started, AllocationError):
            raise started
        return started

    def start_many(self, specs: Sequence[LaunchSpec]
                   ) -> list[RayJobProcesses | AllocationError]:
        """Start several jobs at once, as :meth:`start` does each: every placement group asked
        for together and waited for in one bounded wait, every actor made together and asked
        in one round trip per phase, so the jobs' Ray workers start in parallel and a round
        that starts several jobs pays about one start. One job failing does not stop the others.

        Returns:
            per spec, its processes, or the :class:`AllocationError` that left it unstarted
            (nothing of it left reserved).
        """
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        if not self._node_ids:
            self.cluster_spec()
        began = time.perf_counter()
        results: list[RayJobProcesses | AllocationError | None] = [None] * len(specs)
        groups: dict[int, dict[int, Any]] = {}  # spec index -> node index -> its group
        names = {}  # spec index -> (actor name of a rank, group name of a node)
        for k, spec in enumerate(specs):
            counts = tuple(spec.gpus_per_node)
            if len(counts) != len(self._node_ids) or min(counts, default=0) < 0 \
                    or sum(counts) < 1:
                results[k] = AllocationError(
                    f"job {spec.job_name}: GPUs per node {list(counts)}: expected "
                    f"{len(self._node_ids)} counts >= 0 (one per node of the cluster spec), at "
                    "least one GPU")
                continue
            # Detached and named: they outlive this driver (a killed scheduler), and the next
            # one finds them (reattach) or, for a start it had not recorded, releases them.
            _, actor_name, group_name = start_names(spec)
            names[k] = (actor_name, group_name)
            groups[k] = {i: placement_group(
                [{"GPU": 1.0}] * count, strategy="STRICT_PACK", name=group_name(i),
                lifetime="detached",
                bundle_label_selector=[{NODE_ID_LABEL: self._node_ids[i]}] * count)
                for i, count in enumerate(counts) if count > 0}
        refs = {group.ready(): k for k, per_node in groups.items()
                for group in per_node.values()}
        ready: list[Any] = []
        try:
            ready, _ = ray.wait(list(refs), num_returns=len(refs),
                                timeout=self.placement_timeout_seconds)
        finally:
            ready_count = {k: 0 for k in groups}
            for ref in ready:
                ready_count[refs[ref]] += 1
            for k, per_node in groups.items():
                if ready_count[k] < len(per_node):  # all-or-nothing, per job
                    for group in per_node.values():
                        remove_placement_group(group)
                    counts = specs[k].gpus_per_node
                    wanted = ", ".join(f"{counts[i]} on node {i}" for i in per_node)
                    results[k] = AllocationError(
                        f"job {specs[k].job_name}: GPUs ({wanted}) not free within "
                        f"{self.placement_timeout_seconds:g} s; nothing started")
        placed = [k for k in groups if results[k] is None]
        jobs = {k: self._make_actors(specs[k], groups[k], *names[k], time.perf_counter() - began)
                for k in placed}
        for k, outcome in zip(placed, self._start_processes([jobs[k] for k in placed]),
                              strict=True):
            results[k] = outcome
        return [r for r in results if r is not None]

    def _make_actors(self, spec: LaunchSpec, groups: Mapping[int, Any],
                     actor_name: Callable[[int], str], group_name: Callable[[int], str],
                     placement_seconds: float) -> RayJobProcesses:
        """One named, detached actor per bundle of ``groups`` (node index -> its placement
        group): it lives until it is killed, not with this driver."""
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if self._actor_class is None:  # made once: Ray exports a class on each ray.remote
            self._actor_class = ray.remote(num_cpus=0, num_gpus=1, max_restarts=0)(ReplicaProcess)
        replicas = [_Replica(rank, node, self._node_ids[node], self._actor_class.options(
            name=actor_name(rank), namespace=RAY_NAMESPACE, lifetime="detached",
            scheduling_strategy=PlacementGroupSchedulingStrategy(
                groups[node], placement_group_bundle_index=local)).remote(), actor_name(rank))
            for node, local, rank in rank_layout(spec.gpus_per_node)]
        return RayJobProcesses(spec, replicas, list(groups.values()),
                               [group_name(node) for node in groups],
                               self.failure_grace_seconds, self.poll_timeout_seconds,
                               {"placement_group_ready": placement_seconds},
                               _on_end=self._forget)

    def _start_processes(self, jobs: Sequence[RayJobProcesses]
                         ) -> list[RayJobProcesses | AllocationError]:
        """Bring up every job's actors and start its processes, all jobs' calls of a phase
        together (``where``, rank 0's free port, ``start``), each phase bounded by
        ``actor_timeout_seconds``; a job whose actors fail or do not answer in time is
        released."""
        import ray

        began = time.perf_counter()
        failed: dict[int, str] = {}

        def gather(calls: dict[int, list[Any]]) -> dict[int, list[Any]]:
            """The answers of each job's calls, waited for together; jobs that fail go to
            ``failed`` with the reason."""
            refs = [ref for batch in calls.values() for ref in batch]
            ray.wait(refs, num_returns=len(refs), timeout=self.actor_timeout_seconds)
            answers = {}
            for k, batch in calls.items():
                try:
                    answers[k] = ray.get(batch, timeout=0)
                except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError) as error:
                    failed[k] = type(error).__name__
            return answers

        live = dict(enumerate(jobs))
        where = gather({k: [r.actor.where.remote() for r in job.replicas]
                        for k, job in live.items()})
        for job in live.values():
            job.timings["actors_up"] = time.perf_counter() - began
        ports = gather({k: [live[k].replicas[0].actor.free_port.remote()] for k in where})
        starts = {}
        for k, (port,) in ports.items():
            job, spec = live[k], live[k].spec
            # A job on one node meets on loopback: its rendezvous is not reachable from elsewhere.
            single_node = len({r.node_id for r in job.replicas}) == 1
            rank0 = LOOPBACK if single_node else self._addresses[job.replicas[0].node_id]
            starts[k] = [r.actor.start.remote(spec.argv, self._environment(
                spec, r, spec.gpus_per_node, gpu_ids, rank0, port), spec.cwd or spec.job_dir,
                str(replica_log_path(spec.job_dir, spec.attempt, r.rank)))
                for r, (_, gpu_ids) in zip(job.replicas, where[k], strict=True)]
        gather(starts)
        results: list[RayJobProcesses | AllocationError] = []
        for k, job in live.items():
            if k in failed or k not in starts:
                for replica in job.replicas:  # those started, if any, die with their actors
                    replica.actor.send.remote(int(signal.SIGKILL))
                job._release()
                results.append(AllocationError(
                    f"job {job.spec.job_name}: its Ray actors did not come up within "
                    f"{self.actor_timeout_seconds:g} s ({failed.get(k, 'no answer')}); "
                    "nothing left running"))
                continue
            job.timings["processes_started"] = (time.perf_counter() - began
                                                - job.timings["actors_up"])
            self._jobs[id(job)] = job
            results.append(job)
        return results

    def _forget(self, job: RayJobProcesses) -> None:
        self._jobs.pop(id(job), None)

    def _environment(self, spec: LaunchSpec, replica: _Replica, counts: Sequence[int],
                     gpu_ids: Sequence[str], master_address: str, port: int) -> dict[str, str]:
        node_id = self._node_ids[replica.node]
        local = replica.rank - sum(counts[:replica.node])
        return {**spec.env,
                **job_environment(spec.job_dir, spec.job_name, spec.attempt, spec.placement,
                                  self._types[node_id]),
                "RANK": str(replica.rank), "WORLD_SIZE": str(spec.world_size),
                "LOCAL_RANK": str(local), "LOCAL_WORLD_SIZE": str(counts[replica.node]),
                "MASTER_ADDR": master_address, "MASTER_PORT": str(port),
                "CUDA_VISIBLE_DEVICES": ",".join(gpu_ids), ENV_RAY_NODE_ID: node_id}

    def reattach(self, spec: LaunchSpec, handle: Mapping[str, Any]) -> RayJobProcesses | None:
        """The replicas a previous scheduler started (``handle``: their
        :meth:`RayJobProcesses.handle`), found by their actors' names: the actors and placement
        groups are detached, so they and each actor's process outlive that scheduler, and the
        actor, still the process's parent, knows its return code.

        A replica whose actor is gone (its node left while no scheduler ran, or it was killed)
        counts as lost with its node: the job's first :meth:`RayJobProcesses.poll` stops what
        is left and reports ``node_lost``, so it restarts from its checkpoint and no failure is
        counted. ``None`` for a handle that is not a Ray start's (nothing to look up)."""
        import ray
        from ray.util.placement_group import PlacementGroup

        if handle.get("backend") != "ray" or "groups" not in handle:
            return None
        namespace = str(handle.get("namespace", RAY_NAMESPACE))
        if not self._node_ids:
            self.cluster_spec()
        index = {node: i for i, node in enumerate(self._node_ids)}
        replicas = []
        for entry in handle["replicas"]:
            name = str(entry["actor"])
            try:
                actor = ray.get_actor(name, namespace=namespace)
            except ValueError:  # no live actor of that name
                actor = None
            replicas.append(_Replica(int(entry["rank"]), index.get(entry["node_id"], -1),
                                     str(entry["node_id"]), actor, name, lost=actor is None,
                                     gone=actor is None))
        groups = [PlacementGroup(ray.PlacementGroupID.from_hex(g["id"]))
                  for g in handle["groups"]]
        job = RayJobProcesses(spec, replicas, groups, [str(g["name"]) for g in handle["groups"]],
                              self.failure_grace_seconds, self.poll_timeout_seconds,
                              _on_end=self._forget)
        self._jobs[id(job)] = job
        return job

    def release_strays(self, job_dirs: Sequence[str]) -> list[str]:
        """Kill the actors and remove the placement groups of the jobs in ``job_dirs`` that no
        job of this launcher holds: those of a start a killed scheduler made but had not
        recorded (its record still says the job waits), which would otherwise run the job
        twice. Call it after :meth:`reattach` has taken up every recorded start. Returns the
        names released."""
        import ray
        from ray.util import list_named_actors, placement_group_table
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        prefixes = tuple(job_prefix(d) for d in job_dirs)
        if not prefixes:
            return []
        held = {name for job in self._jobs.values()
                for name in [r.name for r in job.replicas] + job.group_names}
        released = []
        for entry in list_named_actors(all_namespaces=True):
            name = entry["name"]
            if entry["namespace"] == RAY_NAMESPACE and name.startswith(prefixes) \
                    and name not in held:
                try:
                    ray.kill(ray.get_actor(name, namespace=RAY_NAMESPACE), no_restart=True)
                except ValueError:
                    continue  # ended meanwhile
                released.append(name)
        for group_id, group in placement_group_table().items():
            name = group.get("name") or ""
            if group["state"] != "REMOVED" and name.startswith(prefixes) and name not in held:
                remove_placement_group(PlacementGroup(ray.PlacementGroupID.from_hex(group_id)))
                released.append(name)
        if released:
            LOG.warning("released %d Ray actor(s) and placement group(s) of starts no record "
                        "holds: %s", len(released), ", ".join(released))
        return released

    def close(self, grace_seconds: float = 10.0) -> None:
        """Stop every job this launcher started (SIGTERM, ``grace_seconds``, SIGKILL), release
        their GPUs, and disconnect where this launcher connected."""
        for job in list(self._jobs.values()):
            job.stop(grace_seconds)
        self._session.close()


if TYPE_CHECKING:  # the launcher and its jobs meet the protocols (mypy checks this)
    _launcher: Launcher = RayLauncher()
    _job: JobProcesses = RayLauncher().start(LaunchSpec("job", ("true",), (1,), "."))


def ray_backend(address: str = "auto", connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
                restart_delay: float = DEFAULT_RESTART_DELAY,
                round_interval: float = DEFAULT_ROUND_INTERVAL) -> RayLauncher:
    """Jobs as Ray actors on the cluster at ``address`` (answering within ``connect_timeout``
    seconds) (:data:`bayes_sched.backends.BACKENDS`)."""
    return RayLauncher(address, restart_delay=restart_delay, round_interval=round_interval,
                       connect_timeout_seconds=connect_timeout, where="--ray-address")
