"""Topology discovery from sysfs (a real directory tree of files and symlinks laid out like an
8-GPU DGX-1 node, and this machine's own /sys) and from NVML (the real pynvml ctypes code against a
stand-in libnvidia-ml.so.1 compiled here from NVIDIA's nvml.h)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bayes_sched.contention.discovery import discover_sysfs, discover_topology
from bayes_sched.topology import NodeTopology, TopologyError, read_topology
from tests.nvml_standin import FIXTURES, compile_standin, standin_environment

ROOT = Path(__file__).resolve().parents[1]
STANDIN_SOURCE = FIXTURES / "standin_topology.c"
GPU_BUSES = ("06", "07", "0a", "0b", "85", "86", "89", "8a")
#: PCIe gen 3 x16, both directions: 2 x 16 lanes x 8 GT/s x 128/130 / 8 bit.
GEN3_X16 = 2 * 16 * 8e9 / 8 * 128 / 130


def pci_device(
    sysfs: Path, chain: list[str], vendor: str, pci_class: str, numa: int, speed: str = "8.0 GT/s PCIe"
) -> Path:
    """Create ``<sysfs>/devices/<chain...>`` with its attribute files and the bus symlink."""
    folder = sysfs / "devices" / Path(*chain)
    folder.mkdir(parents=True, exist_ok=True)
    for name, value in {
        "vendor": vendor,
        "class": pci_class,
        "numa_node": str(numa),
        "max_link_speed": speed,
        "max_link_width": "16",
    }.items():
        (folder / name).write_text(value + "\n")
    bus = sysfs / "bus" / "pci" / "devices"
    bus.mkdir(parents=True, exist_ok=True)
    link = bus / chain[-1]
    if not link.exists():
        link.symlink_to(os.path.relpath(folder, bus))
    return folder


def class_entry(sysfs: Path, kind: str, name: str, target: Path) -> None:
    folder = sysfs / "class" / kind
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).symlink_to(os.path.relpath(target, folder))


def dgx1_sysfs(root: Path, interleave: bool = False) -> Path:
    """A DGX-1-like sysfs: 4 PLX switches (2 per CPU socket), 2 GPUs and an IB HCA behind
    each of switches 0 and 2, an onboard Ethernet port, lo. With ``interleave`` GPUs 1 and 2 swap
    switches, a layout ``gpus_per_switch`` cannot describe."""
    sysfs = root / "sys"
    # (root port, switch upstream port, downstream bus, HCA bus or None) per switch.
    switches = [
        ("0000:00:02.0", "0000:02:00.0", "03", "05"),
        ("0000:00:03.0", "0000:08:00.0", "09", None),
        ("0000:80:02.0", "0000:82:00.0", "83", "84"),
        ("0000:80:03.0", "0000:87:00.0", "88", None),
    ]
    for switch, (root_port, upstream, down_bus, hca_bus) in enumerate(switches):
        numa = switch // 2
        domain = "pci0000:00" if numa == 0 else "pci0000:80"
        pci_device(sysfs, [domain, root_port], "0x8086", "0x060400", numa)
        pci_device(sysfs, [domain, root_port, upstream], "0x10b5", "0x060400", numa)
        for slot in range(2):
            gpu = 2 * switch + slot
            if interleave and gpu in (1, 2):
                gpu = 3 - gpu
            downstream = f"0000:{down_bus}:{8 * (slot + 1):02x}.0"
            chain = [domain, root_port, upstream, downstream, f"0000:{GPU_BUSES[gpu]}:00.0"]
            pci_device(sysfs, chain[:-1], "0x10b5", "0x060400", numa)
            pci_device(sysfs, chain, "0x10de", "0x030200", numa)
        if hca_bus is not None:
            downstream = f"0000:{down_bus}:18.0"
            hca = pci_device(
                sysfs,
                [domain, root_port, upstream, downstream, f"0000:{hca_bus}:00.0"],
                "0x15b3",
                "0x020700",
                numa,
            )
            name = f"mlx5_{switch // 2}"
            port = hca / "infiniband" / name / "ports" / "1"
            port.mkdir(parents=True)
            (port / "rate").write_text("100 Gb/sec (4X EDR)\n")
            (hca / "infiniband" / name / "device").symlink_to("../..")
            class_entry(sysfs, "infiniband", name, hca / "infiniband" / name)
            ipoib = hca / "net" / f"ib{switch // 2}"
            ipoib.mkdir(parents=True)
            (ipoib / "speed").write_text("100000\n")
            (ipoib / "device").symlink_to("../..")
            class_entry(sysfs, "net", ipoib.name, ipoib)
    onboard = pci_device(sysfs, ["pci0000:00", "0000:00:1c.0", "0000:08:00.0"], "0x8086", "0x020000", 0)
    eno1 = onboard / "net" / "eno1"
    eno1.mkdir(parents=True)
    (eno1 / "speed").write_text("10000\n")
    (eno1 / "device").symlink_to("../..")
    class_entry(sysfs, "net", "eno1", eno1)
    lo = sysfs / "devices" / "virtual" / "net" / "lo"
    lo.mkdir(parents=True)
    class_entry(sysfs, "net", "lo", lo)
    return sysfs


def test_dgx1_layout_from_sysfs(tmp_path: Path) -> None:
    found = discover_sysfs(dgx1_sysfs(tmp_path))
    assert found.source == "sysfs"
    assert found.gpus == tuple(f"0000:{b}:00.0" for b in GPU_BUSES)
    assert found.topology.gpus_per_switch == (2, 2, 2, 2)
    assert found.topology.switch_numa == (0, 0, 1, 1)
    assert found.switches == ("0000:02:00.0", "0000:08:00.0", "0000:82:00.0", "0000:87:00.0")
    assert found.topology.pcie_switch_capacity == pytest.approx(GEN3_X16)
    # Two EDR HCAs and a 10 GbE port; IPoIB is the HCAs again, lo has no hardware.
    assert found.nics == ("mlx5_0", "mlx5_1", "eno1")
    assert found.topology.nic_capacity == pytest.approx((2 * 100e9 + 10e9) / 8)
    assert found.topology.dram_capacity == NodeTopology().dram_capacity
    assert any("dram_capacity" in note for note in found.notes)


def test_switch_groups_not_contiguous_in_device_order_are_an_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="not next to it in device order"):
        discover_sysfs(dgx1_sysfs(tmp_path, interleave=True))


def test_this_machines_sysfs_says_cleanly_when_there_is_no_gpu() -> None:
    devices = Path("/sys/bus/pci/devices")
    if not devices.is_dir():
        pytest.skip("no sysfs on this machine")
    has_gpu = any(
        (entry / "vendor").read_text().strip() == "0x10de" for entry in devices.iterdir()
    )
    if has_gpu:
        assert discover_sysfs("/sys").topology.num_gpus >= 1
    else:
        with pytest.raises(TopologyError, match="no NVIDIA GPU"):
            discover_sysfs("/sys")


def test_missing_sysfs_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(TopologyError, match="no such directory"):
        discover_topology(tmp_path / "nowhere", use_nvml=False)


PROBE = """
import json, sys
from bayes_sched.contention.discovery import discover_topology
found = discover_topology(sys.argv[1])
print(json.dumps({"topology": json.loads(found.topology.to_json()), "source": found.source,
                  "gpus": found.gpus, "nics": found.nics, "notes": found.notes}))
