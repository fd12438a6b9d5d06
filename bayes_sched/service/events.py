"""What ``serve`` reports: one event per job transition, read off the cluster's job records.

The cluster (:class:`~bayes_sched.backends.real_cluster.RealCluster`) saves every job's record
after each start or stop of processes and at the end of every round; :class:`EventTracker`
compares each saved record with the one saved before it and names what changed:

========== ==================================================================================
kind       when
========== ==================================================================================
submitted  the service took the job up
started    its first start: GPUs, nodes, batch
grown      restarted by the scheduler on more GPUs (a reallocation: checkpoint, stop, start)
shrunk     restarted by the scheduler on fewer GPUs
moved      restarted by the scheduler on as many GPUs, other nodes
preempted  stopped by the scheduler, its GPUs given to other jobs (it waits, pending)
reclaimed  stopped by the scheduler, the GPUs its tenant borrowed taken back by the tenants
           whose quota they are (why: ``reclaimed for tenant NAME``; it waits, pending)
batch      the per-GPU batch or accumulation of a running job changed (no restart)
checkpoint the job acknowledged a checkpoint request
retrying   its processes failed; it restarts after a back-off (the log's last lines)
stopped    stopped for another reason than the policy's (its node left the cluster)
restarted  started again after a failure or a stop of the previous kind (why: the reason)
finished   reached its target epochs
failed     failed for good (why, and the last lines of its log)
cancelled  cancelled by the user
========== ==================================================================================

Every job event's details name the job's ``tenant``; its line does where that is not
:data:`~bayes_sched.tenants.DEFAULT_TENANT` (``job NAME (tenant T) KIND: ...``).

A batch reads ``LxMxR``: ``L`` examples per GPU per micro-step, ``M`` micro-steps per optimiser
step (accumulation + 1), ``R`` replicas (GPUs); the total batch is their product.

The tracker starts from the records the state holds, so a restarted service reports nothing
twice. Events are plain data (:class:`Event`); the service logs each as one line and keeps it
in the state's ``events`` table in the transaction that saves the records.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bayes_sched.client import protocol
from bayes_sched.service.tenants import reclaim_reason
from bayes_sched.tenants import DEFAULT_TENANT

#: Every job event kind, in the order of a job's life (see the module's table).
JOB_EVENTS = ("submitted", "started", "grown", "shrunk", "moved", "preempted", "reclaimed", "batch",
              "checkpoint", "retrying", "stopped", "restarted", "finished", "failed",
              "cancelled")
#: The service's own events (no job): started, reattached to running jobs, stopped.
SERVICE_EVENTS = ("serve-started", "reattached", "serve-stopped")
#: Lines of a job's log an event about its failure carries.
TAIL_LINES = 8
#: The scheduler's reason for a stop that the policy decided (a reallocation or preemption).
POLICY = "the policy's reallocation"


@dataclass(frozen=True)
class Event:
    """One event: wall-clock ``time`` (seconds since the Unix epoch), the ``job`` (``None`` for
    the service's own), its ``kind``, a one-line ``message`` and ``detail`` (JSON data: GPUs,
    nodes, batch, reason, log tail, ...)."""

    time: float
    job: str | None
    kind: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        """The event as one log line (a failure's log tail follows, indented, line by line)."""
        who = ""
        if self.job is not None:
            tenant = self.detail.get("tenant", DEFAULT_TENANT)
            who = f"job {self.job} " + (f"(tenant {tenant}) " if tenant != DEFAULT_TENANT else "")
        text = f"{who}{self.kind}: {self.message}"
        tail = self.detail.get("log_tail")
        if tail:
            text += "".join(f"\n    | {line}" for line in tail)
        return text

    def to_dict(self) -> dict[str, Any]:
        return {"time": self.time, "job": self.job, "kind": self.kind, "message": self.message,
                "detail": self.detail}


def batch_text(local_bsz: int, accum_steps: int, replicas: int) -> str:
    """A batch as ``LxMxR`` (per-GPU batch x micro-steps x replicas); ``-`` without one."""
    if not local_bsz or not replicas:
        return "-"
    return f"{local_bsz}x{accum_steps + 1}x{replicas}"


def _gpus(allocation: Sequence[int]) -> int:
    return int(sum(allocation))


def _placement(allocation: Sequence[int]) -> list[int]:
    return [int(c) for c in allocation if c > 0]


def _where(record: Mapping[str, Any], node_types: Sequence[str]) -> dict[str, Any]:
    """GPUs, nodes (ids and types), placement and batch of a record's allocation."""
    allocation = list(record.get("allocation") or [])
    nodes = list(record.get("nodes") or [])
    used = [i for i, count in enumerate(allocation) if count > 0]
    replicas = _gpus(allocation)
    return {"gpus": replicas, "placement": _placement(allocation),
            "nodes": [nodes[i] if i < len(nodes) else str(i) for i in used],
            "gpu_types": sorted({node_types[i] for i in used if i < len(node_types)}),
            "batch": batch_text(int(record.get("local_bsz") or 0),
                                int(record.get("accum_steps") or 0), replicas),
            "attempt": int(record.get("attempt") or 0)}


def plural(count: int, noun: str) -> str:
    """``1 GPU``, ``2 GPUs``."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _where_text(where: Mapping[str, Any]) -> str:
    types = ", ".join(where["gpu_types"])
    return (f"{plural(where['gpus'], 'GPU')}{f' ({types})' if types else ''} on "
            f"{plural(len(where['placement']), 'node')} "
            f"[{'+'.join(str(c) for c in where['placement'])}], batch {where['batch']}")


def reason_tail(reason: str, job_dir: Path | None, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` non-empty lines of the log a failure ``reason`` quotes (after its
    ``log tail:``), or where it quotes none, of the job's newest log in ``job_dir``."""
    quoted = reason.split("log tail:", 1)[1] if "log tail:" in reason else ""
    if not quoted.strip() and job_dir is not None:
        log = protocol.latest_log(job_dir)
        quoted = protocol.log_tail(log) if log is not None else ""
    return [line.rstrip() for line in quoted.splitlines() if line.strip()][-lines:]


class EventTracker:
    """Names the transitions between successive saves of the jobs' records.

    Args:
        records: the records the state holds (a restarted service's starting point).
        jobs_dir: the folder of the jobs' directories (their logs, for failures' tails).
    """

    def __init__(self, records: Iterable[Mapping[str, Any]], jobs_dir: Path) -> None:
        self.jobs_dir = jobs_dir
        self._last: dict[str, Mapping[str, Any]] = {}
        #: Per job: where it last ran (its :func:`_where`) and why it was last stopped.
        self._ran: dict[str, dict[str, Any]] = {}
        self._why: dict[str, str] = {}
        #: The jobs the last decision reclaimed, with the tenants their GPUs went to.
        self._reclaimed: dict[str, tuple[str, ...]] = {}
        for record in records:
            name = record["spec"]["name"]
            self._last[name] = record
            if any(record.get("allocation") or []):
                self._ran[name] = _where(record, ())

    def reclaimed(self, jobs: Mapping[str, tuple[str, ...]]) -> None:
        """Take the jobs a round's decision reclaims (each with the tenants their GPUs go
        to; :func:`bayes_sched.service.tenants.reclaims`): their stops are ``reclaimed``
        events, and their next starts ``restarted`` after it. Replaces the last round's."""
        self._reclaimed = dict(jobs)

    def update(self, records: Iterable[Mapping[str, Any]], node_types: Sequence[str],
               cluster_now: float, now: float | None = None) -> list[Event]:
        """The events between the last records seen and ``records`` (every job's, as
        :meth:`RealCluster.snapshot` gives them). ``node_types``: the GPU type of each of the
        cluster's nodes, in the allocations' order; ``cluster_now``: the cluster's clock
        (seconds, as the records' times); ``now``: the events' wall-clock time (default:
        now)."""
        stamp = time.time() if now is None else now
        events: list[Event] = []
        for record in records:
            name = record["spec"]["name"]
            before = self._last.get(name)
            events.extend(self._transitions(name, before, record, node_types, cluster_now,
                                            stamp))
            self._last[name] = record
        return events

    def _transitions(self, name: str, before: Mapping[str, Any] | None,
                     after: Mapping[str, Any], node_types: Sequence[str],
                     cluster_now: float, now: float) -> list[Event]:
        out: list[Event] = []
        tenant = str(after["spec"].get("tenant", DEFAULT_TENANT))

        def emit(kind: str, message: str, **detail: Any) -> None:
            out.append(Event(now, name, kind, message, {**detail, "tenant": tenant}))

        if before is None:
            spec = after["spec"]
            most = spec.get("max_replicas")
            emit("submitted", f"target {spec['target_epochs']:g} epochs, initial batch "
                 f"{spec['init_batch_size']}" + (f", at most {most} GPUs" if most else ""),
                 target_epochs=spec["target_epochs"], init_batch_size=spec["init_batch_size"])
            before = {**after, "status": "pending", "attempt": 0, "allocation": [],
                      "failures": 0, "checkpoint_acked": 0, "local_bsz": 0, "accum_steps": 0,
                      "reason": ""}
        status, was = after["status"], before["status"]
        if int(after.get("checkpoint_acked", 0)) > int(before.get("checkpoint_acked", 0)):
            emit("checkpoint", f"saved at {after['epochs']:.2f} epochs",
                 request=after["checkpoint_acked"], epochs=after["epochs"])
        if int(after["attempt"]) > int(before["attempt"]) and status == "running":
            out.extend(self._started(name, after, node_types, now, tenant))
        elif status == was == "running":
            old = (int(before.get("local_bsz") or 0), int(before.get("accum_steps") or 0))
            new = (int(after.get("local_bsz") or 0), int(after.get("accum_steps") or 0))
            if old != new and old[0]:
                replicas = _gpus(after["allocation"])
                emit("batch", f"{batch_text(*old, replicas)} -> {batch_text(*new, replicas)} "
                     "(its model predicts more goodput)",
                     before=batch_text(*old, replicas), after=batch_text(*new, replicas))
        if status == was == "pending":
            why = after.get("reason") or ""
            if why and why != before.get("reason"):  # e.g. its node left the cluster
                self._why[name] = why
                emit("stopped", why, reason=why)
            elif any(before.get("allocation") or []) and not any(
                    after.get("allocation") or []) and self._why.get(name) == POLICY:
                owners = self._reclaimed.pop(name, ())
                if owners:
                    self._why[name] = reclaim_reason(owners)
                    emit("reclaimed", f"its tenant's borrowed GPUs went back to tenant "
                         f"{', '.join(owners)} (their quota); waiting for GPUs",
                         reason=self._why[name], for_tenants=list(owners))
                else:
                    emit("preempted", "its GPUs went to other jobs; waiting for GPUs")
        if status == was:
            return out
        if was == "running" and status == "pending":
            why = after.get("reason") or ""
            self._why[name] = why if why and why != before.get("reason") else POLICY
            if self._why[name] != POLICY:
                emit("stopped", why, reason=why)
        if status == "backoff":
            reason = after.get("reason") or ""
            self._why[name] = reason
            wait = float(after.get("retry_at", 0.0)) - cluster_now
            emit("retrying", f"{reason}; next start in {max(wait, 0.0):.0f} s",
                 reason=reason, failures=after.get("failures", 0),
                 log_tail=reason_tail("", self.jobs_dir / name))
        elif status == "done":
            emit("finished", f"{after['epochs']:.2f} epochs, "
                 f"{plural(int(after['num_restarts']), 'restart')}, "
                 f"{plural(int(after['failures']), 'failure')}", epochs=after["epochs"],
                 restarts=after["num_restarts"], failures=after["failures"])
        elif status == "failed":
            reason = after.get("reason") or ""
            emit("failed", reason.split("; log tail:")[0].splitlines()[0] if reason else "",
                 reason=reason.split("; log tail:")[0],
                 log_tail=reason_tail(reason, self.jobs_dir / name))
        elif status == "cancelled":
            emit("cancelled", after.get("reason") or "cancelled")
        return out

    def _started(self, name: str, after: Mapping[str, Any], node_types: Sequence[str],
                 now: float, tenant: str) -> list[Event]:
        where = _where(after, node_types)
        text = _where_text(where)
        previous = self._ran.get(name)
        why = self._why.pop(name, "")
        self._ran[name] = where
        if int(after["attempt"]) == 1:
            kind, message = "started", text
        elif why and why != POLICY:
            kind, message = "restarted", f"{text}; after: {why}"
            where = {**where, "reason": why}
        elif previous is None:  # stopped under an earlier service: why is not known here
            kind, message = "restarted", f"{text} (from its checkpoint)"
        else:
            grew = where["gpus"] - previous["gpus"]
            kind = "grown" if grew > 0 else "shrunk" if grew < 0 else "moved"
            message = f"{previous['gpus']} -> {text} (from its checkpoint)"
            where = {**where, "from_gpus": previous["gpus"], "from_batch": previous["batch"]}
        return [Event(now, name, kind, message, {**where, "tenant": tenant})]
