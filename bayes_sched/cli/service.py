"""``bayes-sched serve | submit | status | cancel``: the scheduler service on a real cluster.

``serve`` runs the loop (:mod:`bayes_sched.service.serve`), logging one line per job event, and
with ``--prometheus PORT`` serves its metrics (:mod:`bayes_sched.service.metrics`); with
``--tenants FILE`` it holds the tenants named there to their quotas
(:mod:`bayes_sched.service.tenants`), ``submit --tenant`` names a job's tenant and ``status``
shows each tenant's GPUs against its quota (``--tenant`` one tenant's). The others
read and write its state directory's SQLite file (:mod:`bayes_sched.service.state`) and need no
running service. ``status`` says whether a service runs (:mod:`bayes_sched.service.liveness`).

``--state`` is made absolute once, as the command starts, so every path the service hands a job
(its job directory, reports, logs, checkpoints) is absolute: a job runs in its own directory.
Every command sets the process's umask to :data:`PRIVATE_UMASK`, so what it and the jobs it starts
write (state, logs, reports, checkpoints) only its user can read.
"""

from __future__ import annotations

import argparse
import errno
import functools
import logging
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bayes_sched.backends import BACKENDS
from bayes_sched.cli.options import (
    DAY,
    DURATION_EPILOG,
    duration,
    finite_float,
    int_in_range,
    positive_int,
)
from bayes_sched.round_timing import DEFAULT_RESTART_DELAY, DEFAULT_ROUND_INTERVAL
from bayes_sched.tables import print_table

if TYPE_CHECKING:
    from bayes_sched.service.state import StateStore
    from bayes_sched.service.tenants import TenantUsage

DEFAULT_STATE = "bayes-sched-state"
#: Rounds whose rows ``serve`` keeps by default: a week of one-minute rounds.
DEFAULT_KEEP_ROUNDS = 7 * 24 * 60
#: The umask of ``serve``, ``submit``, ``status`` and ``cancel`` (and so of every job ``serve``
#: starts): new files 0600, new folders 0700.
PRIVATE_UMASK = 0o077