"""


@pytest.fixture(scope="module")
def nvml_standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_standin(STANDIN_SOURCE, tmp_path_factory.mktemp("nvml-topology"))


def probe(library_dir: Path, sysfs: Path, **extra: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", PROBE, str(sysfs)], capture_output=True, text=True,
        env=standin_environment(library_dir, **extra), timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_nvml_topology_groups_gpus_by_common_ancestor(nvml_standin: Path, tmp_path: Path) -> None:
    # sysfs here has NICs but no GPUs: the GPU layout must come from NVML.
    sysfs = dgx1_sysfs(tmp_path)
    shutil.rmtree(sysfs / "bus")
    found = probe(nvml_standin, sysfs)
    assert found["source"] == "nvml"
    assert found["gpus"] == [f"0000:{b}:00.0" for b in GPU_BUSES]
    assert found["topology"]["gpus_per_switch"] == [2, 2, 2, 2]
    assert found["topology"]["switch_numa"] == [0, 0, 1, 1]
    assert found["topology"]["pcie_switch_capacity"] == pytest.approx(GEN3_X16)
    assert found["topology"]["nic_capacity"] == pytest.approx((2 * 100e9 + 10e9) / 8)


def test_nvml_without_numa_support_notes_the_assumption(nvml_standin: Path, tmp_path: Path) -> None:
    found = probe(nvml_standin, dgx1_sysfs(tmp_path), STANDIN_NVML_NUMA="unsupported")
    assert found["topology"]["switch_numa"] == [0, 0, 0, 0]
    assert sum("NUMA node unknown" in note for note in found["notes"]) == 4


def test_nvml_failing_falls_back_to_sysfs(nvml_standin: Path, tmp_path: Path) -> None:
    found = probe(nvml_standin, dgx1_sysfs(tmp_path), STANDIN_NVML_INIT="driver_not_loaded")
    assert found["source"] == "sysfs"
    assert found["topology"]["gpus_per_switch"] == [2, 2, 2, 2]
    assert any("Driver Not Loaded" in note for note in found["notes"])


def bayes_sched(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LD_LIBRARY_PATH": ""}
    return subprocess.run(
        [sys.executable, "-m", "bayes_sched", *args], capture_output=True, text=True, env=env,
        cwd=ROOT, timeout=120,
    )  # fmt: skip


def test_cli_writes_a_topology_file_that_contention_reads(tmp_path: Path) -> None:
    sysfs = dgx1_sysfs(tmp_path)
    out = tmp_path / "topology.json"
    done = bayes_sched(
        "infer", "topology", "--sysfs-root", str(sysfs), "--no-nvml", "--json", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr
    assert read_topology(out) == discover_sysfs(sysfs).topology
    assert json.loads(done.stdout)["gpus_per_switch"] == [2, 2, 2, 2]
    again = bayes_sched("infer", "topology", "--sysfs-root", str(sysfs), "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr
    empty = tmp_path / "empty-sys" / "bus" / "pci" / "devices"
    empty.mkdir(parents=True)
    none = bayes_sched("infer", "topology", "--sysfs-root", str(empty.parents[2]), "--no-nvml")
    assert none.returncode == 2
    assert none.stderr.startswith("bayes-sched: error:") and "no NVIDIA GPU" in none.stderr
