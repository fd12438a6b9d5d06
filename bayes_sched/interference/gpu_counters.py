"""Solo features from GPU counter logs: ``nvidia-smi`` or DCGM CSV files, one per job run alone.

A user measuring co-locations on their own cluster runs each job alone once with a counter log,
then in pairs; this module turns the logs into the solo-features table the co-location models read
(:mod:`.tables`: one row per job, numeric columns). Two formats, told apart by their header:

* ``nvidia-smi --query-gpu=timestamp,utilization.gpu,utilization.memory,memory.used
  --format=csv -l 1`` (any subset in any order, more fields allowed): headers such as
  ``utilization.gpu [%]``, cells such as ``45 %`` and ``1234 MiB``;
* DCGM, a CSV whose header names DCGM fields, by their field names (``DCGM_FI_DEV_GPU_UTIL``) or
  the short names ``dcgmi dmon`` prints (``GPUTL``): GPU and memory-copy utilisation (%), frame
  buffer used (MiB), and the profiling fields SM active and DRAM active (fractions 0-1) and
  PCIe transmit/receive (byte/s).

Features, each the median over the log's rows (a job's steady state, robust to start-up rows):
``gpu_util`` and ``mem_util`` (fractions), ``mem_used_gib``, and where DCGM logged them
``sm_active``, ``dram_active`` and ``pcie_gbytes_per_s`` (transmit plus receive). Every job's log
must carry the same features (a model needs the same columns for every job). A cell that is not
a number (``[N/A]``, ``[Not Supported]``) is an error naming the file, row and column.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_sched.interference.tables import InterferenceInputError, check_solo_features
from perfmodel import textio

_MIB_PER_GIB = 1024.0


def _percent(value: float) -> float:
    return value / 100.0


def _mib(value: float) -> float:
    return value / _MIB_PER_GIB


def _same(value: float) -> float:
    return value


def _bytes_per_s(value: float) -> float:
    return value / 1e9


#: Column of the log (lower case, unit suffix dropped) -> (feature, conversion to its unit).
_SOURCES: Mapping[str, tuple[str, Callable[[float], float]]] = {
    "utilization.gpu": ("gpu_util", _percent),
    "utilization.memory": ("mem_util", _percent),
    "memory.used": ("mem_used_gib", _mib),
    "dcgm_fi_dev_gpu_util": ("gpu_util", _percent), "gputl": ("gpu_util", _percent),
    "dcgm_fi_dev_mem_copy_util": ("mem_util", _percent), "mcutl": ("mem_util", _percent),
    "dcgm_fi_dev_fb_used": ("mem_used_gib", _mib), "fbusd": ("mem_used_gib", _mib),
    "dcgm_fi_prof_sm_active": ("sm_active", _same), "smact": ("sm_active", _same),
    "dcgm_fi_prof_dram_active": ("dram_active", _same), "drama": ("dram_active", _same),
    "dcgm_fi_prof_pcie_tx_bytes": ("pcie_gbytes_per_s", _bytes_per_s),
    "pcitx": ("pcie_gbytes_per_s", _bytes_per_s),
    "dcgm_fi_prof_pcie_rx_bytes": ("pcie_gbytes_per_s", _bytes_per_s),
    "pcirx": ("pcie_gbytes_per_s", _bytes_per_s),
}
_UNITS = ("%", "mib", "w", "mhz")


def _column_key(header: str) -> str:
    # "utilization.gpu [%]" -> "utilization.gpu"
    return header.split("[", 1)[0].strip().lower()


def _number(cell: str) -> float:
    text = cell.strip().lower()
    for unit in _UNITS:
        if text.endswith(unit):
            text = text[: -len(unit)].strip()
            break
    value = float(text)
    if not math.isfinite(value) or value < 0:
        raise ValueError
    return value


def counter_features(path: str | PathLike[str]) -> dict[str, float]:
    """The features of one job's counter log (see the module docstring), by name."""
    table = textio.read_csv(Path(path))
    columns: dict[str, list[float]] = {}
    for position, header in enumerate(table.header):
        source = _SOURCES.get(_column_key(header))
        if source is None:
            continue
        feature, convert = source
        values = []
        for row, cells in table.rows:
            try:
                values.append(convert(_number(cells[position])))
            except (ValueError, IndexError):
                raise InterferenceInputError(
                    f"{path}: row {row}, column {header.strip()!r}: "
                    f"{cells[position] if position < len(cells) else ''!r}; expected a "
                    "non-negative number (with its unit)") from None
        if feature in columns:   # PCIe transmit + receive
            columns[feature] = [a + b for a, b in zip(columns[feature], values, strict=True)]
        else:
            columns[feature] = values
    if not columns:
        raise InterferenceInputError(
            f"{path}: no GPU counter column; expected nvidia-smi --query-gpu fields "
            "(utilization.gpu, utilization.memory, memory.used) or DCGM fields")
    if not table.rows:
        raise InterferenceInputError(f"{path}: no data rows after the header")
    return {feature: float(np.median(values)) for feature, values in columns.items()}


def solo_features_from_counters(logs: Mapping[str, str | PathLike[str]]) -> pd.DataFrame:
    """The solo-features table (indexed by job) of jobs whose solo-run counter logs are
    ``logs`` (job name -> file). Raises :class:`InterferenceInputError` where a log cannot be
    read or where two logs carry different features."""
    if not logs:
        raise InterferenceInputError("no counter logs: expected one file per job")
    rows = []
    features: tuple[str, ...] | None = None
    first = ""
    for job, path in logs.items():
        found = counter_features(Path(path))
        if features is None:
            features, first = tuple(sorted(found)), str(path)
        elif tuple(sorted(found)) != features:
            raise InterferenceInputError(
                f"{path}: features {', '.join(sorted(found))}; expected the same as {first} "
                f"({', '.join(features)})")
        rows.append({"job": job, **found})
    return check_solo_features(pd.DataFrame(rows), source="counter logs")
