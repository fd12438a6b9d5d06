"""Read and validate step-time profiles and gradient-statistics traces.

Three step-time formats are understood, told apart by their header:

* Pollux ``placements.csv``: ``placement,local_bsz,step_time,sync_time`` where ``placement`` is a
  digit string with one digit per node (GPUs used on that node, e.g. ``"22"``);
* Pollux ``scalability.csv``: ``num_nodes,num_replicas,local_bsz,step_time,sync_time``;
* the project's own profile format, written by the job agent and the collectors:
  ``num_nodes,num_replicas,local_bsz,accum_steps,step_time,sync_time`` with optional ``placement``.

Times are seconds per iteration. ``sync_time`` is the part of ``step_time`` spent synchronising
gradients, so ``step_time - sync_time`` is the compute (accumulation) time of one micro-step.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from perfmodel import textio
from perfmodel.datasets import POLLUX_MODELS, pollux_model_dir
from perfmodel.errors import InputError

PLACEMENTS_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
PROFILE_COLUMNS = (
    "num_nodes", "num_replicas", "local_bsz", "accum_steps", "step_time", "sync_time",
)
VALIDATION_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")

#: Key of :func:`read_table`'s result holding the file row number of each row.
ROW = "_row"
_PLACEMENT = re.compile(r"^[0-9]+$")
#: ``log phi`` is capped here (phi ~ 1e304) before exponentiating: efficiency is 1 to float
#: precision long before, and the cap keeps phi finite.
MAX_LOG_NOISE = 700.0
#: Largest ``grad_sqr`` or ``grad_var`` a trace may hold: the float32 maximum. Pollux (AdaptDL)
#: computes both as sums over float32 gradients on the GPU, so a larger figure cannot be a
#: measurement: it is an overflow or a corrupt row, and one such row would dominate the fitted
#: noise scale (efficiency 1 everywhere).
MAX_GRAD_STATISTIC = float(np.finfo(np.float32).max)


# --- cell parsers: each returns the parsed value or raises ValueError with what was expected -----

def _placement(text: str) -> str:
    text = text.strip()
    if (not _PLACEMENT.match(text) or len(text) > textio.MAX_GPUS
            or sum(int(c) for c in text) == 0):
        raise ValueError("expected a digit string with GPUs per node, e.g. '22'")
    return text


_PARSERS: dict[str, Callable[[str], object]] = {
    "placement": _placement,
    "local_bsz": textio.int_parser(1, textio.MAX_BATCH),
    "num_nodes": textio.int_parser(1, textio.MAX_GPUS),
    "num_replicas": textio.int_parser(1, textio.MAX_GPUS),
    "accum_steps": textio.int_parser(0, textio.MAX_ACCUM_STEPS),
    "step_time": textio.float_parser(0.0, textio.MAX_STEP_TIME_S, above_minimum=True),
    "sync_time": textio.float_parser(0.0, textio.MAX_STEP_TIME_S),
    "progress": textio.float_parser(0.0),
    "iteration": textio.float_parser(0.0),
    "metric": textio.float_parser(),
    "grad_sqr": textio.float_parser(0.0, MAX_GRAD_STATISTIC),
    "grad_var": textio.float_parser(0.0, MAX_GRAD_STATISTIC),
}


def read_table(path: str | Path, required: Iterable[str], optional: Iterable[str] = ()
               ) -> dict[str, list]:
    """Read a CSV file, checking that ``required`` columns exist and every cell parses.

    Returns a dict of column name to list of parsed values (only the columns asked for), plus
    :data:`ROW`: each row's 1-based number in the file (the header is row 1), for later messages.
    Raises :class:`InputError` naming file, row and column on the first problem (see
    :mod:`perfmodel.textio` for the encoding, field-count and range checks).
    """
    table = textio.read_csv(path)
    required = tuple(required)
    table.require(required)
    wanted = [c for c in (*required, *optional) if c in table.header]
    columns = textio.parse_cells(table, {c: _PARSERS.get(c, str) for c in wanted})
    columns[ROW] = [row for row, _ in table.rows]
    if not table.rows:
        raise InputError("no data rows after the header", table.path)
    return columns


# --- step-time profiles --------------------------------------------------------------------------

@dataclass(frozen=True)
class StepTimeProfile:
    """Measured step times of one model over configurations; every array has shape ``(N,)``.

    Attributes:
        model: model name.
        num_nodes: nodes spanned.
        num_replicas: GPUs (data-parallel replicas) in all.
        local_bsz: per-GPU micro-batch size ``m``, examples.
        accum_steps: gradient-accumulation steps ``s`` (0 means no accumulation).
        step_time: seconds per optimiser step when ``s == 0``; in general seconds per iteration.
        sync_time: seconds of gradient synchronisation within ``step_time``.
        placement: a label per row grouping rows of one placement (digit string or ``nXrY``).
    """

    model: str
    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    accum_steps: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray
    placement: np.ndarray
    sources: tuple[str, ...] = field(default=())

    def __len__(self) -> int:
        return int(self.step_time.shape[0])

    @property
    def compute_time(self) -> np.ndarray:
        """Seconds of one micro-step of computation (``step_time - sync_time``), shape ``(N,)``."""
        return self.step_time - self.sync_time

    def subset(self, mask: np.ndarray) -> StepTimeProfile:
        """The rows where boolean ``mask`` (shape ``(N,)``) is true."""
        return StepTimeProfile(
            self.model, self.num_nodes[mask], self.num_replicas[mask], self.local_bsz[mask],
            self.accum_steps[mask], self.step_time[mask], self.sync_time[mask],
            self.placement[mask], self.sources,
        )

    @staticmethod
    def concat(profiles: Iterable[StepTimeProfile]) -> StepTimeProfile:
        profiles = list(profiles)
        def cat(name: str) -> np.ndarray:
            return np.concatenate([getattr(p, name) for p in profiles])
        return StepTimeProfile(
            profiles[0].model, cat("num_nodes"), cat("num_replicas"), cat("local_bsz"),
            cat("accum_steps"), cat("step_time"), cat("sync_time"), cat("placement"),
            tuple(s for p in profiles for s in p.sources),
        )


def _check_sync(path: Path, cols: dict[str, list]) -> None:
    step, sync = cols["step_time"], cols["sync_time"]
    for i, (t, s) in enumerate(zip(step, sync, strict=True)):
        if s >= t:
            raise InputError(f"sync_time {s} is not below step_time {t}: expected "
                             "sync_time < step_time", path, cols[ROW][i], "sync_time")


def read_placements_csv(path: str | Path, model: str | None = None) -> StepTimeProfile:
    """Read a Pollux ``placements.csv`` (``placement,local_bsz,step_time,sync_time``)."""
    path = Path(path)
    cols = read_table(path, PLACEMENTS_COLUMNS)
    _check_sync(path, cols)
    placement = np.array(cols["placement"], dtype=object)
    digits = [[int(c) for c in p if c != "0"] for p in placement]
    return StepTimeProfile(
        model or path.parent.name,
        num_nodes=np.array([len(d) for d in digits], dtype=np.int64),
        num_replicas=np.array([sum(d) for d in digits], dtype=np.int64),
        local_bsz=np.array(cols["local_bsz"], dtype=np.int64),
        accum_steps=np.zeros(len(placement), dtype=np.int64),
        step_time=np.array(cols["step_time"], dtype=np.float64),
        sync_time=np.array(cols["sync_time"], dtype=np.float64),
        placement=placement,
        sources=(str(path),),
    )


def _read_counts_csv(path: Path, model: str | None, with_accum: bool) -> StepTimeProfile:
    cols = read_table(path, PROFILE_COLUMNS if with_accum else SCALABILITY_COLUMNS,
                      optional=("placement",))
    _check_sync(path, cols)
    n = len(cols["step_time"])
    nodes = np.array(cols["num_nodes"], dtype=np.int64)
    replicas = np.array(cols["num_replicas"], dtype=np.int64)
    for i in range(n):
        if replicas[i] < nodes[i]:
            raise InputError(f"num_replicas {replicas[i]} is below num_nodes {nodes[i]}: "
                             "expected at least one GPU per node", path, cols[ROW][i],
                             "num_replicas")
    if "placement" in cols:
        placement = np.array(cols["placement"], dtype=object)
    else:
        placement = np.array([f"n{a}r{b}" for a, b in zip(nodes, replicas, strict=True)],
                             dtype=object)
    accum = cols["accum_steps"] if with_accum else [0] * n
    # Pollux files are named by kind inside a folder named for the model; ours by the model.
    default_name = path.stem if with_accum else path.parent.name
    return StepTimeProfile(
        model or default_name, nodes, replicas,
        local_bsz=np.array(cols["local_bsz"], dtype=np.int64),
        accum_steps=np.array(accum, dtype=np.int64),
        step_time=np.array(cols["step_time"], dtype=np.float64),
        sync_time=np.array(cols["sync_time"], dtype=np.float64),
        placement=placement,
        sources=(str(path),),
    )


def read_scalability_csv(path: str | Path, model: str | None = None) -> StepTimeProfile:
    """Read a Pollux ``scalability.csv`` (``num_nodes,num_replicas,local_bsz,step_time,sync_time``)."""
    return _read_counts_csv(Path(path), model, with_accum=False)


def read_profile_csv(path: str | Path, model: str | None = None) -> StepTimeProfile:
    """Read a profile in the project's own format (see the module docstring)."""
    return _read_counts_csv(Path(path), model, with_accum=True)


