"""procfs source against this machine's real /proc, and against a copy with parts missing."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np

from collectors.procfs import ProcfsSource, parse_diskstats, parse_net_dev
from counters.catalog import CATALOG


def test_reads_the_real_proc_and_counters_move_forward() -> None:
    source = ProcfsSource()
    found = source.discover()
    expected = {"cpu_user", "cpu_idle", "memory_total", "network_rx", "disk_read"}
    assert expected <= set(found.counters)
    assert all(CATALOG[name].source == "procfs" for name in found.counters)
    first = source.sample()
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:  # burn CPU so user time advances
        sum(range(10_000))
    second = source.sample()
    assert set(first) == set(found.counters)
    page_bytes = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert abs(first["memory_total"] - page_bytes) / page_bytes < 0.05
    for name in found.counters:
        assert np.isfinite(first[name]), name
        if CATALOG[name].kind == "counter":
            assert second[name] >= first[name], name
    # Under `nice` (as a loaded CI may run) the burn is counted as nice time, not user time.
    busy = sum(second[f"cpu_{m}"] - first[f"cpu_{m}"] for m in ("user", "nice", "system"))
    assert busy > 0.05
    if os.path.exists("/proc/pressure/cpu"):
        assert "pressure_cpu_some" in found.counters


def test_missing_pressure_files_are_reported_with_the_reason(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    for name in ("stat", "meminfo", "diskstats"):
        shutil.copy(f"/proc/{name}", proc / name)
    shutil.copy("/proc/net/dev", proc / "net" / "dev")
    source = ProcfsSource(proc=str(proc))
    found = source.discover()
    assert "cpu_user" in found.counters and "pressure_io_full" not in found.counters
    assert "CONFIG_PSI" in found.unavailable["pressure_io_full"]
    assert any("pressure_cpu_some" in line and "CONFIG_PSI" in line for line in found.lines())
    (proc / "stat").unlink()  # vanishes while running: NaN, not zero
    assert np.isnan(source.sample()["cpu_user"])


def test_parsers_skip_loopback_and_partitions() -> None:
    net = ("Inter-| header\n face |bytes ...\n"
           "    lo: 5000 1 0 0 0 0 0 0 5000 1 0 0 0 0 0 0\n"
           "  eth0: 1000 2 0 0 0 0 0 0  300 3 0 0 0 0 0 0\n"
           "  eth1:   24 2 0 0 0 0 0 0    6 3 0 0 0 0 0 0\n")
    assert parse_net_dev(net) == {"network_rx": 1024.0, "network_tx": 306.0}
    disk = ("   8       0 sda 10 0 100 5 20 0 200 7 0 9 12 0 0 0 0\n"
            "   8       1 sda1 10 0 100 5 20 0 200 7 0 9 12 0 0 0 0\n")
    assert parse_diskstats(disk, {"sda"}) == {"disk_read": 51200.0, "disk_written": 102400.0}