def register(subparsers: argparse._SubParsersAction) -> None:
    serve = subparsers.add_parser("serve", help="run the scheduler on a real cluster",
                                  epilog=DURATION_EPILOG)
    _state_option(serve, init=True)
    serve.add_argument("--backend", choices=list(BACKENDS), default="local",
                       help="where jobs run (default: local subprocesses; plugins of the "
                            "entry-point group bayes_sched.backends join the choices)")
    serve.add_argument("--ray-address", default="auto", metavar="ADDRESS",
                       help="the Ray cluster for --backend ray (default: auto, the cluster "
                            "started on this machine)")
    serve.add_argument("--ray-timeout", type=duration(0.1, 600.0), default=4.0,
                       metavar="DURATION", help="time --ray-address gets to accept a connection "
                       "and then to answer as a Ray cluster, in [0.1 s, 10m] (default: 4s)")
    serve.add_argument("--gpus", type=int_in_range(1, 4096), default=None,
                       help="GPUs to schedule (local: default the machine's; more than it has "
                            "are logical GPUs on the CPU)")
    serve.add_argument("--gpu-type", default=None, help="GPU type of the local node "
                       "(default: detected, 'cpu' for logical GPUs)")
    serve.add_argument("--policy", default="pollux", help="scheduling policy (default: pollux)")
    serve.add_argument("--interval", type=duration(0.1, DAY), default=DEFAULT_ROUND_INTERVAL,
                       metavar="DURATION", help="time per scheduling round, in [0.1 s, 1 day] "
                       f"(default: {DEFAULT_ROUND_INTERVAL:g}s, as simulate's)")
    serve.add_argument("--restart-delay", type=duration(0.0, DAY), default=DEFAULT_RESTART_DELAY,
                       metavar="DURATION", help="time a restart costs a job (the policy's "
                       f"re-allocation penalty; default: {DEFAULT_RESTART_DELAY:g}s, as "
                       "simulate's)")
    serve.add_argument("--checkpoint-timeout", type=duration(0.0, DAY), default=30.0,
                       metavar="DURATION", help="longest wait for a checkpoint (default: 30s)")
    serve.add_argument("--stop-grace", type=duration(0.0, DAY), default=30.0,
                       metavar="DURATION", help="time from SIGTERM to SIGKILL (default: 30s)")
    serve.add_argument("--report-timeout", type=duration(1.0, DAY), default=300.0,
                       metavar="DURATION", help="a job silent this long is marked failed "
                       "(default: 5m)")
    serve.add_argument("--max-restarts", type=int_in_range(0, 1000), default=3,
                       help="failed restarts before a job is marked failed (default: 3)")
    serve.add_argument("--backoff", type=duration(0.0, DAY), default=10.0, metavar="DURATION",
                       help="wait before the first restart of a failed job, doubling "
                            "(default: 10s)")
    serve.add_argument("--batch-change-gain", type=finite_float(0.0, 10.0), default=0.05,
                       help="predicted goodput gain that justifies changing a running job's "
                            "batch (default: 0.05)")
    serve.add_argument("--counters", default=None, metavar="DIR",
                       help="the nodes' counters stores (bayes-sched collect --out), one store "
                            "or a directory of them: their latest window is read every round "
                            "into the cluster state the policy sees")
    serve.add_argument("--counters-window", type=duration(1.0, DAY), default=300.0,
                       metavar="DURATION", help="span of counters read each round (default: 5m)")
    serve.add_argument("--exit-when-idle", action="store_true",
                       help="stop once every job has ended")
    serve.add_argument("--max-rounds", type=positive_int, default=None)
    serve.add_argument("--keep-rounds", type=int_in_range(1, 100_000_000),
                       default=DEFAULT_KEEP_ROUNDS, metavar="N",
                       help="rounds whose decisions the state keeps; older rows are deleted "
                       f" (default: {DEFAULT_KEEP_ROUNDS}, a week of one-minute rounds)")
    serve.add_argument("--prometheus", type=int_in_range(0, 65535), default=None,
                       metavar="PORT", help="serve the scheduler's metrics for Prometheus at "
                       "http://BIND:PORT/metrics (0: any free port; default: none)")
    serve.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS",
                       help="address the --prometheus endpoint listens on (default: 127.0.0.1, "
                            "this machine only)")
    serve.add_argument("--tenants", default=None, metavar="FILE",
                       help="a TOML file whose [[tenants]] tables (a cluster file's: name, quota, "
                            "weight, lend, borrow) name the teams sharing the GPUs: the policy "
                            "decides within their quotas, borrowed GPUs are reclaimed for their "
                            "owners (default: no tenants, no quotas)")
    serve.add_argument("--quiet", action="store_true", help="log warnings only (failures)")
    serve.set_defaults(handler=_serve)

    submit = subparsers.add_parser("submit", help="submit a job file (TOML) to the scheduler")
    submit.add_argument("job_file", metavar="JOB.toml")
    _state_option(submit, init=True)
    submit.add_argument("--allow-loader-env", action="store_true",
                        help="let the job file's [env] set loader variables (LD_PRELOAD, "
                             "LD_LIBRARY_PATH, PYTHONPATH, ...), refused by default")
    submit.add_argument("--tenant", default=None, metavar="NAME",
                        help="the team submitting the job, over the job file's 'tenant' "
                             "(default: the file's, else 'default'); one the service's "
                             "--tenants file names, where it has one")
    submit.set_defaults(handler=_submit)

    status = subparsers.add_parser("status", help="show the scheduler's jobs and allocations",
                                   description="Say whether 'bayes-sched serve' runs over the "
                                   "state (and since when), then list its jobs as of its last "
                                   "round. " + STATUS_LEGEND.replace("\n", " "))
    _state_option(status)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.add_argument("--tenant", default=None, metavar="NAME",
                        help="only this tenant's jobs and line")
    status.set_defaults(handler=_status)

    cancel = subparsers.add_parser("cancel", help="cancel a job")
    cancel.add_argument("name", metavar="NAME")
    _state_option(cancel)
    cancel.set_defaults(handler=_cancel)


def state_root(value: str) -> Path:
    """``--state``: the state directory, absolute (resolved against the working folder once)."""
    return Path(value).resolve()


def _state_option(parser: argparse.ArgumentParser, init: bool = False) -> None:
    parser.add_argument("--state", type=state_root, default=DEFAULT_STATE, metavar="DIR",
                        help=f"the scheduler's state directory (default: ./{DEFAULT_STATE}; "
                             "private to its user)")
    if init:
        parser.add_argument("--init", action="store_true", help="start an empty state where "
                            "state.db holds nothing (0 bytes or no tables), refused otherwise")


def _private() -> None:
    os.umask(PRIVATE_UMASK)


#: ``errno`` values of a write the file system refused for want of space (or of a file size
#: limit: ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored), or failed on the device.
_WRITE_FAILURES = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EIO})
#: SQLite's messages for the same.
_SQLITE_WRITE_FAILURES = ("database or disk is full", "disk I/O error")