def read_step_time_profile(path: str | Path, model: str | None = None) -> StepTimeProfile:
    """Read any supported step-time CSV, or every ``placements.csv``/``scalability.csv``/``*.csv``
    profile in a folder; the format is told by the header. A folder of per-type files
    (``placements-<type>.csv``) is refused: :mod:`perfmodel.typed_profiles` reads those."""
    path = Path(path)
    if path.is_dir():
        files = [p for p in sorted(path.glob("*.csv")) if not p.name.startswith("validation-")]
        typed = [p.name for p in files if re.match(r"^(placements|scalability)-", p.name)]
        if typed:
            raise InputError(f"folder holds per-GPU-type profiles ({typed[0]}): expected one "
                             "type's files; read them by type (perfmodel.typed_profiles)", path)
        if not files:
            raise InputError("no step-time CSV files in folder: expected placements.csv, "
                             "scalability.csv or profile CSVs", path)
        return StepTimeProfile.concat(read_step_time_profile(f, model or path.name)
                                      for f in files)
    header = _header(path)
    if "placement" in header and "num_nodes" not in header:
        return read_placements_csv(path, model)
    if "accum_steps" in header:
        return read_profile_csv(path, model)
    if "num_nodes" in header:
        return read_scalability_csv(path, model)
    raise InputError("unknown profile format: expected the columns of placements.csv "
                     f"({', '.join(PLACEMENTS_COLUMNS)}), scalability.csv or the project format "
                     f"({', '.join(PROFILE_COLUMNS)})", path, row=1)


