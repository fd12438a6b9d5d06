"""A job without PyTorch that speaks the job-directory protocol: the cheapest real job to load
``bayes-sched serve`` with (a Python start-up and a few report lines, no model).

It does what :class:`~bayes_sched.client.elastic.ElasticJob` does for the scheduler, with
simulated steps (``--step-seconds`` of sleep, longer for a larger per-GPU batch): restores its
checkpoint (a JSON file replaced atomically), reports ``start``, measured ``step`` times, gradient
statistics and progress, takes up ``control.json`` (batch, accumulation, checkpoint requests,
acknowledged with a ``checkpoint`` report), checkpoints and exits 0 on SIGTERM, and reports
``exit`` with ``done`` at its target epochs. Rank 0 trains and reports; other ranks wait for it.

``--marker FILE`` makes every replica append one line per start and per end to ``FILE`` (one
``O_APPEND`` write each): ``{"event": "begin"|"end", "job", "attempt", "rank", "pid", "time",
"overlap"}``. At its start a replica takes an exclusive ``flock`` on ``FILE.<job>.rank-<R>.lock``
without waiting; ``overlap`` is true where another live process of the same job and rank held it
(the kernel releases it when a process dies, SIGKILL included): two live copies of one rank.

``--flood-mb N`` writes N MB to stdout as fast as it can before training (a job that floods its
log). Stdlib and :mod:`bayes_sched.client.protocol` only.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from bayes_sched.client import protocol

CHECKPOINT = "checkpoint.json"


def _mark(marker: Path | None, **fields: Any) -> None:
    if marker is None:
        return
    line = json.dumps({**fields, "pid": os.getpid(), "time": time.time()}) + "\n"
    fd = os.open(marker, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _take_rank_lock(marker: Path | None, job: str, rank: int) -> bool:
    """Lock this job's rank for the life of the process; ``True`` where another held it."""
    if marker is None:
        return False
    fd = os.open(f"{marker}.{job}.rank-{rank}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        fcntl.flock(fd, fcntl.LOCK_EX)  # wait, so that a third copy is seen too
        return True


def _save(job_dir: Path, state: dict[str, Any], seconds: float = 0.0) -> None:
    time.sleep(seconds)  # what writing a real model's checkpoint takes
    directory = job_dir / protocol.CHECKPOINT_DIR
    directory.mkdir(exist_ok=True)
    tmp = directory / f".{CHECKPOINT}.{os.getpid()}"
    tmp.write_text(json.dumps(state))
    os.replace(tmp, directory / CHECKPOINT)


def _load(job_dir: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads((job_dir / protocol.CHECKPOINT_DIR / CHECKPOINT).read_text()))
    except FileNotFoundError:
        return None


def _flood(megabytes: int) -> None:
    chunk = ("x" * 1023 + "\n").encode() * 1024
    for _ in range(megabytes):
        os.write(1, chunk)


def train(job_dir: Path, args: argparse.Namespace, attempt: int) -> str:
    """Rank 0's loop until done or SIGTERM; returns ``"done"`` or ``"stopped"``."""
    terminate = []
    signal.signal(signal.SIGTERM, lambda *_: terminate.append(True))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    saved = _load(job_dir) or {"step": 0, "examples": 0, "acked": 0}
    control = protocol.read_control(job_dir) or protocol.Control(local_bsz=8)
    per_epoch, target = args.examples, float(os.environ.get(protocol.ENV_TARGET_EPOCHS, "1"))
    common = {"gpu_type": os.environ.get(protocol.ENV_GPU_TYPE, "cpu"), "num_nodes": 1,
              "num_replicas": world}
    protocol.append_report(job_dir, "start", attempt=attempt, world_size=world,
                           local_bsz=control.local_bsz, accum_steps=control.accum_steps,
                           restored=saved["step"] > 0, step=saved["step"],
                           epochs=saved["examples"] / per_epoch, examples_per_epoch=per_epoch,
                           progress=float(saved["step"]), pid=os.getpid())
    last_report = time.monotonic()
    while saved["examples"] < target * per_epoch:
        control = protocol.read_control(job_dir) or control
        if control.checkpoint_request > saved["acked"]:
            saved["acked"] = control.checkpoint_request
            _save(job_dir, saved, args.checkpoint_seconds)
            protocol.append_report(job_dir, "checkpoint", request=saved["acked"],
                                   step=saved["step"], epochs=saved["examples"] / per_epoch)
        if terminate:
            _save(job_dir, saved, args.checkpoint_seconds)
            protocol.append_report(job_dir, "exit", status="stopped", step=saved["step"],
                                   epochs=saved["examples"] / per_epoch)
            return "stopped"
        micro = control.accum_steps + 1
        step_time = args.step_seconds * micro * (1 + control.local_bsz / 64)
        time.sleep(step_time)
        saved["step"] += 1
        saved["examples"] += control.local_bsz * micro * world
        if time.monotonic() - last_report >= args.report_interval:
            last_report = time.monotonic()
            epochs = saved["examples"] / per_epoch
            protocol.append_reports(job_dir, [
                {"kind": "step", **common, "local_bsz": control.local_bsz,
                 "accum_steps": control.accum_steps, "step_time": step_time,
                 "sync_time": 0.1 * step_time * (world > 1)},
                {"kind": "gradient", "grad_sqr": 1.0, "grad_var": 4.0},
                {"kind": "progress", "step": saved["step"], "progress": float(saved["step"]),
                 "epochs": epochs, "examples_per_epoch": per_epoch}], durable=False)
    _save(job_dir, saved)
    protocol.append_report(job_dir, "exit", status="done", step=saved["step"],
                           epochs=saved["examples"] / per_epoch)
    return "done"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=256, help="examples per epoch")
    parser.add_argument("--step-seconds", type=float, default=0.01)
    parser.add_argument("--report-interval", type=float, default=0.2)
    parser.add_argument("--checkpoint-seconds", type=float, default=0.0,
                        help="seconds each checkpoint on request or SIGTERM takes")
    parser.add_argument("--marker", type=Path, default=None)
    parser.add_argument("--flood-mb", type=int, default=0)
    args = parser.parse_args()
    job_dir = Path(os.environ[protocol.ENV_JOB_DIR])
    job = os.environ[protocol.ENV_JOB_NAME]
    attempt = int(os.environ.get(protocol.ENV_ATTEMPT, "0"))
    rank = int(os.environ.get("RANK", "0"))
    overlap = _take_rank_lock(args.marker, job, rank)
    _mark(args.marker, event="begin", job=job, attempt=attempt, rank=rank, overlap=overlap)
    if args.flood_mb:
        _flood(args.flood_mb)
    finished = job_dir / f".attempt-{attempt}.finished"
    if rank == 0:
        status = train(job_dir, args, attempt)
        finished.touch()
    else:  # no collectives here: the other ranks live as long as rank 0's attempt
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while not finished.exists():
            time.sleep(0.05)
        status = "follower"
    _mark(args.marker, event="end", job=job, attempt=attempt, rank=rank, status=status)


if __name__ == "__main__":
    main()
