"""Names the counters schema and the store directory share, importable without xarray (the
collector's process journals into a store without loading it; see :mod:`counters.storedir`)."""

from __future__ import annotations

TIME, NODE, DEVICE = "time", "node", "device"
SCHEMA_NAME = "bayes-sched-counters"
SCHEMA_VERSION = 1
