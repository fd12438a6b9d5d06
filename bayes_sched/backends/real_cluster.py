"""A real cluster behind the scheduling loop: jobs as processes, placed by any :class:`Launcher`.

:class:`RealCluster` meets :class:`~bayes_sched.cluster.Cluster`. Each job has a directory
(:mod:`bayes_sched.client.protocol`) that its training client reports into; the cluster reads the
reports each time it polls (measured step times per configuration, gradient statistics, progress,
checkpoints, exits) into the job's agent (:class:`~bayes_sched.agent.JobAgent`, the same one the
simulator runs with each job: it fits the throughput model and tunes the batch), so the
:class:`~bayes_sched.jobs.JobView` s the loop's estimation stage reads hold real measurements.

* A new allocation starts the job (``control.json`` first: the per-GPU batch and accumulation the
  agent tunes for it). A changed one reallocates: checkpoint request -> wait for the job's
  acknowledgement (at most ``checkpoint_timeout``) -> stop (SIGTERM, the client checkpoints
  again; SIGKILL after ``stop_grace``) -> start with the new world size, from the checkpoint.
* The batch of a running job whose allocation stays is changed only where the agent's model
  predicts at least ``batch_change_gain`` more goodput (no flapping between near-equal batches).
* A job whose processes end without the job's ``done`` report has failed: it restarts (from its
  checkpoint) after ``backoff * 2**(failures - 1)`` seconds, and after ``max_restarts`` failed
  restarts it is marked failed with the end of its log. A job that reports nothing for
  ``report_timeout`` seconds (from its start, or since its last report) is stopped and marked
  failed. Nothing waits without a bound, so the scheduler never hangs on a job.
* The cluster's nodes are read again every round (:meth:`RealCluster.refresh_nodes`), and
  allocations follow their nodes by the launcher's node ids. A job whose node left the cluster
  (a Ray node died, a machine was taken out) is stopped and waits for GPUs again, with no failure
  counted: the policy places it on the nodes left, and it restarts from its checkpoint.

The state of every job is plain data (:meth:`RealCluster.snapshot`), so a restarted scheduler
rebuilds the cluster (:meth:`RealCluster.restore`) and reattaches to the processes still running.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bayes_sched.agent import JobAgent
from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.backends.launcher import JobProcesses, Launcher, LaunchSpec
from bayes_sched.client import protocol
from bayes_sched.cluster import Allocations, ClusterState, placement_of, validate_allocations
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.jobs import JobSettings, JobView
from bayes_sched.tenants import TenantSpec

if TYPE_CHECKING:
    import xarray as xr

    from bayes_sched.backends.counters_feed import CountersFeed
    from bayes_sched.cluster_spec import ClusterSpec

LOG = logging.getLogger(__name__)

#: Job states. ``pending``: waiting for GPUs; ``running``: processes up; ``backoff``: failed,
#: waiting to restart; the rest are final.
ACTIVE_STATES = ("pending", "running", "backoff")
FINAL_STATES = ("done", "failed", "cancelled")


@dataclass
class JobRecord:
    """Everything the cluster knows of one job, as plain data (what a snapshot holds)."""

    spec: RealJobSpec
    submit_time: float
    status: str = "pending"
    reason: str = ""
    allocation: list[int] = field(default_factory=list)
    attempt: int = 0            # starts so far (the next start's BAYES_SCHED_ATTEMPT)
    num_restarts: int = 0       # starts after the first (the policy's restart penalty)
    failures: int = 0
    retry_at: float = 0.0
    started_at: float = 0.0     # when the running attempt started (cluster seconds)
    last_report_at: float = 0.0
    report_offset: int = 0
    observations: list[dict[str, Any]] = field(default_factory=list)
    gradient: list[float] | None = None
    progress: float = 0.0
    epochs: float = 0.0
    examples_per_epoch: int = 1
    attained_service: float = 0.0
    allocation_history: list[list[Any]] = field(default_factory=list)
    local_bsz: int = 0
    accum_steps: int = 0
    control_version: int = 0
    checkpoint_request: int = 0
    checkpoint_acked: int = 0
    checkpoint_progress: float = 0.0
    reported_attempt: int = -1  # the attempt whose client last sent its 'start' report
    step_spread: list[float] = field(default_factory=lambda: [1.0, 1.0])
    exit_status: str = ""
    exit_message: str = ""
    handle: dict[str, Any] | None = None
    stopping: bool = False      # the scheduler is stopping its processes (saved before it signals)
    finished_at: float = 0.0
    nodes: list[str] = field(default_factory=list)  # node ids ``allocation`` indexes (snapshots)
    gradient_bytes: float | None = None  # bytes of one all-reduce, from the 'start' report

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["spec"] = self.spec.to_dict()
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRecord:
        return cls(**{**data, "spec": RealJobSpec.from_dict(data["spec"])})


@dataclass(frozen=True)
class RealClusterConfig:
    """How the cluster handles jobs (seconds).

    Attributes:
        checkpoint_timeout: longest wait for a job to acknowledge a checkpoint request.
        stop_grace: seconds between SIGTERM and SIGKILL when stopping a job.
        report_timeout: a running job that reports nothing this long is marked failed.
        max_restarts: failed starts after which a job is marked failed.
        backoff: seconds before the first restart of a failed job (doubling after each).
        batch_change_gain: relative goodput gain the agent's model must predict before a
            running job's batch is changed.
        poll_interval: seconds between polls of reports and processes.
        exit_when_idle: :meth:`RealCluster.done` once every job is final (tests, batch runs).
    """

    checkpoint_timeout: float = 30.0
    stop_grace: float = 30.0
    report_timeout: float = 300.0
    max_restarts: int = 3
    backoff: float = 10.0
    batch_change_gain: float = 0.05
    poll_interval: float = 0.25
    exit_when_idle: bool = False


def follow_nodes(counts: Sequence[int], old: Sequence[str], new: Sequence[str]
                 ) -> tuple[list[int], list[str]]:
    """GPUs per node ``counts`` over nodes ``old`` (ids) moved onto nodes ``new``: each count
    goes to its node's new index (0 on nodes new to the list). Returns the counts, shape
    ``(len(new),)``, and the ids of nodes in ``old`` with GPUs in ``counts`` that ``new`` lacks
    (their GPUs are dropped). Counts of another length than ``old`` (none allocated yet) are
    all zeros."""
    moved = [0] * len(new)
    gone: list[str] = []
    if len(counts) != len(old):
        return moved, gone
    index = {node: i for i, node in enumerate(new)}
    for node, count in zip(old, counts, strict=True):
        if node in index:
            moved[index[node]] = int(count)
        elif count:
            gone.append(node)
    return moved, gone


class RealCluster:
    """Jobs on a real cluster (:class:`~bayes_sched.cluster.Cluster`), through ``launcher``.

    Args:
        launcher: places and starts processes (local subprocesses, Ray).
        jobs_dir: one directory per job is made under it.
        config: timeouts, restarts and the batch-change threshold.
        epoch: wall-clock time (seconds since the Unix epoch) that cluster time 0 stands for;
            a restarted scheduler passes the first one's, so times stay comparable.
        on_change: called after every start or stop of processes (the service persists its
            state there, so a scheduler killed right after cannot start a job twice).
        counters: where the nodes' collectors write; read every round into
            :attr:`ClusterState.counters` (``None``: no counters).
        tenants: the teams sharing the cluster (:mod:`bayes_sched.tenants`), part of the spec
            the policy sees (none: one default tenant). Their quotas are checked against the
            launcher's GPUs here (:class:`InputError`); quotas that no longer fit after nodes
            left are kept as written, with a warning (admission then promises more GPUs than
            there are, and jobs wait for them as they would without quotas).
    """

    def __init__(self, launcher: Launcher, jobs_dir: str | Path,
                 config: RealClusterConfig = RealClusterConfig(), epoch: float | None = None,
                 on_change: Callable[[], None] | None = None,
                 counters: CountersFeed | None = None,
                 tenants: Sequence[TenantSpec] = ()) -> None:
        self.launcher = launcher
        self.jobs_dir = Path(jobs_dir)
        self.config = config
        self.epoch = time.time() if epoch is None else epoch
        self.on_change = on_change
        self.counters = counters
        #: The counters read at the end of the last :meth:`advance` (``None``: none).
        self.counter_window: xr.Dataset | None = None
        self.tenants = tuple(tenants)
        self.spec = self._with_tenants(launcher.cluster_spec(), strict=True)
        self.node_ids: tuple[str, ...] = tuple(launcher.node_ids)
        self.records: dict[str, JobRecord] = {}
        self._processes: dict[str, JobProcesses] = {}
        self._agents: dict[str, dict[str, JobAgent]] = {}
        self._last_advance = self.now

    # --- Cluster protocol ----------------------------------------------------------------------

    @property
    def now(self) -> float:
        return time.time() - self.epoch

    @property
    def state(self) -> ClusterState:
        return ClusterState(spec=self.spec, now=self.now, counters=self.counter_window,
                            time_origin=self.epoch)

    def job_views(self) -> list[JobView]:
        now = self.now
        return [self._view(record, now) for record in self.records.values()
                if record.status in ACTIVE_STATES]

    def allocations(self) -> Allocations:
        return {name: np.array(record.allocation, dtype=np.int64)
                for name, record in self.records.items()
                if record.status in ACTIVE_STATES and any(record.allocation)}

    def apply(self, allocations: Mapping[str, np.ndarray]) -> None:
        active = [n for n, r in self.records.items() if r.status in ACTIVE_STATES]
        new = validate_allocations(allocations, self.state, active)
        zeros = np.zeros(self.spec.num_nodes, dtype=np.int64)
        moving: list[JobRecord] = []
        for name in active:
            record = self.records[name]
            old = np.array(record.allocation or zeros, dtype=np.int64)
            counts = new.get(name, zeros)
            if np.array_equal(old, counts):
                if record.status == "running":
                    self._retune(record)
                continue
            moving.append(record)
        running = [r for r in moving if r.spec.name in self._processes]
        if running:
            LOG.info("reallocating %s", ", ".join(
                f"{r.spec.name} {placement_of(np.array(r.allocation))}->"
                f"{placement_of(new.get(r.spec.name, zeros))}" for r in running))
        # A client that has not started training (no 'start' report from this attempt yet) has
        # nothing newer than its checkpoint: it is stopped without waiting for one.
        training = [r for r in running if r.reported_attempt == r.attempt - 1]
        for record in training:
            self._request_checkpoint(record)
        self._await_checkpoints(training)
        for record in running:
            self._stop(record)
            if record.exit_status == "done":  # it finished before the stop reached it
                self._finish(record, "done", "")
        starting = []
        for record in moving:
            if record.status in FINAL_STATES:
                continue  # ended while we waited
            counts = new.get(record.spec.name, zeros)
            record.allocation = counts.tolist()
            record.allocation_history.append([self.now, list(placement_of(counts))])
            if not counts.any():
                record.status = "pending"
            elif record.status != "backoff":
                starting.append(record)
        self._start_many(starting)  # together: on Ray, their workers start in parallel
        self._changed()
        if running:
            LOG.info("reallocated %s", ", ".join(r.spec.name for r in running))

    def advance(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while True:
            self.poll()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(self.config.poll_interval, remaining))
        self.refresh_nodes()  # the round's decision sees the nodes there are now
        if self.counters is not None:
            self.counter_window = self.counters.read(self.launcher.node_aliases())

    def refresh_nodes(self) -> list[str]:
        """Read the launcher's nodes again: allocations follow their nodes (by node id) into the
        new spec; a job with GPUs on a node that left is stopped and made pending (its next start
        restores its checkpoint; no failure is counted). Returns the names of those jobs.

        Where the launcher cannot list nodes now (e.g. every GPU node is gone), the spec is kept
        and a warning logged: starts then fail and back off until nodes return."""
        try:
            spec = self.launcher.cluster_spec()
        except InputError as error:
            LOG.warning("cannot read the cluster's nodes (%s); keeping the last ones", error)
            return []
        spec = self._with_tenants(spec, strict=False)
        ids = tuple(self.launcher.node_ids)
        if ids == self.node_ids and spec == self.spec:
            return []
        left = [n for n in self.node_ids if n not in ids]
        if left:
            LOG.warning("node(s) %s left the cluster", ", ".join(left))
        moved = {name: follow_nodes(record.allocation, self.node_ids, ids)
                 for name, record in self.records.items()}
        self.spec, self.node_ids = spec, ids
        lost = []
        for name, (counts, gone) in moved.items():
            record = self.records[name]
            record.allocation = counts
            if gone and record.status in ACTIVE_STATES:
                self._node_lost(record, gone)
                lost.append(name)
        self._changed()
        return lost

    def done(self) -> bool:
        return self.config.exit_when_idle and all(
            record.status in FINAL_STATES for record in self.records.values())

    # --- jobs ----------------------------------------------------------------------------------

    def submit(self, spec: RealJobSpec, submit_time: float | None = None) -> JobRecord:
        """Add a job (pending until the policy gives it GPUs)."""
        if spec.name in self.records:
            raise InputError(f"job '{spec.name}' exists already: expected a new name")
        record = JobRecord(spec, self.now if submit_time is None else submit_time,
                           allocation=[0] * self.spec.num_nodes)
        self.records[spec.name] = record
        self.job_dir(spec.name).mkdir(parents=True, exist_ok=True)
        return record

    def cancel(self, name: str, reason: str = "cancelled by the user") -> None:
        """Stop a job for good."""
        record = self.records[name]
        if record.status in FINAL_STATES:
            return
        if name in self._processes:
            self._stop(record)
        self._finish(record, "cancelled", reason)
        self._changed()

    def job_dir(self, name: str) -> Path:
        return self.jobs_dir / name

    def poll(self) -> None:
        """Read every job's new reports, take up ended processes, enforce the report timeout
        and restart failed jobs whose back-off has passed; account GPU time."""
        now = self.now
        elapsed = max(0.0, now - self._last_advance)
        self._last_advance = now
        changed = False
        for record in list(self.records.values()):
            if record.status == "running":
                record.attained_service += elapsed * sum(record.allocation)
            self._read_reports(record)
            processes = self._processes.get(record.spec.name)
            if processes is not None:
                status = processes.poll()
                if status is not None:
                    del self._processes[record.spec.name]
                    record.handle = None
                    self._read_reports(record)
                    if status.node_lost and record.exit_status != "done":
                        self._node_lost(record, [])
                        self.refresh_nodes()
                    else:
                        self._ended(record, status.returncode, status.log_tail)
                    changed = True
                    continue
                silent_since = max(record.started_at, record.last_report_at)
                if now - silent_since > self.config.report_timeout:
                    what = ("no report" if record.last_report_at < record.started_at
                            else "no report since the last one")
                    self._stop(record, grace=min(self.config.stop_grace, 5.0))
                    self._finish(record, "failed", f"{what} within {self.config.report_timeout:g}"
                                                   f" s{self._log_suffix(record)}")
                    changed = True
            elif record.status == "backoff" and now >= record.retry_at:
                if any(record.allocation):
                    self._start(record)
                else:
                    record.status = "pending"
                changed = True
        if changed:
            self._changed()

    # --- persistence ---------------------------------------------------------------------------

    def snapshot(self) -> list[dict[str, Any]]:
        """Every job's record as plain JSON data (with the handles of running processes)."""
        for name, processes in self._processes.items():
            self.records[name].handle = processes.handle()
        for record in self.records.values():
            record.nodes = list(self.node_ids)
        return [record.to_dict() for record in self.records.values()]

    def restore(self, records: Sequence[Mapping[str, Any]]) -> list[str]:
        """Take up the records of a previous scheduler, reattaching to running jobs' processes;
        returns the names of the jobs reattached. A job whose processes ended meanwhile is taken
        up as ended (done where it reported so, else failed and restarted)."""
        reattached = []
        for data in records:
            record = JobRecord.from_dict(data)
            self.records[record.spec.name] = record
            for obs in record.observations:
                self._observe(record, obs, record_it=False)
            record.allocation, gone = follow_nodes(record.allocation, record.nodes or
                                                   self.node_ids, self.node_ids)
            if gone and record.status in ACTIVE_STATES:  # its node left while we were away
                self._node_lost(record, gone)
            if record.status != "running":
                continue
            processes = None
            if record.handle is not None:
                processes = self.launcher.reattach(self._launch_spec(record, record.attempt - 1),
                                                 record.handle)
            if processes is not None:
                self._processes[record.spec.name] = processes
                reattached.append(record.spec.name)
            else:
                record.handle = None
                self._read_reports(record)
                self._ended(record, None, "")
        self.launcher.release_strays([str(self.job_dir(name)) for name in self.records])
        for record in self.records.values():
            if record.status in ACTIVE_STATES and record.spec.name not in self._processes:
                # An unrecorded start may have run (and even finished) while no scheduler ran.
                self._read_reports(record)
                if record.exit_status == "done":
                    self._finish(record, "done", "")
        self._last_advance = self.now
        return reattached

    # --- helpers -------------------------------------------------------------------------------

    def _with_tenants(self, spec: ClusterSpec, strict: bool) -> ClusterSpec:
        """``spec`` with the cluster's tenants (see the class's ``tenants``)."""
        if not self.tenants:
            return spec
        try:
            return replace(spec, tenants=self.tenants)
        except InputError as error:
            if strict:
                raise
            LOG.warning("the tenants' quotas exceed the cluster's GPUs now (%s); kept as "
                        "written", error)
            kept = replace(spec)
            object.__setattr__(kept, "tenants", self.tenants)  # frozen: set past the check
            return kept

    def _view(self, record: JobRecord, now: float) -> JobView:
        spec = record.spec
        agents = self._agents.get(spec.name, {})
        fields: dict[str, Any] = {}
        if len(agents) == 1:
            agent = next(iter(agents.values()))
            agent.clock = now
            fields = agent.report_fields()
        elif agents:  # several GPU types: the estimation stage fits each
            observations: dict[Any, Any] = {}
            for agent in agents.values():
                observations.update(agent.observations)
            fields = {"observations": observations}
        gradient = record.gradient
        if gradient is not None:
            from bayes_sched.jobs import GradientStats

            fields["gradient"] = GradientStats(*gradient)
        allocation = np.array(record.allocation or [0] * self.spec.num_nodes, dtype=np.int64)
        return JobView(
            name=spec.name, application=spec.application or spec.name,
            submit_time=record.submit_time, age=max(0.0, now - record.submit_time),
            attained_service=record.attained_service, allocation=allocation,
            num_restarts=record.num_restarts, requested_replicas=1,
            requested_batch_size=spec.init_batch_size,
            settings=JobSettings(max_replicas=spec.max_replicas), limits=spec.limits,
            progress=record.progress, epochs=record.epochs, target_epochs=spec.target_epochs,
            examples_per_epoch=record.examples_per_epoch,
            allocation_history=tuple((t, tuple(p)) for t, p in record.allocation_history),
            tenant=spec.tenant, gradient_bytes=record.gradient_bytes, **fields)

    def agent(self, name: str, gpu_type: str) -> JobAgent:
        """The agent of job ``name`` on ``gpu_type`` (made on first use)."""
        agents = self._agents.setdefault(name, {})
        if gpu_type not in agents:
            agents[gpu_type] = JobAgent(name, self.records[name].spec.limits,
                                        JobSettings(max_replicas=self.records[name]
                                                    .spec.max_replicas),
                                        min_refit_interval=0.0, gpu_type=gpu_type)
        return agents[gpu_type]

    def _gpu_type(self, counts: Sequence[int]) -> str:
        used = [self.spec.nodes[i].gpu_type for i, c in enumerate(counts) if c > 0]
        return used[0] if used else self.spec.nodes[0].gpu_type

    def _observe(self, record: JobRecord, obs: Mapping[str, Any], record_it: bool = True) -> None:
        agent = self.agent(record.spec.name, str(obs["gpu_type"]))
        sqr, var = record.gradient if record.gradient is not None else (0.0, 0.0)
        key = (int(obs["num_nodes"]), int(obs["num_replicas"]), int(obs["local_bsz"]))
        if key in agent.observations:
            return
        agent.record(*key, float(obs["step_time"]), float(obs["sync_time"]), sqr, var)
        if record.gradient is None:
            agent.grad_sqr = agent.grad_var = None
        if record_it:
            record.observations.append(dict(obs))

    def _read_reports(self, record: JobRecord) -> None:
        reports, offset = protocol.read_reports(self.job_dir(record.spec.name),
                                                record.report_offset)
        record.report_offset = offset
        if not reports:
            return
        now = self.now
        for report in reports:
            kind = report["kind"]
            try:
                self._take_report(record, kind, report)
            except (KeyError, TypeError, ValueError) as error:
                LOG.warning("job %s: report %s ignored: %s", record.spec.name, kind, error)
            record.last_report_at = now

    def _take_report(self, record: JobRecord, kind: str, report: Mapping[str, Any]) -> None:
        if kind in ("start", "progress", "checkpoint", "exit"):
            record.progress = float(report.get("progress", record.progress))
            record.epochs = float(report.get("epochs", record.epochs))
            record.examples_per_epoch = int(report.get("examples_per_epoch",
                                                       record.examples_per_epoch))
        if kind == "start":
            record.reported_attempt = int(report.get("attempt", record.reported_attempt))
            reported = report.get("gradient_bytes")
            if isinstance(reported, int | float) and not isinstance(reported, bool) \
                    and math.isfinite(reported) and reported > 0:
                record.gradient_bytes = float(reported)
        if kind == "step":
            obs = {name: report[name] for name in ("gpu_type", "num_nodes", "num_replicas",
                                                   "local_bsz", "accum_steps", "step_time",
                                                   "sync_time")}
            median = float(report["step_time"])
            if median > 0:
                record.step_spread = [float(report.get("step_time_p10", median)) / median,
                                      float(report.get("step_time_p90", median)) / median]
            self._observe(record, obs)
        elif kind == "gradient":
            sqr, var = float(report["grad_sqr"]), float(report["grad_var"])
            if sqr > 0 and var >= 0 and math.isfinite(sqr) and math.isfinite(var):
                record.gradient = [sqr, var]
                for agent in self._agents.get(record.spec.name, {}).values():
                    agent.grad_sqr, agent.grad_var = sqr, var
        elif kind == "checkpoint":
            request = int(report["request"])
            if request >= record.checkpoint_acked:
                record.checkpoint_acked = request
                record.checkpoint_progress = record.progress
        elif kind == "exit":
            record.exit_status = str(report.get("status", ""))
            record.exit_message = str(report.get("message", ""))

    def _ended(self, record: JobRecord, returncode: int | None, tail: str) -> None:
        """The job's processes ended on their own."""
        if record.exit_status == "done" or record.epochs >= record.spec.target_epochs - 1e-9:
            self._finish(record, "done", "")
            return
        if record.stopping:  # the scheduler's own stop, whose end a restart of it missed
            record.stopping = False
            record.status = "pending"
            record.allocation = [0] * len(record.allocation)
            record.allocation_history.append([self.now, []])
            return
        record.failures += 1
        detail = (f"exited with status {returncode}" if returncode is not None
                  else tail if tail.startswith("cannot start")
                  else "ended while the scheduler was away")
        if record.exit_status == "error" and record.exit_message:
            detail += f" ({record.exit_message.splitlines()[-1]})"
        tail = tail or self._log_tail(record)
        if record.failures > self.config.max_restarts:
            self._finish(record, "failed", f"{detail}, {record.failures} times; log tail:\n{tail}")
            return
        record.status = "backoff"
        record.reason = f"{detail}; restart {record.failures} of {self.config.max_restarts}"
        record.retry_at = self.now + self.config.backoff * 2 ** (record.failures - 1)
        # Debug only: the service reports this as a 'retrying' event, with the log's last lines.
        LOG.debug("job %s %s, retrying at t=%.1fs", record.spec.name, detail, record.retry_at)

    def _node_lost(self, record: JobRecord, nodes: Sequence[str]) -> None:
        """The job's node left: stop what is left of it, and make it wait for GPUs (no failure
        counted); its next start restores its checkpoint."""
        self._stop(record, grace=min(self.config.stop_grace, 5.0))
        which = f" ({', '.join(nodes)})" if nodes else ""
        record.status = "backoff" if record.status == "backoff" else "pending"
        record.reason = f"its node{which} left the cluster; waiting to restart from its checkpoint"
        record.allocation = [0] * len(record.allocation)
        record.allocation_history.append([self.now, []])
        LOG.warning("job %s: %s", record.spec.name, record.reason)

    def _finish(self, record: JobRecord, status: str, reason: str) -> None:
        record.status = status
        record.reason = reason
        record.allocation = [0] * self.spec.num_nodes
        record.finished_at = self.now
        record.handle = None
        if status != "done":  # the service reports it as an event, with the log's last lines
            LOG.debug("job %s %s: %s", record.spec.name, status, reason.splitlines()[0]
                      if reason else "")

    def _log_tail(self, record: JobRecord) -> str:
        log = protocol.latest_log(self.job_dir(record.spec.name))
        return protocol.log_tail(log) if log is not None else ""

    def _log_suffix(self, record: JobRecord) -> str:
        tail = self._log_tail(record)
        return f"; log tail:\n{tail}" if tail else ""

    def _launch_spec(self, record: JobRecord, attempt: int) -> LaunchSpec:
        spec = record.spec
        counts = tuple(int(c) for c in record.allocation)
        env = {**spec.env, protocol.ENV_INIT_BATCH: str(spec.init_batch_size),
               protocol.ENV_TARGET_EPOCHS: str(spec.target_epochs)}
        return LaunchSpec(spec.name, spec.argv, counts, str(self.job_dir(spec.name)),
                          attempt=attempt, env=env, cwd=spec.cwd)

    def _write_control(self, record: JobRecord) -> None:
        record.control_version += 1
        protocol.write_control(self.job_dir(record.spec.name), protocol.Control(
            local_bsz=record.local_bsz, accum_steps=record.accum_steps,
            checkpoint_request=record.checkpoint_request, version=record.control_version))

    def _start(self, record: JobRecord) -> None:
        self._start_many([record])

    def _start_many(self, records: Sequence[JobRecord]) -> None:
        """Start jobs at their allocations, in one call of the launcher."""
        if not records:
            return
        launches = []
        for record in records:
            counts = record.allocation
            placement = placement_of(np.array(counts))
            agent = self.agent(record.spec.name, self._gpu_type(counts))
            local, accum = agent.choose_batch(placement)
            if record.gradient is None and accum == 0 and sum(placement) == 1 and local >= 2:
                # One replica without accumulation measures no gradient noise (it needs two
                # gradients of a step): the same batch as two micro-batches does.
                local, accum = math.ceil(local / 2), 1
            record.local_bsz, record.accum_steps = local, accum
            self._write_control(record)
            launches.append(self._launch_spec(record, record.attempt))
        for record, outcome in zip(records, self.launcher.start_many(launches), strict=True):
            if isinstance(outcome, AllocationError):  # the GPUs are not free (yet): a failure
                self._ended(record, None, f"cannot start: {outcome}")
            elif isinstance(outcome, InputError):  # e.g. no interpreter there: no retry helps
                self._finish(record, "failed", f"cannot start: {outcome}")
            else:
                self._running(record, outcome)

    def _running(self, record: JobRecord, processes: JobProcesses) -> None:
        self._processes[record.spec.name] = processes
        record.handle = processes.handle()
        if record.attempt > 0:
            record.num_restarts += 1
        record.attempt += 1
        record.status = "running"
        record.stopping = False
        record.started_at = self.now
        record.exit_status = record.exit_message = ""
        self._changed()

    def _stop(self, record: JobRecord, grace: float | None = None) -> None:
        processes = self._processes.pop(record.spec.name, None)
        if processes is None:
            return
        record.stopping = True  # saved before the signal: a restart meanwhile counts no failure
        self._changed()
        processes.stop(self.config.stop_grace if grace is None else grace)
        record.handle = None
        record.stopping = False
        self._read_reports(record)
        if record.status == "running":
            record.status = "pending"
        self._changed()

    def _request_checkpoint(self, record: JobRecord) -> None:
        record.checkpoint_request = max(record.checkpoint_request, record.checkpoint_acked) + 1
        self._write_control(record)

    def _await_checkpoints(self, records: Sequence[JobRecord]) -> None:
        deadline = time.monotonic() + self.config.checkpoint_timeout
        waiting = list(records)
        while waiting and time.monotonic() < deadline:
            for record in waiting:
                self._read_reports(record)
                processes = self._processes.get(record.spec.name)
                if processes is not None and processes.poll() is not None:
                    record.exit_status = record.exit_status or "stopped"
            waiting = [r for r in waiting if r.checkpoint_acked < r.checkpoint_request
                       and r.spec.name in self._processes
                       and self._processes[r.spec.name].poll() is None]
            if waiting:
                time.sleep(min(self.config.poll_interval, 0.05))
        for record in waiting:
            LOG.warning("job %s: no checkpoint within %g s; stopping it anyway",
                        record.spec.name, self.config.checkpoint_timeout)

    def _retune(self, record: JobRecord) -> None:
        """Change a running job's batch where its model predicts a significant gain."""
        counts = np.array(record.allocation)
        placement = placement_of(counts)
        agent = self.agent(record.spec.name, self._gpu_type(record.allocation))
        model = agent.goodput_model()
        if model is None:
            return
        local, accum = agent.choose_batch(placement)
        if (local, accum) == (record.local_bsz, record.accum_steps):
            return
        nodes, replicas = np.array([len(placement)]), np.array([sum(placement)])
        new = float(model.goodput(nodes, replicas, np.array([local]), np.array([accum]))[0, 0])
        old = float(model.goodput(nodes, replicas, np.array([record.local_bsz]),
                                  np.array([record.accum_steps]))[0, 0])
        if new > old * (1.0 + self.config.batch_change_gain):
            record.local_bsz, record.accum_steps = local, accum
            self._write_control(record)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    # --- what the status shows -------------------------------------------------------------------

    def predictions(self) -> dict[str, dict[str, float]]:
        """Per running job with a fitted model: ``goodput`` (examples at ``B0`` per second) and
        ``throughput`` (examples per second) at its allocation and batch, and the predicted
        seconds to completion with an interval from the measured step-time spread (10th-90th
        percentile): ``remaining_seconds``, ``remaining_low``, ``remaining_high``."""
        result = {}
        for name, record in self.records.items():
            if record.status != "running" or not record.local_bsz:
                continue
            placement = placement_of(np.array(record.allocation))
            model = self.agent(name, self._gpu_type(record.allocation)).goodput_model()
            if model is None or not placement:
                continue
            config = (np.array([len(placement)]), np.array([sum(placement)]),
                      np.array([record.local_bsz]), np.array([record.accum_steps]))
            goodput = float(model.goodput(*config)[0, 0])
            throughput = float(model.throughput(*config)[0, 0])
            remaining = max(0.0, record.spec.target_epochs - record.epochs) * (
                record.examples_per_epoch)
            seconds = remaining / throughput if throughput > 0 else math.inf
            low, high = record.step_spread
            result[name] = {"goodput": goodput, "throughput": throughput,
                            "remaining_seconds": seconds, "remaining_low": seconds * low,
                            "remaining_high": seconds * high}
        return result
