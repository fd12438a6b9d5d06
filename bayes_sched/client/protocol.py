"""The job directory: how a backend and the training client in a job's processes talk.

A backend gives every job a directory (shared by all of the job's processes; on a multi-node
cluster a shared file system, as the checkpoints need one anyway) and starts each replica with the
environment variables below. Everything goes through files, so the channel survives a restarted
scheduler and a killed job, and needs neither the scheduler nor the job to be up when the other
writes::

    <job dir>/control.json     scheduler -> job: per-GPU batch, accumulation, checkpoint request
                               (replaced atomically; :func:`write_control`, :func:`read_control`)
    <job dir>/reports.jsonl    job -> scheduler: one JSON object a line, appended by rank 0 and
                               flushed to disk (:func:`append_report`, :func:`read_reports`)
    <job dir>/checkpoint/      the client's checkpoints (written atomically by the client)
    <job dir>/logs/            each replica's stdout and stderr, written by the backend, one
                               file per start and rank: attempt-<N>.rank-<R>.log
                               (:func:`replica_log_path`, :func:`replica_logs`)

This module is imported by training scripts: it needs the standard library only.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

#: Environment variables a backend sets in every replica of a job.
ENV_JOB_DIR = "BAYES_SCHED_JOB_DIR"
ENV_JOB_NAME = "BAYES_SCHED_JOB"
ENV_ATTEMPT = "BAYES_SCHED_ATTEMPT"        # 0 for the first start, +1 for each restart
ENV_GPU_TYPE = "BAYES_SCHED_GPU_TYPE"      # the GPU type of the replica's node
ENV_PLACEMENT = "BAYES_SCHED_PLACEMENT"    # GPUs per node in use, e.g. "22" (as in Pollux profiles)
ENV_INIT_BATCH = "BAYES_SCHED_INIT_BATCH"    # the job's initial total batch B0 (examples)
ENV_TARGET_EPOCHS = "BAYES_SCHED_TARGET_EPOCHS"  # epochs after which the job is done
#: ... and the variables ``torch.distributed`` reads (``init_method="env://"``).
ENV_TORCH = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

CONTROL_FILE = "control.json"
REPORTS_FILE = "reports.jsonl"
CHECKPOINT_DIR = "checkpoint"
LOG_DIR = "logs"

#: The kinds of report a job appends (the ``"kind"`` field of every line).
REPORT_KINDS = ("start", "step", "gradient", "progress", "checkpoint", "exit")


@dataclass(frozen=True)
class Control:
    """What the scheduler asks of a running job.

    Attributes:
        local_bsz: per-GPU micro-batch (examples).
        accum_steps: gradient-accumulation micro-steps per optimiser step beyond the first (0: none).
        checkpoint_request: a number the scheduler raises to ask for a checkpoint at the next step
            boundary; the job acknowledges it with a ``checkpoint`` report carrying the same number.
        version: raised by the scheduler on every write, so a job can tell a new control apart.
    """

    local_bsz: int
    accum_steps: int = 0
    checkpoint_request: int = 0
    version: int = 0

    def __post_init__(self) -> None:
        for name in ("local_bsz", "accum_steps", "checkpoint_request", "version"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"control field {name!r}: expected an integer, got {value!r}")
        if self.local_bsz < 1:
            raise ValueError(f"control field 'local_bsz': expected >= 1, got {self.local_bsz}")
        if self.accum_steps < 0:
            raise ValueError(f"control field 'accum_steps': expected >= 0, got {self.accum_steps}")


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some file systems do not open directories
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_control(job_dir: str | os.PathLike[str], control: Control) -> None:
    """Replace ``control.json`` atomically (write a temporary file, flush it, rename it), so a
    reader sees the old or the new control, never a torn one, also when the writer is killed."""
    directory = Path(job_dir)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".control.", dir=directory)
    try:
        with os.fdopen(fd, "w") as stream:
            json.dump(asdict(control), stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, directory / CONTROL_FILE)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(directory)


def read_control(job_dir: str | os.PathLike[str]) -> Control | None:
    """The control in force, ``None`` where the scheduler has written none.

    Raises:
        ValueError: the file is not a control object (naming the file and what is wrong).
    """
    path = Path(job_dir) / CONTROL_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not JSON ({error.msg})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object")
    known = {f.name for f in fields(Control)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{path}: unknown field {unknown[0]!r}")
    try:
        return Control(**data)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from None


def _finite(value: Any) -> bool:
    return not isinstance(value, float) or math.isfinite(value)


def append_report(job_dir: str | os.PathLike[str], kind: str, **fields_: Any) -> None:
    """Append one report line ``{"kind": kind, **fields_}`` and flush it to disk.

    One ``write`` of one line in append mode: concurrent appends do not interleave within a line,
    and a writer killed mid-line leaves a torn last line that :func:`read_reports` skips.

    Raises:
        ValueError: an unknown kind or a non-finite number (strict JSON has none).
    """
    append_reports(job_dir, [{"kind": kind, **fields_}])


def append_reports(job_dir: str | os.PathLike[str], reports: list[dict[str, Any]],
                   durable: bool = True) -> None:
    """Append several report lines (each a dict with its ``"kind"``) in one write and one flush
    to disk: what :func:`append_report` does for one, at one ``fsync`` for all (a writer killed
    mid-write leaves whole lines and at most one torn last line).

    ``durable=False`` leaves out the ``fsync``: the lines are the kernel's once ``write``
    returns, so they survive the writer's death (SIGKILL included) and only a crash of the
    machine loses them. For the periodic measurement and progress reports, which the next ones
    supersede and whose loss costs the scheduler nothing but a late view (a machine crash
    restarts the job from its checkpoint, which is written durably); a ``fsync`` per report
    costs a noticeable share of training time on a loaded disk.

    Raises:
        ValueError: an unknown kind or a non-finite number (nothing is written then).
    """
    lines = []
    for report in reports:
        kind = report.get("kind")
        if kind not in REPORT_KINDS:
            raise ValueError(f"report kind {kind!r}: expected one of {', '.join(REPORT_KINDS)}")
        bad = [name for name, value in report.items() if not _finite(value)]
        if bad:
            raise ValueError(f"report field {bad[0]!r}: expected a finite number, "
                             f"got {report[bad[0]]!r}")
        lines.append(json.dumps(report, allow_nan=False) + "\n")
    if not lines:
        return
    path = Path(job_dir) / REPORTS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, "".join(lines).encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_reports(job_dir: str | os.PathLike[str],
                 offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The complete report lines from byte ``offset`` on, and the offset to read from next.

    A torn last line (its writer killed mid-write) is left for the next call; a complete line that
    is not a JSON object with a known ``kind`` is skipped (a job's bug must not stop the
    scheduler), as is a line with a non-finite number.

    Returns:
        ``(reports, next_offset)``: reports as dicts in the order written.
    """
    path = Path(job_dir) / REPORTS_FILE
    try:
        with path.open("rb") as stream:
            stream.seek(offset)
            data = stream.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    reports: list[dict[str, Any]] = []
    for raw in data[:end].splitlines():
        try:
            item = json.loads(raw, parse_constant=_reject_constant)
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(item, dict) and item.get("kind") in REPORT_KINDS:
            reports.append(item)
    return reports, offset + end


