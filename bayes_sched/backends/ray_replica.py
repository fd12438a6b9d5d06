"""One replica's process on its node: the body of the Ray actor that
:class:`~bayes_sched.backends.ray_launcher.RayLauncher` starts
per GPU bundle.

Standard library only (and Ray's runtime context, which the actor has loaded already): every
actor is a fresh worker process, and what it imports is paid on every job start.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from bayes_sched.backends.job_env import inherited_environment

#: Return code of a replica whose command could not be started (as a shell reports it).
NOT_STARTED_RETURNCODE = 127

#: Variables of the actor's worker that are Ray's settings for the actor, not for the job.
RAY_WORKER_ONLY = frozenset({"OMP_NUM_THREADS"})

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def set_death_signal() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    return set_death_signal


class ReplicaProcess:
    """One replica's process; the body of a Ray actor (one per GPU bundle).

    Its methods are called remotely by :class:`RayJobProcesses`.
    """

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._returncode: int | None = None

    def where(self) -> tuple[str, list[str]]:
        """``(Ray node id, GPU ids Ray assigned this actor)``."""
        import ray

        context = ray.get_runtime_context()
        return context.get_node_id(), [str(i) for i in context.get_accelerator_ids()["GPU"]]

    def free_port(self) -> int:
        """A TCP port free on this node now (for ``MASTER_PORT``)."""
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            return int(probe.getsockname()[1])

    def start(self, argv: Sequence[str], env: Mapping[str, str], cwd: str, log_file: str) -> int:
        """Start the command with the allow-listed part of this worker's environment
        (:func:`~bayes_sched.backends.job_env.inherited_environment`) updated by ``env``; its pid (0
        where it could not start: the reason is in the log and :meth:`poll` reports
        :data:`NOT_STARTED_RETURNCODE`).

        Ray forces ``OMP_NUM_THREADS=1`` on an actor that asks no CPU; the job's process does not
        inherit that (a job chooses its threads through ``env``)."""
        inherited = {k: v for k, v in inherited_environment(os.environ).items()
                     if k not in RAY_WORKER_ONLY}
        log = Path(log_file)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as stream:
            try:
                self._process = subprocess.Popen(
                    list(argv), env={**inherited, **env}, cwd=cwd, stdin=subprocess.DEVNULL,
                    stdout=stream, stderr=subprocess.STDOUT, start_new_session=True,
                    preexec_fn=_die_with_parent())
            except OSError as error:
                stream.write(f"bayes-sched: cannot start {list(argv)!r} in {cwd}: "
                             f"{error.strerror or error}\n".encode())
                self._returncode = NOT_STARTED_RETURNCODE
                return 0
        return self._process.pid

    def poll(self) -> int | None:
        """The return code, ``None`` while running."""
        if self._process is not None and self._returncode is None:
            self._returncode = self._process.poll()
        return self._returncode

    def send(self, signum: int) -> None:
        """SIGTERM to the process (the client checkpoints on it); SIGKILL to its whole group
        (what it spawned too)."""
        if self._process is None or self.poll() is not None:
            return
        try:
            if signum == signal.SIGKILL:
                os.killpg(self._process.pid, signal.SIGKILL)
            else:
                self._process.send_signal(signum)
        except ProcessLookupError:
            pass
