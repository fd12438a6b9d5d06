"""Jobs of the throughput-table world: Gavel ``.trace`` files and Gavel's continuous arrivals.

A Gavel job is a job type (``"ResNet-50 (batch size 32)"``), a scale factor (the GPUs it runs on,
all of one type) and a training length in steps; it progresses at the measured steps/s of its
type, scale factor and GPU type (:mod:`bayes_sched.throughputs`).

``.trace`` files (Gavel's ``scheduler/traces``): one job per line, 10 tab-separated columns, no
header (:data:`TRACE_COLUMNS`); arrival times in seconds, non-decreasing. An 11th column, where a
line has one, names the job's tenant (:data:`TENANT_COLUMN`; empty: the default tenant). They are streamed
(:func:`iter_gavel_trace`): reading the first N jobs reads N lines, whatever the file's length.

The continuous-arrival generator follows Gavel's simulator (``scheduler.py`` ``simulate`` and
``utils.py`` ``generate_job``): Poisson arrivals (exponential gaps of mean ``3600 / rate`` s, the
first job at 0), a scale factor from the Philly mix (1: 70 %, 2: 10 %, 4: 15 %, 8: 5 %), a
duration on a V100 from the Philly mix (80 %: ``60 * 10**U(1.5, 3)`` s, 20 %: ``60 * 10**U(3, 4)``
s), a job type drawn uniformly from Gavel's job-type table (again until it can run distributed
when the scale factor is above 1), and steps = duration x the type's V100 steps/s. Job
parameters and arrival gaps come from separate seeded streams, ``seed + 2`` and ``seed + 3``,
Python's Mersenne Twister, as Gavel seeds them, so a seed names the same job sequence Gavel draws.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from bayes_sched.errors import InputError
from bayes_sched.jobs import DEFAULT_TENANT, JobSpec
from bayes_sched.throughputs import (
    GAVEL_DATA_DIR,
    ThroughputTable,
    gavel_job_types,
    load_gavel_throughputs,
)
from perfmodel import textio

J = TypeVar("J")

#: Columns of a Gavel ``.trace`` line, in order.
TRACE_COLUMNS: tuple[str, ...] = (
    "job_type", "command", "working_directory", "num_steps_arg", "needs_data_dir", "total_steps",
    "scale_factor", "priority_weight", "SLO", "arrival_time")

#: The optional last column of a trace line (Gavel's and Shockwave's): the job's tenant.
TENANT_COLUMN = "tenant"

#: Largest scale factor Gavel's tables hold.
MAX_SCALE_FACTOR = 8

_BATCH_SIZE = re.compile(r"batch size (\d+)")


@dataclass(frozen=True)
class TableJobSpec(JobSpec):
    """A Gavel job: ``application`` is its job type, ``num_replicas`` its scale factor.

    Attributes:
        total_steps: steps to train (the simulator's truth; no policy sees it).
        priority_weight: the trace's priority weight (1 for generated jobs).
    """

    total_steps: float = 1.0
    priority_weight: float = 1.0

    @property
    def job_type(self) -> str:
        return self.application

    @property
    def scale_factor(self) -> int:
        return self.num_replicas


def _batch_size(job_type: str) -> int:
    match = _BATCH_SIZE.search(job_type)
    return int(match.group(1)) if match else 1


def make_job(name: str, submit_time: float, job_type: str, scale_factor: int, total_steps: float,
             priority_weight: float = 1.0, tenant: str = DEFAULT_TENANT) -> TableJobSpec:
    """A Gavel job (its batch size, for reports, read from the job type's name)."""
    return TableJobSpec(name, float(submit_time), job_type, int(scale_factor),
                        _batch_size(job_type), float(total_steps), float(priority_weight),
                        tenant=tenant)


def trace_fields(line: str, columns: tuple[str, ...], path: Path, row: int
                 ) -> tuple[list[str], str]:
    """A trace line's tab-separated fields (``len(columns)`` of them) and its tenant: the
    optional extra last column (:data:`TENANT_COLUMN`), :data:`DEFAULT_TENANT` where the line has
    none or it is empty. Any other count of columns is an :class:`InputError` naming the row."""
    fields = line.split("\t")
    if len(fields) not in (len(columns), len(columns) + 1):
        raise InputError(f"{len(fields)} tab-separated columns: expected {len(columns)} "
                         f"({', '.join(columns)}), or {len(columns) + 1} with a last "
                         f"'{TENANT_COLUMN}' column", path, row)
    tenant = fields[len(columns)].strip() if len(fields) > len(columns) else ""
    return fields[:len(columns)], tenant or DEFAULT_TENANT


def read_gavel_trace(path: str | Path, table: ThroughputTable | None = None,
                     max_jobs: int | None = None) -> tuple[TableJobSpec, ...]:
    """Read and check a Gavel ``.trace`` file, or its first ``max_jobs`` jobs (the lines after
    them are not read); jobs are named by their index (``"0"``...).

    Raises:
        InputError: one line naming the file, row (line number) and column of the first problem
            (see :func:`iter_gavel_trace`), or a file with no jobs.
    """
    return first_jobs(iter_gavel_trace(path, table), max_jobs, path)


def first_jobs(jobs: Iterator[J], max_jobs: int | None, path: str | Path) -> tuple[J, ...]:
    """The first ``max_jobs`` of a trace's ``jobs`` (all with ``None``), read no further;
    a trace with none is an :class:`InputError` naming ``path``."""
    first = tuple(itertools.islice(jobs, max_jobs))
    if not first:
        raise InputError("no jobs: expected one tab-separated line per job", Path(path))
    return first


def iter_gavel_trace(path: str | Path, table: ThroughputTable | None = None
                     ) -> Iterator[TableJobSpec]:
    """The jobs of a Gavel ``.trace`` file, checked and yielded line by line (the file is never
    held whole).

    Raises:
        InputError: when the iteration reaches it, one line naming the file, row (line number)
            and column of a problem: a wrong number of columns, a bad number, a job type / scale
            factor with no measured throughput, arrival times that go back in time.
    """
    table = table or load_gavel_throughputs()
    path = Path(path)
    int_cell = textio.int_parser(0, 1)
    steps_cell = textio.float_parser(0.0, 1e15, above_minimum=True)
    scale_cell = textio.int_parser(1, MAX_SCALE_FACTOR)
    weight_cell = textio.float_parser(0.0, 1e6, above_minimum=True)
    slo_cell = textio.float_parser()
    time_cell = textio.float_parser(0.0, 1e12)
    index = 0
    previous = 0.0
    for row, line in textio.iter_lines(path, InputError):
        if not line.strip():
            continue
        fields, tenant = trace_fields(line, TRACE_COLUMNS, path, row)
        values = {column: textio.parse_cell(fields[TRACE_COLUMNS.index(column)], parse, path,
                                            row, column, InputError)
                  for column, parse in (("needs_data_dir", int_cell),
                                        ("total_steps", steps_cell),
                                        ("scale_factor", scale_cell),
                                        ("priority_weight", weight_cell), ("SLO", slo_cell),
                                        ("arrival_time", time_cell))}
        job_type = fields[0].strip()
        total_steps, scale_factor = values["total_steps"], values["scale_factor"]
        weight, arrival = values["priority_weight"], values["arrival_time"]
        if not job_type:
            raise InputError("empty job type: expected one of Gavel's job types", path, row,
                             "job_type")
        rates = table.solo.get((job_type, scale_factor))
        if rates is None:
            known = job_type in table.job_types
            raise InputError(
                (f"job type '{job_type}' has no measured throughput at scale factor "
                 f"{scale_factor}: expected one of its measured scale factors" if known else
                 f"unknown job type '{job_type}': expected one of {', '.join(table.job_types)}"),
                path, row, "scale_factor" if known else "job_type")
        if arrival < previous:
            raise InputError(f"arrival time {arrival:g} is before the previous job's "
                             f"{previous:g}: expected non-decreasing arrival times", path, row,
                             "arrival_time")
        previous = arrival
        yield make_job(str(index), arrival, job_type, scale_factor, total_steps, weight, tenant)
        index += 1


def shipped_gavel_trace(name: str) -> Path:
    """A trace shipped from Gavel's ``scheduler/traces/physical_cluster`` (e.g. ``small_test``)."""
    path = GAVEL_DATA_DIR / "traces" / f"{Path(name).stem}.trace"
    if not path.exists():
        shipped = sorted(p.stem for p in (GAVEL_DATA_DIR / "traces").glob("*.trace"))
        raise InputError(f"no such trace '{name}': expected a .trace path or one of "
                         f"{', '.join(shipped)}")
    return path


def resolve_gavel_trace(spec: str | Path) -> Path:
    """A ``.trace`` path, or the name of a shipped one."""
    path = Path(spec)
    if path.exists() or path.suffix == ".trace" and path.parent != Path("."):
        return path
    return shipped_gavel_trace(str(spec))


def philly_scale_factor(rng: random.Random) -> int:
    """Gavel's Philly-derived scale factor: 1 (70 %), 2 (10 %), 4 (15 %), 8 (5 %)."""
    r = rng.uniform(0, 1)
    if 0.7 <= r <= 0.8:
        return 2
    if 0.8 <= r <= 0.95:
        return 4
    if 0.95 <= r:
        return 8
    return 1


def philly_duration(rng: random.Random) -> float:
    """Gavel's Philly-derived duration on a V100, seconds: 20 % long (10**3 to 10**4 minutes),
    80 % short (10**1.5 to 10**3 minutes), log-uniform."""
    if rng.random() >= 0.8:
        return 60 * (10 ** rng.uniform(3, 4))
    return 60 * (10 ** rng.uniform(1.5, 3))


def generate_continuous_jobs(jobs_per_hour: float, seed: int = 0, multi_gpu: bool = False,
                             table: ThroughputTable | None = None,
                             reference_gpu: str = "v100") -> Iterator[TableJobSpec]:
    """Gavel's continuous arrivals, without end: job ``i`` is named ``str(i)``.

    Args:
        jobs_per_hour: Poisson arrival rate (> 0).
        seed: Gavel's seed; job parameters come from ``Random(seed + 2)``, arrival gaps from
            ``Random(seed + 3)``.
        multi_gpu: draw scale factors from the Philly mix (else every job has 1 GPU; the draw is
            still made, as in Gavel, so both settings see the same durations and types).
        table: measured throughputs (steps = duration x the reference GPU's steps/s).
        reference_gpu: the GPU type durations refer to.
    """
    if not (math.isfinite(jobs_per_hour) and jobs_per_hour > 0):
        raise InputError(f"arrival rate {jobs_per_hour!r} jobs/h: expected a number > 0")
    table = table or load_gavel_throughputs()
    templates = gavel_job_types()
    jobs = random.Random(seed + 2)
    gaps = random.Random(seed + 3)
    mean_gap = 3600.0 / jobs_per_hour
    arrival = 0.0
    index = 0
    while True:
        scale_factor = philly_scale_factor(jobs)
        duration = philly_duration(jobs)
        if not multi_gpu:
            scale_factor = 1
        while True:
            job_type, distributed = jobs.choice(templates)
            if scale_factor == 1 or distributed:
                break
        rate = table.steps_per_second(job_type, scale_factor, reference_gpu)
        if not rate:
            raise InputError(f"job type '{job_type}' has no {reference_gpu} throughput at scale "
                             f"factor {scale_factor}: expected a complete reference table")
        yield make_job(str(index), arrival, job_type, scale_factor, duration * rate)
        index += 1
        arrival += -math.log(1.0 - gaps.random()) * mean_gap
