"""Prometheus conventions: our own prefix and port, base units, labels, pod/container from cgroups."""

from __future__ import annotations

import os
import re

from collectors import DEFAULT_PROMETHEUS_PORT
from collectors.cgroup import Workload, parse_cgroup, workload_of
from counters.catalog import CATALOG, PROMETHEUS_PREFIX

POD = "0f7c2a4e-1b2c-4d5e-8f90-a1b2c3d4e5f6"
CONTAINER = "3c5e" + "ab" * 30


def test_every_exported_name_is_ours_and_follows_prometheus_naming() -> None:
    name_rule = re.compile(r"^[a-z_][a-z0-9_]*$")
    # Stored only: Prometheus gets it per process (one name, one label set).
    assert [c.name for c in CATALOG.values() if not c.prometheus_name] == [
        "gpu_process_memory_used"]
    for counter in CATALOG.values():
        name = counter.prometheus_name
        if not name:
            continue
        assert name.startswith(PROMETHEUS_PREFIX) and name_rule.match(name), name
        # Never node_exporter's or dcgm-exporter's names: ours mean other things.
        assert not name.startswith(("node_", "DCGM_")), name
        assert name.endswith("_total") == (counter.kind == "counter"), name
        unit_suffix = {"byte": "_bytes", "s": "_seconds", "J": "_joules", "W": "_watts",
                       "Hz": "_hertz", "degC": "_celsius", "byte s-1": "_bytes_per_second"}
        if counter.units in unit_suffix:
            assert unit_suffix[counter.units] in name, name
        if counter.units == "1" and counter.kind == "gauge" and "utilization" in counter.name:
            assert name.endswith("_ratio"), name
    # dcgm-exporter's 9400 and node_exporter's 9100 stay free for them.
    assert DEFAULT_PROMETHEUS_PORT not in (9100, 9400) and DEFAULT_PROMETHEUS_PORT > 1024


def test_pod_and_container_come_from_either_cgroup_driver() -> None:
    cgroupfs = f"12:memory:/kubepods/burstable/pod{POD}/{CONTAINER}\n0::/\n"
    systemd = ("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
               f"{POD.replace('-', '_')}.slice/cri-containerd-{CONTAINER}.scope\n")
    crio = f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CONTAINER}.scope\n"
    docker = f"0::/system.slice/docker-{CONTAINER}.scope\n"
    assert parse_cgroup(cgroupfs) == Workload(POD, CONTAINER)
    assert parse_cgroup(systemd) == Workload(POD, CONTAINER)
    assert parse_cgroup(crio) == Workload(POD, CONTAINER)
    assert parse_cgroup(docker) == Workload("", CONTAINER)
    assert parse_cgroup("0::/user.slice/user-1000.slice/session-3.scope\n") == Workload()
    # A real process (this one) is read without error; a pid that does not exist is no pod.
    assert isinstance(workload_of(os.getpid()), Workload)
    assert workload_of(2**22 + 12345) == Workload()
