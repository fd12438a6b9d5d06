"""Whether a ``serve`` runs over a state directory, from its lock and its heartbeat.

A running service holds the state's ``serve.lock`` (an advisory lock the kernel drops when the
process ends, SIGKILL included) and writes a heartbeat at every round's save
(:mod:`bayes_sched.service.state`'s ``serve_*`` ``meta`` keys). So:

* ``running``: the lock is held and the last round (or the start, before the first round) is
  within two round intervals (plus :data:`SLACK` seconds: a round also waits for checkpoints);
* ``stalled``: the lock is held but no round for longer than that (a hung service, or one
  waiting on a slow stop);
* ``stopped``: nobody holds the lock; ``since`` is the clean stop's time where the service
  recorded one (``clean``), else its last heartbeat (it was killed). A lock file left behind by
  a killed service is removed here (``stale_lock_pid``: the pid it named);
* ``never``: no service has run over this state.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from bayes_sched.service.state import (
    HEARTBEAT,
    SERVE_INTERVAL,
    SERVE_PID,
    SERVE_STARTED,
    SERVE_STOPPED,
    StateStore,
    probe_service_lock,
)

#: Seconds a round may overrun two intervals before the service counts as stalled.
SLACK = 30.0
#: Rounds without a heartbeat after which a live service counts as stalled.
ROUNDS = 2


@dataclass(frozen=True)
class Liveness:
    """What ``status`` says of the service (times: wall-clock seconds since the Unix epoch).

    Attributes:
        state: ``running``, ``stalled``, ``stopped`` or ``never``.
        pid: the service's process id (the lock's holder while it runs; the last one's after).
        since: running/stalled: when it started; stopped: when it stopped (or was last seen).
        last_round: its last round's save, ``None`` before the first.
        interval: its round interval (seconds), ``None`` where not recorded.
        clean: stopped: whether it recorded its stop (not killed).
        stale_lock_pid: the pid named by a lock file a killed service left, removed now.
    """

    state: str
    pid: int | None = None
    since: float | None = None
    last_round: float | None = None
    interval: float | None = None
    clean: bool = False
    stale_lock_pid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _number(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


def liveness(store: StateStore, now: float | None = None) -> Liveness:
    """The service's state over ``store`` (removing a lock file a killed service left)."""
    now = time.time() if now is None else now
    holder, stale = probe_service_lock(store.root)
    values = store.meta_values("serve_")
    started, beat = _number(values, SERVE_STARTED), _number(values, HEARTBEAT)
    interval, stopped = _number(values, SERVE_INTERVAL), _number(values, SERVE_STOPPED)
    recorded = _number(values, SERVE_PID)
    pid = holder if holder is not None else (int(recorded) if recorded is not None else None)
    base = Liveness("stopped", pid=pid, last_round=beat, interval=interval,
                    stale_lock_pid=stale)
    if holder is not None:
        latest = max(t for t in (started, beat, 0.0) if t is not None)
        limit = ROUNDS * (interval or 0.0) + SLACK
        return replace(base, state="running" if now - latest <= limit else "stalled",
                       since=started)
    if started is None and beat is None:
        return Liveness("never", stale_lock_pid=stale)
    if stopped is not None:
        return replace(base, since=stopped, clean=True)
    return replace(base, since=max(t for t in (started, beat) if t is not None))


def describe(live: Liveness, now: float | None = None) -> list[str]:
    """``status``'s lines about the service (the first says whether it runs)."""
    now = time.time() if now is None else now
    every = f"rounds every {live.interval:g} s" if live.interval else "round interval unknown"
    last = ("no round yet" if live.last_round is None
            else f"last round {age(now - live.last_round)} ago")
    if live.state == "running":
        lines = [f"serve: running (pid {live.pid}, since {clock(live.since)}; {last}, {every})"]
    elif live.state == "stalled":
        lines = [f"serve: STALLED? pid {live.pid} holds the lock but {last} ({every}): a hung "
                 "service, or one waiting on a slow checkpoint or stop"]
    elif live.state == "stopped":
        how = "stopped cleanly" if live.clean else "not stopped cleanly: killed or crashed"
        lines = [f"serve: NOT running since {clock(live.since)} ({age(now - (live.since or now))}"
                 f" ago, pid {live.pid}, {how}); what follows is its last round, not live"]
    else:
        lines = ["serve: has not run over this state yet (jobs wait for 'bayes-sched serve')"]
    if live.stale_lock_pid is not None:
        lines.append(f"serve: removed a stale serve.lock (pid {live.stale_lock_pid} holds it no "
                     "longer)")
    return lines


def clock(stamp: float | None) -> str:
    """A wall-clock time as ``YYYY-MM-DD HH:MM:SS UTC`` (``-`` where unknown)."""
    if stamp is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


def age(seconds: float) -> str:
    """A duration as ``12 s``, ``4.5 min``, ``3.2 h`` or ``2.0 days``."""
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
