"""The local launcher: a job's replicas as subprocesses of one machine, one GPU each.

Each replica's environment is the allow-listed part of the scheduler's, the job file's ``[env]``
and then (:mod:`bayes_sched.backends.job_env`) ``CUDA_VISIBLE_DEVICES`` naming its GPU (an empty
value for a logical GPU of a machine without GPUs, ``--gpus 4`` on a laptop or in CI: the
replicas then share the CPU), the job directory's variables and ``torch.distributed``'s
(``MASTER_ADDR`` 127.0.0.1 and a free port). A local job never leaves this machine, so its
rendezvous and collectives listen on loopback only: the client binds rank 0's store to
``MASTER_ADDR`` (:mod:`bayes_sched.client.elastic`), and ``GLOO_SOCKET_IFNAME`` and
``NCCL_SOCKET_IFNAME`` name the loopback interface (:func:`loopback_interface`).

All replicas of one start share a process group of their own, so stopping the job signals the
whole tree, and so they outlive a killed scheduler, which reattaches to them by PID and start
time (:meth:`LocalLauncher.reattach`). stdout and stderr go to the replica's log of that start,
:func:`~bayes_sched.client.protocol.replica_log_path` (as under every backend).
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bayes_sched.backends.job_env import LOOPBACK, job_process_environment, loopback_interface
from bayes_sched.backends.launcher import ExitStatus, LaunchSpec, rank_layout
from bayes_sched.client.protocol import ENV_JOB_DIR, job_environment, log_tail, replica_log_path
from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.errors import AllocationError, InputError
from bayes_sched.gpu_types import gpu_type_of_device
from bayes_sched.round_timing import DEFAULT_RESTART_DELAY, DEFAULT_ROUND_INTERVAL

LOG = logging.getLogger(__name__)
#: The name of the local backend's one node (:attr:`LocalLauncher.node_ids`).
LOCAL_NODE_ID = "local"
#: Characters of a failed replica's log kept in its exit status.
LOG_TAIL_CHARS = 2000


def detect_gpus() -> list[str]:
    """Names of this machine's NVIDIA GPUs (``nvidia-smi -L``; empty where there is none)."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.split(":", 1)[1].split("(")[0].strip() for line in out.splitlines()
            if line.startswith("GPU ")]