def _header(path: Path) -> tuple[str, ...]:
    return textio.read_csv(path).header


def load_pollux_profile(model: str) -> StepTimeProfile:
    """The shipped Pollux profile of ``model``: placements.csv and scalability.csv together."""
    return read_step_time_profile(pollux_model_dir(model), model)


# --- gradient statistics -------------------------------------------------------------------------

@dataclass(frozen=True)
class GradientTrace:
    """Gradient statistics along one training run at total batch size ``batch_size``.

    Arrays have shape ``(E,)``, one entry per epoch. ``progress`` is training progress in examples
    (the artifact's unit); ``grad_sqr`` and ``grad_var`` are the squared norm and the variance of
    the gradient, both normalised to the model's initial batch size.
    """

    batch_size: int
    progress: np.ndarray
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    source: str = ""

    @property
    def noise_to_signal(self) -> np.ndarray:
        """``grad_var / grad_sqr``: the gradient noise scale in units of the initial batch."""
        return np.exp(np.minimum(self.log_noise_to_signal, MAX_LOG_NOISE))

    @property
    def log_noise_to_signal(self) -> np.ndarray:
        """``log(grad_var / grad_sqr)`` computed as a difference of logs, so that a ratio beyond
        the float range stays finite; ``-inf`` where ``grad_var`` is 0, ``+inf`` where
        ``grad_sqr`` is 0."""
        with np.errstate(divide="ignore"):
            return np.log(self.grad_var) - np.log(self.grad_sqr)


