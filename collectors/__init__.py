"""Node collectors (NVML, PCIe, perf, procfs) writing counters datasets and a Prometheus endpoint.

Depends on :mod:`counters` only.
"""
