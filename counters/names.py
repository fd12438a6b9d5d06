"""Names the counters schema and the store directory share, importable without xarray (the
collector's process journals into a store without loading it; see :mod:`counters.storedir`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TIME, NODE, DEVICE = "time", "node", "device"
SCHEMA_NAME = "bayes-sched-counters"
SCHEMA_VERSION = 1


def whole_microseconds(seconds: float | np.ndarray | Sequence[float]) -> np.ndarray:
    """Seconds since the epoch as the store keeps them: whole microseconds (rounded, half to
    even), float64, the shape of ``seconds``. Two times are the same sample time when these
    are equal, so a later sample must be later here."""
    return np.round(np.asarray(seconds, dtype=np.float64) * 1e6)
