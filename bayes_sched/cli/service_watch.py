"""``bayes-sched events | logs``: watch what the scheduler service does and what its jobs print.

``events`` lists the events ``serve`` keeps in its state (:mod:`bayes_sched.service.events`:
one per job transition, and the service's starts and stops), ``--follow`` prints new ones as
they come. ``logs NAME`` prints a job's log (its newest start's, rank 0 unless ``--rank``), with
its absolute path on stderr; ``--follow`` keeps printing what is appended, and moves on to the
next start's log when the job restarts. Neither needs a running service.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from bayes_sched.cli.options import DAY, duration, int_in_range, positive_int
from bayes_sched.cli.service import _private, _state_option


def register(subparsers: argparse._SubParsersAction) -> None:
    events = subparsers.add_parser(
        "events", help="show the scheduler's job events",
        description="The events 'bayes-sched serve' reported (job submitted, started with its "
                    "GPUs and batch, grown, shrunk, moved, preempted, batch changed, "
                    "checkpointed, retrying, restarted and why, finished, failed with its log's "
                    "last lines, cancelled, reclaimed for its tenant's owner; the service's "
                    "starts and stops), oldest first.")
    _state_option(events)
    events.add_argument("--job", metavar="NAME", help="only this job's events")
    events.add_argument("--tenant", metavar="NAME", help="only the events of this tenant's jobs")
    events.add_argument("--last", type=positive_int, default=None, metavar="N",
                        help="only the last N events")
    events.add_argument("--json", action="store_true",
                        help="print JSON (a list; with --follow one object per line)")
    _follow_options(events, "print new events as they come, until Ctrl-C")
    events.set_defaults(handler=_events)

    logs = subparsers.add_parser(
        "logs", help="print a job's log",
        description="Print a job's log: its newest start's, rank 0's unless --rank (the path "
                    "goes to stderr).")
    logs.add_argument("name", metavar="NAME")
    _state_option(logs)
    logs.add_argument("--rank", type=int_in_range(0, 1 << 20), default=0,
                      help="the replica (default: 0)")
    logs.add_argument("--attempt", type=int_in_range(0, 1 << 20), default=None,
                      help="the start, from 0 (default: the newest)")
    _follow_options(logs, "print what is appended, and the next start's log when the job "
                          "restarts, until Ctrl-C")
    logs.set_defaults(handler=_logs)


def _follow_options(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--follow", "-f", action="store_true", help=what)
    parser.add_argument("--poll", type=duration(0.05, DAY), default=1.0, metavar="DURATION",
                        help="--follow: time between looks (default: 1s)")


def event_line(event: dict[str, Any]) -> str:
    """An event as ``TIME [job NAME] KIND: MESSAGE`` (a failure's log lines follow, indented)."""
    from bayes_sched.service.events import Event
    from bayes_sched.service.liveness import clock

    shown = Event(event["time"], event["job"], event["kind"], event["message"], event["detail"])
    return f"{clock(event['time'])} {shown.line()}"


def _events(args: argparse.Namespace) -> int:
    from bayes_sched.service.state import StateStore
    from bayes_sched.tables import print_json

    _private()
    store = StateStore(args.state, create=False)
    found = store.events(job=args.job, last=args.last, tenant=args.tenant)
    if args.json and not args.follow:
        print_json(found)
        return 0
    if not found and not args.follow:
        print("no events yet (they come from 'bayes-sched serve')", file=sys.stderr)
    after = 0
    while True:
        for event in found:
            print(json.dumps(event) if args.json else event_line(event), flush=True)
        if not args.follow:
            return 0
        after = found[-1]["id"] if found else after  # a quiet poll keeps its place
        time.sleep(args.poll)
        found = store.events(after=after, job=args.job, tenant=args.tenant)


def _logs(args: argparse.Namespace) -> int:
    from bayes_sched.client.protocol import replica_logs
    from bayes_sched.errors import InputError
    from bayes_sched.service.state import StateStore

    _private()
    store = StateStore(args.state, create=False)
    if args.name not in {job["name"] for job in store.jobs()}:
        raise InputError(f"no job '{args.name}': expected one 'bayes-sched status' lists",
                         args.state)
    job_dir = store.jobs_dir / args.name
    store.close()

    def newest() -> Path | None:
        paths = [(attempt, path) for attempt, rank, path in replica_logs(job_dir)
                 if rank == args.rank and args.attempt in (None, attempt)]
        return max(paths)[1] if paths else None

    path = newest()
    if path is None and not args.follow:
        which = "" if args.attempt is None else f" of attempt {args.attempt}"
        raise InputError(f"no log of rank {args.rank}{which} yet (the job has not started "
                         "there)", job_dir / "logs")
    offset = 0
    while True:
        if path is not None:
            offset = _copy(path, offset, whole=not args.follow)
        if not args.follow:
            return 0
        time.sleep(args.poll)
        latest = newest()
        if latest is not None and latest != path:
            if path is not None:
                _copy(path, offset, whole=True)  # what it wrote before the restart
            path, offset = latest, 0


def _copy(path: Path, offset: int, whole: bool) -> int:
    """Print ``path`` from byte ``offset`` (its path on stderr first, from offset 0): its
    complete lines, and with ``whole`` the unfinished last one too; returns the offset reached
    (after the last byte printed)."""
    if offset == 0:
        print(f"==> {path} <==", file=sys.stderr, flush=True)
    with path.open("rb") as stream:
        stream.seek(offset)
        data = stream.read()
    if not whole:
        data = data[:data.rfind(b"\n") + 1]
    sys.stdout.write(data.decode(errors="replace"))
    sys.stdout.flush()
    return offset + len(data)