def replica_log_path(job_dir: str | os.PathLike[str], attempt: int, rank: int) -> Path:
    """Where replica ``rank`` of start ``attempt`` writes stdout and stderr (every backend)."""
    return Path(job_dir) / LOG_DIR / f"attempt-{attempt}.rank-{rank}.log"


_LOG_NAME = re.compile(r"attempt-(\d+)\.rank-(\d+)\.log")


def replica_logs(job_dir: str | os.PathLike[str]) -> list[tuple[int, int, Path]]:
    """Every replica log of the job, as ``(attempt, rank, path)`` by attempt then rank (numbers,
    not names: attempt 10 comes after attempt 2)."""
    found = []
    for path in (Path(job_dir) / LOG_DIR).glob("attempt-*.rank-*.log"):
        match = _LOG_NAME.fullmatch(path.name)
        if match:
            found.append((int(match[1]), int(match[2]), path))
    return sorted(found)


def latest_log(job_dir: str | os.PathLike[str]) -> Path | None:
    """The log to show of a job: of its newest start, the one written last (a failing replica's
    last words come after its peers'), ``None`` where it has none."""
    logs = replica_logs(job_dir)
    if not logs:
        return None
    newest = [path for attempt, _, path in logs if attempt == logs[-1][0]]
    return max(newest, key=lambda path: path.stat().st_mtime_ns)


def log_tail(path: str | os.PathLike[str], max_bytes: int = 2000) -> str:
    """The last ``max_bytes`` of a replica's log, stripped ("" where it cannot be read): what a
    backend shows of a job that failed."""
    path = Path(path)
    try:
        with path.open("rb") as stream:
            stream.seek(max(0, path.stat().st_size - max_bytes))
            return stream.read().decode(errors="replace").strip()
    except OSError:
        return ""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name}")


def job_environment(job_dir: str | os.PathLike[str], job_name: str, attempt: int,
                    placement: str, gpu_type: str) -> Mapping[str, str]:
    """The bayes-sched variables every replica of a job gets (the backend adds ``ENV_TORCH``)."""
    return {ENV_JOB_DIR: str(job_dir), ENV_JOB_NAME: job_name, ENV_ATTEMPT: str(attempt),
            ENV_PLACEMENT: placement, ENV_GPU_TYPE: gpu_type}