def process_start_ticks(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot (``/proc/<pid>/stat``), ``None``
    where it does not run (or is a zombie)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _own_pids() -> list[int]:
    """The processes of this user (``/proc``)."""
    uid = os.getuid()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _environment(pid: int) -> dict[str, str]:
    """The environment process ``pid`` was started with (empty where it cannot be read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a live (not zombie) member."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return any(process_start_ticks(pid) is not None for pid in _own_pids()
               if _pgid(pid) == pgid)


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


@dataclass
class _Replica:
    rank: int
    pid: int
    start_ticks: int | None
    log: Path
    popen: subprocess.Popen[bytes] | None  # None: reattached, not our child
    returncode: int | None = None
    ended: bool = False

    def poll(self) -> bool:
        """Whether the replica has ended (recording its return code where it is our child)."""
        if self.ended:
            return True
        if self.popen is not None:
            code = self.popen.poll()
            if code is not None:
                self.ended, self.returncode = True, code
        elif process_start_ticks(self.pid) != self.start_ticks:
            self.ended = True
        return self.ended

    @property
    def failed(self) -> bool:
        return self.ended and self.returncode not in (0, None)


class LocalProcesses:
    """The replicas of one start of one job on this machine (:class:`JobProcesses`)."""

    def __init__(self, pgid: int, replicas: list[_Replica], gpus: list[int],
                 release: Callable[[list[int]], None]) -> None:
        self.pgid = pgid
        self.replicas = replicas
        self.gpus = gpus
        self._release = release
        self._status: ExitStatus | None = None

    def handle(self) -> dict[str, Any]:
        return {"pgid": self.pgid, "gpus": list(self.gpus),
                "replicas": [{"rank": r.rank, "pid": r.pid, "start_ticks": r.start_ticks,
                              "log": str(r.log)} for r in self.replicas]}

    def poll(self) -> ExitStatus | None:
        if self._status is not None:
            return self._status
        ended = [replica.poll() for replica in self.replicas]
        failed = [r for r in self.replicas if r.failed]
        if failed and not all(ended):
            self._signal(signal.SIGKILL)  # a failed replica: its peers would hang in collectives
            self._wait(5.0)
            ended = [replica.poll() for replica in self.replicas]
        if not all(ended):
            return None
        return self._finish()

    def stop(self, grace_seconds: float) -> ExitStatus:
        if self._status is not None:
            return self._status
        self._signal(signal.SIGTERM)
        if not self._wait(grace_seconds):
            self._signal(signal.SIGKILL)
            self._wait(10.0)
        return self._finish()

    def _finish(self) -> ExitStatus:
        first = next((r for r in self.replicas if r.failed), None)
        if first is not None:
            status = ExitStatus(first.returncode, log_tail(first.log, LOG_TAIL_CHARS))
        elif any(r.popen is None for r in self.replicas):
            status = ExitStatus(None, log_tail(self.replicas[0].log, LOG_TAIL_CHARS))
        else:
            status = ExitStatus(0, "")
        self._status = status
        self._release(self.gpus)
        return status

    def _alive(self) -> bool:
        return not all(replica.poll() for replica in self.replicas)

    def _signal(self, signum: int) -> None:
        if not self._alive():  # never signal a group whose IDs may have been reused
            return
        try:
            os.killpg(self.pgid, signum)
        except ProcessLookupError:
            pass

    def _wait(self, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while self._alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


class LocalLauncher:
    """Starts jobs' replicas as subprocesses of this machine (:class:`Launcher`).

    Args:
        num_gpus: GPUs to schedule; ``None``: the machine's NVIDIA GPUs. More than the machine
            has (e.g. 4 on a machine with none) makes them logical: replicas then run on the CPU.
        gpu_type: the GPU type of the node (default: detected, ``"cpu"`` for logical GPUs).
        restart_delay: seconds a restart costs a job here (the policy's re-allocation penalty).
        round_interval: seconds per scheduling round.
    """

    def __init__(self, num_gpus: int | None = None, gpu_type: str | None = None,
                 restart_delay: float = DEFAULT_RESTART_DELAY,
                 round_interval: float = DEFAULT_ROUND_INTERVAL) -> None:
        names = detect_gpus()
        if num_gpus is None:
            if not names:
                raise InputError("no NVIDIA GPU found: expected --gpus N (logical GPUs on the "
                                 "CPU)", column="--gpus")
            num_gpus = len(names)
        if num_gpus < 1:
            raise InputError(f"--gpus is {num_gpus}: expected at least 1", column="--gpus")
        self.physical = bool(names) and num_gpus <= len(names)
        if gpu_type is None:
            gpu_type = (gpu_type_of_device(names[0]) if self.physical else None) or "cpu"
        self._spec = ClusterSpec.homogeneous(1, num_gpus, gpu_type, restart_delay=restart_delay,
                                             round_interval=round_interval)
        self._free = set(range(num_gpus))
        self._started: list[LocalProcesses] = []

    def cluster_spec(self) -> ClusterSpec:
        return self._spec

    @property
    def node_ids(self) -> tuple[str, ...]:
        """This machine, the one node."""
        return (LOCAL_NODE_ID,)

    def start(self, spec: LaunchSpec) -> LocalProcesses:
        if len(spec.gpus_per_node) != 1:
            raise AllocationError(f"job '{spec.job_name}': {len(spec.gpus_per_node)} nodes given, "
                                  "the local backend has 1")
        if spec.world_size < 1 or spec.world_size > len(self._free):
            raise AllocationError(f"job '{spec.job_name}' asks for {spec.world_size} GPUs, "
                                  f"{len(self._free)} are free")
        gpus = sorted(self._free)[:spec.world_size]
        interface = loopback_interface()
        base = job_process_environment(os.environ, spec.env, {
            **job_environment(spec.job_dir, spec.job_name, spec.attempt, spec.placement,
                              self._spec.nodes[0].gpu_type),
            "MASTER_ADDR": LOOPBACK, "MASTER_PORT": str(_free_port()),
            "WORLD_SIZE": str(spec.world_size), "LOCAL_WORLD_SIZE": str(spec.world_size),
            "GLOO_SOCKET_IFNAME": interface, "NCCL_SOCKET_IFNAME": interface})
        replicas: list[_Replica] = []
        pgid = 0
        try:
            for (_, local, rank), gpu in zip(rank_layout(spec.gpus_per_node), gpus, strict=True):
                env = {**base, "RANK": str(rank), "LOCAL_RANK": str(local),
                       "CUDA_VISIBLE_DEVICES": str(gpu) if self.physical else ""}
                log = replica_log_path(spec.job_dir, spec.attempt, rank)
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("ab") as stream:
                    popen = subprocess.Popen(
                        list(spec.argv), cwd=spec.cwd or spec.job_dir, env=env,
                        stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.STDOUT,
                        process_group=pgid)
                if not pgid:
                    pgid = popen.pid
                replicas.append(_Replica(rank, popen.pid, process_start_ticks(popen.pid), log,
                                         popen))
        except OSError as error:
            for replica in replicas:
                if replica.popen is not None:
                    replica.popen.kill()
                    replica.popen.wait()
            missing = error.filename if error.filename is not None else spec.argv[0]
            raise InputError(f"job '{spec.job_name}': cannot start {spec.argv[0]!r}: "
                             f"{error.strerror} ({missing})",
                             column="python" if missing == spec.argv[0] else "cwd") from None
        self._free -= set(gpus)
        processes = LocalProcesses(pgid, replicas, gpus, self._release)
        self._started.append(processes)
        return processes

    def start_many(self, specs: Sequence[LaunchSpec]
                   ) -> list[LocalProcesses | AllocationError | InputError]:
        """:meth:`start` for each (a local start waits on nothing remote)."""
        started: list[LocalProcesses | AllocationError | InputError] = []
        for spec in specs:
            try:
                started.append(self.start(spec))
            except (AllocationError, InputError) as error:
                started.append(error)
        return started

    def reattach(self, spec: LaunchSpec, handle: Mapping[str, Any]) -> LocalProcesses | None:
        replicas = [_Replica(int(r["rank"]), int(r["pid"]), r["start_ticks"], Path(r["log"]),
                             None) for r in handle.get("replicas", [])]
        alive = [r for r in replicas if process_start_ticks(r.pid) == r.start_ticks
                 and r.start_ticks is not None]
        if not alive:
            return None
        gpus = [int(g) for g in handle.get("gpus", [])]
        if not set(gpus) <= self._free:
            raise AllocationError(f"job '{spec.job_name}': GPUs {gpus} are already in use")
        self._free -= set(gpus)
        processes = LocalProcesses(int(handle["pgid"]), replicas, gpus, self._release)
        self._started.append(processes)
        return processes

    def node_aliases(self) -> dict[str, str]:
        """This machine's host name (what its collector records by default) -> its node."""
        return {socket.gethostname(): LOCAL_NODE_ID, LOCAL_NODE_ID: LOCAL_NODE_ID}

    def release_strays(self, job_dirs: Sequence[str], grace_seconds: float = 5.0) -> list[str]:
        """Stop the processes of this machine that run for a job of ``job_dirs`` (found by the
        ``BAYES_SCHED_JOB_DIR`` of their environment) and that no job of this launcher holds:
        those of a start a killed scheduler made but had not recorded, which would otherwise run
        next to the job's next start. Their process groups get SIGTERM (the client checkpoints
        and exits), SIGKILL after ``grace_seconds``. Call it after :meth:`reattach` has taken up
        every recorded start. Returns the job directories released."""
        wanted = {os.path.abspath(d): d for d in job_dirs}
        held = {r.pid for processes in self._started for r in processes.replicas}
        strays: dict[int, str] = {}  # process group -> job directory
        for pid in _own_pids():
            if pid in held or pid == os.getpid():
                continue
            job_dir = _environment(pid).get(ENV_JOB_DIR)
            if job_dir is None or os.path.abspath(job_dir) not in wanted:
                continue
            group = _pgid(pid)
            if group is not None and group != os.getpgrp():  # never this scheduler's own group
                strays[group] = wanted[os.path.abspath(job_dir)]
        for signum in (signal.SIGTERM, signal.SIGKILL):
            for group in strays:
                try:
                    os.killpg(group, signum)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_seconds
            while any(_group_alive(g) for g in strays) and time.monotonic() < deadline:
                time.sleep(0.05)
        released = sorted(set(strays.values()))
        if released:
            LOG.warning("stopped the processes of starts no record holds: %s",
                        ", ".join(released))
        return released

    def close(self) -> None:
        for processes in self._started:
            processes.stop(5.0)
        self._started.clear()

    def _release(self, gpus: list[int]) -> None:
        self._free |= set(gpus)
        self._started = [p for p in self._started if p._status is None]


def python_command(script: str, arguments: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """The command that runs a Python training script with this interpreter."""
    return (sys.executable, script, *arguments)


def local_backend(gpus: int | None = None, gpu_type: str | None = None,
                  restart_delay: float = DEFAULT_RESTART_DELAY,
                  round_interval: float = DEFAULT_ROUND_INTERVAL) -> LocalLauncher:
    """Jobs as subprocesses on this machine: ``gpus`` of ``gpu_type`` (default: the machine's
    GPUs; more than it has are logical GPUs on the CPU) (:data:`bayes_sched.backends.BACKENDS`)."""
    return LocalLauncher(gpus, gpu_type, restart_delay=restart_delay,
                         round_interval=round_interval)