def _state_writes(handler: Callable[[argparse.Namespace], int]
                  ) -> Callable[[argparse.Namespace], int]:
    """A handler whose failed writes to the state directory (a full disk, a file size limit,
    an I/O error) end it with one line naming the directory, not an internal error. What was
    committed stays whole (SQLite rolls an unfinished transaction back), and a job's processes
    keep running: the next ``serve`` takes them up."""
    @functools.wraps(handler)
    def guarded(args: argparse.Namespace) -> int:
        import sqlite3

        from bayes_sched.errors import InputError

        try:
            return handler(args)
        except (sqlite3.OperationalError, OSError) as error:
            if isinstance(error, sqlite3.OperationalError):
                if not str(error).startswith(_SQLITE_WRITE_FAILURES):
                    raise
            elif error.errno not in _WRITE_FAILURES:
                raise
            raise InputError(f"cannot write the scheduler's state ({error}): expected free "
                             "space on its disk (and no file size limit below its files); "
                             "what was saved is whole, and jobs left running are taken up by "
                             "the next 'bayes-sched serve'", args.state) from None
    return guarded


@_state_writes
def _serve(args: argparse.Namespace) -> int:
    from bayes_sched.backends.real_cluster import RealClusterConfig
    from bayes_sched.policies import make_policy
    from bayes_sched.service.metrics import ServeMetrics, metrics_endpoint
    from bayes_sched.service.serve import Service
    from bayes_sched.service.state import StateStore
    from bayes_sched.service.tenants import read_tenants_file

    _private()
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    policy = make_policy(args.policy)
    config = RealClusterConfig(checkpoint_timeout=args.checkpoint_timeout,
                               stop_grace=args.stop_grace, report_timeout=args.report_timeout,
                               max_restarts=args.max_restarts, backoff=args.backoff,
                               batch_change_gain=args.batch_change_gain,
                               exit_when_idle=args.exit_when_idle)
    counters = None
    if args.counters is not None:
        from bayes_sched.backends.counters_feed import CountersFeed

        counters = CountersFeed(args.counters, args.counters_window)
    launcher = BACKENDS.make(args.backend, where="--backend", context={
        "gpus": args.gpus, "gpu_type": args.gpu_type, "restart_delay": args.restart_delay,
        "round_interval": args.interval, "address": args.ray_address,
        "connect_timeout": args.ray_timeout})
    tenants = (() if args.tenants is None
               else read_tenants_file(args.tenants, launcher.cluster_spec()).tenants)
    store = StateStore(args.state, init=args.init)
    last = store.last_round()
    metrics = None if args.prometheus is None else ServeMetrics(last["round"] if last else 0)
    endpoint = None if metrics is None else metrics_endpoint(metrics, args.prometheus, args.bind)
    try:
        if endpoint is not None:
            logging.getLogger(__name__).info("serving Prometheus metrics on http://%s:%d/metrics",
                                             endpoint.address, endpoint.port)
        service = Service(store, launcher, policy, config, counters, metrics=metrics,
                          interval=args.interval, tenants=tenants, keep_rounds=args.keep_rounds)
        try:
            service.run(args.interval, args.max_rounds)
        finally:
            service.close()
    finally:
        if endpoint is not None:
            endpoint.close()
    return 0


@_state_writes
def _submit(args: argparse.Namespace) -> int:
    from bayes_sched.errors import InputError
    from bayes_sched.service.jobfile import TENANT_FLAG, read_job_file
    from bayes_sched.service.state import SERVE_TENANTS, StateStore
    from bayes_sched.service.tenants import served_tenants, unknown_tenant
    from bayes_sched.tenants import DEFAULT_TENANT

    _private()
    spec = read_job_file(args.job_file, args.allow_loader_env, args.tenant)
    store = StateStore(args.state, init=args.init)
    table = served_tenants(store.meta(SERVE_TENANTS), store.path)
    if table is not None and spec.tenant not in table.names:
        where = (TENANT_FLAG, None) if args.tenant is not None else (args.job_file, "tenant")
        raise InputError(unknown_tenant(spec.tenant, table), where[0], column=where[1])
    store.submit(spec)
    print(f"submitted {spec.name}" + (f" for tenant {spec.tenant}" if table is not None
                                      or spec.tenant != DEFAULT_TENANT else ""))
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from bayes_sched.service.state import StateStore

    _private()
    status = StateStore(args.state, create=False).request_cancel(args.name)
    print(f"cancel requested for {args.name} ({status})")
    return 0


def _placement(allocation: list[int]) -> str:
    return "".join(str(c) for c in allocation if c > 0) or "-"


def _seconds(value: float | None) -> str:
    from bayes_sched.service.liveness import age

    return "-" if value is None or not math.isfinite(value) else age(value)


