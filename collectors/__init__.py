"""Node collectors (NVML, PCIe, perf, procfs) writing counters datasets and a Prometheus endpoint.

Depends on :mod:`counters` only, and never imports torch or pyro: a collector-only node installs
``bayes-sched[collector]``.
"""

#: The collector's Prometheus port (``bayes-sched collect --prometheus``): not 9400 (dcgm-exporter),
#: 9100 (node_exporter) nor any other port of Prometheus's default-port allocation list.
DEFAULT_PROMETHEUS_PORT = 10451
