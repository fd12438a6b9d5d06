"""Jobs of Shockwave's world: 12-column traces with batch-size modes and each model's schedule.

Shockwave (Zheng et al., NSDI 2023; artifact ``uw-mad-dash/shockwave``) extends Gavel's job with a
batch-size adaptation mode and a nominal duration. A trace line has 12 tab-separated columns
(:data:`SHOCKWAVE_TRACE_COLUMNS`): Gavel's first seven, then ``mode`` (``static``, ``accordion`` or
``gns``), ``priority_weight``, ``SLO``, ``duration`` (seconds alone on a V100 at the initial batch
size) and ``arrival_time`` (s); a 13th column, where a line has one, names the job's tenant
(:data:`~bayes_sched.sim.gavel_jobs.TENANT_COLUMN`).

Epochs and each mode's batch-size schedule (the job's profile) are defined in
:mod:`bayes_sched.batch_modes`.

:mod:`bayes_sched.sim.shockwave_cluster` runs these jobs (how the batch size changes while a job
runs follows Shockwave's simulator, which differs from these profiles in places; see there).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bayes_sched.batch_modes import (
    DATASET_SIZE,
    MODES,
    batch_size_schedule,
    epoch_seconds,
    job_type_of,
    model_of,
    num_epochs,
)
from bayes_sched.errors import InputError
from bayes_sched.sim.gavel_jobs import MAX_SCALE_FACTOR, TableJobSpec, first_jobs, trace_fields
from bayes_sched.throughputs import SHOCKWAVE_DATA_DIR, ThroughputTable, load_shockwave_throughputs
from perfmodel import textio

#: Columns of a Shockwave trace line, in order.
SHOCKWAVE_TRACE_COLUMNS: tuple[str, ...] = (
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "mode", "priority_weight", "SLO", "duration", "arrival_time")

@dataclass(frozen=True)
class ShockwaveJobSpec(TableJobSpec):
    """A Shockwave job: a Gavel job with a batch-size mode and a nominal duration.

    Attributes:
        mode: ``static``, ``accordion`` or ``gns`` (declared by the user at submission).
        duration: seconds alone on a V100 at the initial batch size (the trace's column).
    """

    mode: str = "static"
    duration: float = 0.0

    @property
    def model(self) -> str:
        return model_of(self.job_type)

    @property
    def epochs(self) -> int:
        """Epochs to train (the user's target, kept across batch-size changes)."""
        return num_epochs(self.model, self.batch_size, self.total_steps)

    def profile(self) -> list[int]:
        """Batch size per epoch under the job's mode."""
        return batch_size_schedule(self.mode, self.model, self.batch_size, self.epochs,
                                   self.scale_factor)


def profile_epoch_seconds(job: ShockwaveJobSpec, table: ThroughputTable, gpu: str = "v100"
                          ) -> list[float]:
    """Seconds of each epoch of the job's profile alone on its GPUs of type ``gpu``."""
    out = []
    for batch_size in job.profile():
        seconds = epoch_seconds(table, job.model, batch_size, job.scale_factor, gpu)
        out.append(float("inf") if seconds is None else seconds)
    return out


def read_shockwave_trace(path: str | Path, table: ThroughputTable | None = None,
                         max_jobs: int | None = None) -> tuple[ShockwaveJobSpec, ...]:
    """Read and check a 12-column Shockwave trace, or its first ``max_jobs`` jobs (the lines after
    them are not read); jobs are named by their index.

    Raises:
        InputError: one line naming the file, row and column of the first problem (see
            :func:`iter_shockwave_trace`), or a file with no jobs.
    """
    return first_jobs(iter_shockwave_trace(path, table), max_jobs, path)


def iter_shockwave_trace(path: str | Path, table: ThroughputTable | None = None
                         ) -> Iterator[ShockwaveJobSpec]:
    """The jobs of a 12-column Shockwave trace, checked and yielded line by line.

    Raises:
        InputError: when the iteration reaches it, one line naming the file, row and column of a
            problem: a wrong number of columns, a bad number, an unknown mode, a model without a
            dataset size, a job type / scale factor with no measured throughput (also for a batch
            size its mode reaches), arrival times that go back in time.
    """
    table = table or load_shockwave_throughputs()
    path = Path(path)
    parsers = {
        "needs_data_dir": textio.int_parser(0, 1),
        "total_steps": textio.float_parser(0.0, 1e15, above_minimum=True),
        "scale_factor": textio.int_parser(1, MAX_SCALE_FACTOR),
        "priority_weight": textio.float_parser(0.0, 1e6, above_minimum=True),
        "SLO": textio.float_parser(),
        "duration": textio.float_parser(0.0, 1e12),
        "arrival_time": textio.float_parser(0.0, 1e12),
    }
    index = 0
    previous = 0.0
    for row, line in textio.iter_lines(path, InputError):
        if not line.strip():
            continue
        fields, tenant = trace_fields(line, SHOCKWAVE_TRACE_COLUMNS, path, row)
        values = {column: textio.parse_cell(fields[SHOCKWAVE_TRACE_COLUMNS.index(column)], parse,
                                            path, row, column, InputError)
                  for column, parse in parsers.items()}
        job_type, mode = fields[0].strip(), fields[7].strip()
        model = model_of(job_type)
        if model not in DATASET_SIZE:
            raise InputError(f"unknown model in job type '{job_type}': expected one of "
                             f"{', '.join(DATASET_SIZE)}", path, row, "job_type")
        if mode not in MODES:
            raise InputError(f"unknown batch-size mode '{mode}': expected one of "
                             f"{', '.join(MODES)}", path, row, "mode")
        scale_factor = int(values["scale_factor"])
        arrival = float(values["arrival_time"])
        job = ShockwaveJobSpec(str(index), arrival, job_type, scale_factor,
                               _initial_batch_size(job_type, path, row),
                               float(values["total_steps"]), float(values["priority_weight"]),
                               mode, float(values["duration"]), tenant=tenant)
        for batch_size in sorted(set(job.profile())):
            if table.steps_per_second(job_type_of(model, batch_size), scale_factor, "v100") \
                    is None:
                raise InputError(
                    f"job type '{job_type_of(model, batch_size)}' (mode {mode}) has no measured "
                    f"throughput at scale factor {scale_factor}: expected a (job type, scale "
                    "factor) of the throughput table", path, row,
                    "job_type" if batch_size == job.batch_size else "mode")
        if arrival < previous:
            raise InputError(f"arrival time {arrival:g} is before the previous job's "
                             f"{previous:g}: expected non-decreasing arrival times", path, row,
                             "arrival_time")
        previous = arrival
        yield job
        index += 1


def _initial_batch_size(job_type: str, path: Path, row: int) -> int:
    marker = "(batch size "
    start = job_type.find(marker)
    digits = job_type[start + len(marker):].rstrip(")") if start >= 0 else ""
    if not digits.isdigit() or int(digits) <= 0:
        raise InputError(f"job type '{job_type}' names no batch size: expected "
                         "'<model> (batch size <n>)'", path, row, "job_type")
    return int(digits)


def shipped_shockwave_trace(name: str = "tacc_120") -> Path:
    """A trace shipped from Shockwave's ``scheduler/traces/reproduce`` (``tacc_120``: the
    120-job trace of its ``tacc_32gpus`` runs)."""
    path = SHOCKWAVE_DATA_DIR / "traces" / f"{Path(name).stem}.trace"
    if not path.exists():
        raise InputError(f"no such Shockwave trace '{name}': expected one of "
                         f"{', '.join(shipped_shockwave_traces())}")
    return path


def shipped_shockwave_traces() -> Sequence[str]:
    return sorted(p.stem for p in (SHOCKWAVE_DATA_DIR / "traces").glob("*.trace"))


def is_shockwave_trace(path: Path) -> bool:
    """Whether a trace file's first line has Shockwave's 12 columns, 13 with a tenant (else
    Gavel's 10 or 11)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            first = handle.readline(textio.MAX_LINE_BYTES)
    except OSError:
        return False
    return len(first.rstrip("\n").split("\t")) in (len(SHOCKWAVE_TRACE_COLUMNS),
                                                     len(SHOCKWAVE_TRACE_COLUMNS) + 1)
