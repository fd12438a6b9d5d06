"""The interference model's two input tables, read and checked.

Pairs table (CSV, one row per measured co-location of two jobs)::

    job_a,job_b,speed_a,speed_b
    v100/ResNet-50 (batch size 32),v100/A3C,0.80,0.90

``speed_a`` is job_a's throughput while sharing with job_b divided by its throughput alone
(normalised speed, dimensionless, in (0, 2]; 1 = unaffected, 0.5 = twice as slow), and ``speed_b``
the
same for job_b. Extra columns are kept and ignored. A row and its mirror (job_b, job_a with the
speeds
swapped) describe the same measurement and count once.

Solo-features table (CSV, one row per job)::

    job,log_steps_per_s,log_k80_over_v100,...

``job`` names a job as the pairs table does; every other column is a numeric feature measured while
the job runs alone (throughputs, counter means). Features must be finite; the model standardises
them. :mod:`.gpu_counters` builds this table from ``nvidia-smi`` or DCGM CSV logs of each job's
solo run.
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_sched.errors import InputError
from perfmodel import textio

PAIRS_COLUMNS: tuple[str, ...] = ("job_a", "job_b", "speed_a", "speed_b")
#: Normalised speeds outside (0, MAX_SPEED] are rejected: 0 means "did not run", above 2 is a unit
#: error.
MAX_SPEED = 2.0


class InterferenceInputError(InputError):
    """A pairs or solo-features table that cannot be used; the message names the file, row and
    field."""


def read_pairs_csv(path: str | PathLike[str]) -> pd.DataFrame:
    """Read and check a pairs table (see the module docstring)."""
    frame = _read_csv(path)
    return check_pairs(frame, source=str(path))


def read_solo_features_csv(path: str | PathLike[str]) -> pd.DataFrame:
    """Read and check a solo-features table; returns it indexed by ``job``."""
    frame = _read_csv(path)
    return check_solo_features(frame, source=str(path))


def check_pairs(frame: pd.DataFrame, source: str = "pairs table") -> pd.DataFrame:
    """Check a pairs table; return a copy with float speeds and string job names.

    Rows are reported as CSV line numbers (header = line 1).
    """
    missing = [c for c in PAIRS_COLUMNS if c not in frame.columns]
    if missing:
        raise InterferenceInputError(
            f"missing column(s) {', '.join(missing)}; expected {', '.join(PAIRS_COLUMNS)}",
            source, row=1,
        )
    if len(frame) == 0:
        raise InterferenceInputError("no rows; expected at least one measured pair", source)
    if not frame.columns.is_unique:
        raise InterferenceInputError("a column appears twice; expected unique column names",
                                     source, row=1)
    out = frame.copy()
    for column in ("job_a", "job_b"):
        names = out[column]
        bad = names.isna().to_numpy() | (names.astype(str).str.strip() == "").to_numpy()
        if bad.any():
            raise InterferenceInputError("empty; expected a job name", source,
                                         _row(frame, int(np.flatnonzero(bad)[0])), column)
        out[column] = names.astype(str).str.strip()
    for column in ("speed_a", "speed_b"):
        values = pd.to_numeric(out[column], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(values) | (values <= 0.0) | (values > MAX_SPEED)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InterferenceInputError(
                f"{column}={frame[column].iloc[row]}; expected a normalised speed in "
                f"(0, {MAX_SPEED:g}] (co-located throughput / throughput alone)",
                source, _row(frame, row), column,
            )
        out[column] = values
    return out


def check_pairs_known(pairs: pd.DataFrame, solo: pd.DataFrame, source: str = "pairs table",
                      solo_source: str = "the solo-features table") -> None:
    """Raise naming the pairs file, row and column of the first job of ``pairs`` (as
    :func:`check_pairs` returns it) that has no row in ``solo`` (indexed by job), so a typo or a
    stray ``nan`` is found before the fit, where it is written."""
    for position in range(len(pairs)):
        for column in ("job_a", "job_b"):
            name = pairs[column].iloc[position]
            if name not in solo.index:
                raise InterferenceInputError(
                    f"job {name!r} has no row in {solo_source}: expected a job it lists",
                    source, _row(pairs, position), column)


def _row(frame: pd.DataFrame, position: int) -> int:
    """The 1-based file row (header = row 1) of the ``position``-th row of ``frame``: the row
    numbers :func:`_read_csv` recorded, or ``position + 2`` for a table built in memory."""
    rows = frame.attrs.get("rows")
    return int(rows[position]) if rows is not None and position < len(rows) else position + 2


def check_solo_features(frame: pd.DataFrame, source: str = "solo-features table") -> pd.DataFrame:
    """Check a solo-features table; return it indexed by job with float columns."""
    out = frame.reset_index() if "job" not in frame.columns and frame.index.name == "job" else frame
    if "job" not in out.columns:
        raise InterferenceInputError("missing column job; expected job plus feature columns",
                                     source, row=1)
    if not out.columns.is_unique:
        raise InterferenceInputError("a column appears twice; expected unique column names",
                                     source, row=1)
    features = [c for c in out.columns if c != "job"]
    if not features:
        raise InterferenceInputError("no feature columns besides job", source, row=1)
    empty = out["job"].isna().to_numpy() | (out["job"].astype(str).str.strip() == "").to_numpy()
    if empty.any():
        raise InterferenceInputError("empty; expected a job name", source,
                                     _row(out, int(np.flatnonzero(empty)[0])), "job")
    duplicated = out["job"].duplicated()
    if duplicated.any():
        position = int(np.flatnonzero(duplicated.to_numpy())[0])
        raise InterferenceInputError(
            f"job {out['job'].iloc[position]!r} appears twice; expected one row per job",
            source, _row(out, position), "job",
        )
    values = {}
    for column in features:
        numbers = pd.to_numeric(out[column], errors="coerce").to_numpy(dtype=float)
        bad = ~np.isfinite(numbers)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise InterferenceInputError(
                f"{column}={out[column].iloc[row]}; expected a finite number",
                source, _row(out, row), column,
            )
        values[column] = numbers
    return pd.DataFrame(values, index=pd.Index(out["job"].astype(str), name="job"))


def select_feature_columns(frame: pd.DataFrame, columns: Sequence[str],
                           source: str = "solo-features table") -> pd.DataFrame:
    """The ``job`` column (or index) and the chosen feature ``columns`` of a solo-features table;
    other columns, text ones included, are dropped. A chosen column that is absent is an error."""
    table = frame.reset_index() if "job" not in frame.columns and frame.index.name == "job" \
        else frame
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InterferenceInputError(
            f"{source}: no feature column {missing[0]!r}; columns are "
            f"{', '.join(str(c) for c in table.columns)}")
    if not columns:
        raise InterferenceInputError(f"{source}: no feature columns chosen")
    return table[["job", *columns]] if "job" in table.columns else table[list(columns)]


def pair_observations(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per (target, other) observation: ``target``, ``other``, ``speed``.

    Each pair gives two observations, job_a's speed next to job_b and job_b's next to job_a. A row
    and
    its mirror give the same two observations; exact repeats are dropped so that a table listing
    both
    orders is not counted twice (which would make the posterior overconfident).
    """
    first = pd.DataFrame(
        {"target": pairs["job_a"], "other": pairs["job_b"], "speed": pairs["speed_a"]}
    )
    second = pd.DataFrame(
        {"target": pairs["job_b"], "other": pairs["job_a"], "speed": pairs["speed_b"]}
    )
    both = pd.concat([first, second], ignore_index=True)
    return both.drop_duplicates().reset_index(drop=True)


def _read_csv(path: str | PathLike[str]) -> pd.DataFrame:
    """The table as strings, read through :mod:`perfmodel.textio` (UTF-8, one field per column,
    unique non-empty column names); ``attrs["rows"]`` holds each row's number in the file."""
    table = textio.read_csv(Path(path), InterferenceInputError)
    frame = pd.DataFrame([list(fields) for _, fields in table.rows], columns=list(table.header),
                         dtype=object)
    frame.attrs["rows"] = [row for row, _ in table.rows]
    return frame