def read_validation_csv(path: str | Path, batch_size: int | None = None) -> GradientTrace:
    """Read a Pollux ``validation-<B>.csv`` (``progress,iteration,metric,grad_sqr,grad_var``)."""
    path = Path(path)
    if batch_size is None:
        match = re.match(r"validation-(\d+)\.csv$", path.name)
        if not match:
            raise InputError("cannot tell the batch size: expected a name like "
                             "validation-<B>.csv or an explicit batch size", path)
        try:
            batch_size = textio.parse_int(match.group(1), 1, textio.MAX_BATCH)
        except ValueError as error:
            raise InputError(f"batch size in the name: {error}", path) from None
    cols = read_table(path, VALIDATION_COLUMNS)
    for i, (sqr, var) in enumerate(zip(cols["grad_sqr"], cols["grad_var"], strict=True)):
        if sqr == 0 and var == 0:
            raise InputError("grad_sqr and grad_var are both 0: expected a positive gradient "
                             "statistic", path, cols[ROW][i], "grad_sqr")
    progress = np.array(cols["progress"], dtype=np.float64)
    if np.any(np.diff(progress) < 0):
        row = cols[ROW][int(np.argmax(np.diff(progress) < 0)) + 1]
        raise InputError("progress decreases: expected rows in training order", path, row,
                         "progress")
    return GradientTrace(
        batch_size, progress,
        np.array(cols["iteration"], dtype=np.float64),
        np.array(cols["metric"], dtype=np.float64),
        np.array(cols["grad_sqr"], dtype=np.float64),
        np.array(cols["grad_var"], dtype=np.float64),
        str(path),
    )


def read_gradient_traces(folder: str | Path) -> dict[int, GradientTrace]:
    """Every ``validation-<B>.csv`` in ``folder``, keyed by batch size ``B`` (ascending)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("not a folder: expected a folder of validation-<B>.csv files", folder)
    files = sorted(folder.glob("validation-*.csv"))
    if not files:
        raise InputError("no validation-<B>.csv files: expected gradient statistics", folder)
    traces: dict[int, GradientTrace] = {}
    for file in files:
        trace = read_validation_csv(file)
        if trace.batch_size in traces:
            raise InputError(f"{Path(traces[trace.batch_size].source).name} and {file.name} both "
                             f"hold batch size {trace.batch_size}: expected one file per batch "
                             "size", folder)
        traces[trace.batch_size] = trace
    return dict(sorted(traces.items()))


def load_pollux_gradients(model: str) -> dict[int, GradientTrace]:
    """The shipped gradient-statistics traces of ``model``, keyed by training batch size."""
    return read_gradient_traces(pollux_model_dir(model))


def resolve_profile(source: str) -> StepTimeProfile:
    """A step-time profile from a CSV file, a folder of them, or a shipped model's name; raises
    :class:`~perfmodel.errors.InputError` naming ``source`` for anything else."""
    path = Path(source)
    if path.exists():
        return read_step_time_profile(path)
    if source in POLLUX_MODELS:
        return read_step_time_profile(pollux_model_dir(source), source)
    raise InputError(f"no such file, folder or shipped model: expected a profile CSV, a folder "
                     f"or one of {', '.join(POLLUX_MODELS)}", source)


def resolve_gradients(source: str) -> dict[int, GradientTrace]:
    """Gradient traces from a validation CSV, a folder of them, or a shipped model's name, by
    batch size; raises :class:`~perfmodel.errors.InputError` naming ``source`` for anything
    else."""
    path = Path(source)
    if path.is_file():
        trace = read_validation_csv(path)
        return {trace.batch_size: trace}
    if path.is_dir():
        return read_gradient_traces(path)
    if source in POLLUX_MODELS:
        return read_gradient_traces(pollux_model_dir(source))
    raise InputError(f"no such file, folder or shipped model: expected validation-<B>.csv, a "
                     f"folder or one of {', '.join(POLLUX_MODELS)}", source)