#: What ``status``'s columns mean (printed under the table and in ``status --help``).
STATUS_LEGEND = ("gpus: GPUs per node in use (22: two nodes, two GPUs each).\n"
                 "batch: LxMxR = L examples per GPU per micro-step x M micro-steps per "
                 "optimiser step (accumulation + 1) x R replicas; the total batch is L*M*R.\n"
                 "goodput: predicted examples per second at the initial batch's statistical "
                 "efficiency (throughput x efficiency).\n"
                 "remaining: predicted time to the target epochs [10-90 % of step times].")


def status_rows(jobs: list[dict[str, Any]], last_round: dict[str, Any] | None,
                tenants: bool = False) -> list[dict[str, Any]]:
    """One row per job: (its tenant, with ``tenants``), status, GPUs per node, batch, epochs,
    restarts, goodput (examples per second), predicted completion (``-`` where no model exists
    yet), and its log to read (``log``: the newest start's, as
    :func:`~bayes_sched.client.protocol.latest_log` picks it, in ``job["log"]``, an absolute
    path)."""
    from bayes_sched.service.events import batch_text

    predictions = (last_round or {}).get("predictions", {})
    rows = []
    for job in jobs:
        record = job["record"] or {}
        spec = job["spec"]
        prediction = predictions.get(job["name"]) if job["status"] == "running" else None
        allocation = record.get("allocation", [])
        batch = batch_text(record.get("local_bsz", 0), record.get("accum_steps", 0),
                           sum(allocation))
        remaining = "-"
        if prediction is not None:
            remaining = (f"{_seconds(prediction['remaining_seconds'])} "
                         f"[{_seconds(prediction['remaining_low'])}, "
                         f"{_seconds(prediction['remaining_high'])}]")
        reason = (record.get("reason") or "").splitlines()
        rows.append({
            "name": job["name"], **({"tenant": job["tenant"]} if tenants else {}),
            "status": job["status"] + (" (cancel)" if job["cancel"] else ""),
            "gpus": _placement(allocation), "batch": batch,
            "epochs": f"{record.get('epochs', 0.0):.2f}/{spec['target_epochs']}",
            "restarts": record.get("num_restarts", 0), "failures": record.get("failures", 0),
            "goodput (ex/s)": prediction["goodput"] if prediction else "-",
            "remaining": remaining, "reason": reason[0] if reason else "",
            "log": job.get("log") or "-"})
    return rows


def _tenants(store: StateStore, jobs: list[dict[str, Any]], only: str | None
             ) -> list[TenantUsage] | None:
    """Each tenant's use (:func:`~bayes_sched.service.tenants.tenant_usage`) of the state's
    ``jobs``, only ``only``'s where given; ``None`` where no tenants are in play (the service
    serves none and every job is the default tenant's)."""
    from bayes_sched.errors import InputError
    from bayes_sched.service.jobfile import TENANT_FLAG
    from bayes_sched.service.state import SERVE_TENANTS
    from bayes_sched.service.tenants import served_tenants, tenant_usage, unknown_tenant
    from bayes_sched.tenants import DEFAULT_TENANT

    table = served_tenants(store.meta(SERVE_TENANTS), store.path)
    if only is not None and table is not None and only not in table.names:
        raise InputError(unknown_tenant(only, table), TENANT_FLAG)
    if table is None and only is None and all(j["tenant"] == DEFAULT_TENANT for j in jobs):
        return None
    usage = tenant_usage(table, ((job["tenant"], job["status"],
                                  sum((job["record"] or {}).get("allocation") or []))
                                 for job in jobs))
    return [u for u in usage if only in (None, u.name)]


def _status(args: argparse.Namespace) -> int:
    from bayes_sched.client.protocol import latest_log
    from bayes_sched.service.liveness import describe, liveness
    from bayes_sched.service.state import StateStore
    from bayes_sched.tables import print_json

    _private()
    store = StateStore(args.state, create=False)
    live = liveness(store)
    jobs = store.jobs(tenant=args.tenant)
    tenants = _tenants(store, jobs, args.tenant)
    for job in jobs:  # the log to read, an absolute path
        log = latest_log(store.jobs_dir / job["name"])
        job["log"] = None if log is None else str(log)
    last = store.last_round()
    if args.json:
        print_json({"serve": live.to_dict(), "jobs": jobs, "last_round": last,
                    "tenants": [t.to_dict() for t in tenants or ()]})
        return 0
    for line in describe(live):
        print(line)
    for tenant in tenants or ():
        print(tenant.line())
    title = "no rounds yet" if last is None else (
        f"round {last['round']} at t={last['time']:.0f}s")
    print_table(status_rows(jobs, last, tenants is not None),
                title=f"bayes-sched jobs ({title})")
    if jobs:
        print(STATUS_LEGEND)
    return 0
