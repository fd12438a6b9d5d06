"""PCIe sysfs source: a sysfs tree in the kernel's formats, and this machine's real /sys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectors.pcie import PcieSysfsSource, find_gpus, normalize_bus_id, parse_link_speed

AER_CORRECTABLE = ("RxErr 0\nBadTLP 2\nBadDLLP 1\nRollover 0\nTimeout 0\nNonFatalErr 0\n"
                   "CorrIntErr 0\nHeaderOF 0\nTOTAL_ERR_COR {total}\n")
AER_FATAL = ("Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO 0\nCmpltAbrt 0\nUnxCmplt 0\n"
             "RxOF 0\nMalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
             "AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\nTOTAL_ERR_FATAL 0\n")


def make_device(root: Path, address: str, vendor: str, klass: str, speed: str, width: str,
                aer: bool) -> Path:
    device = root / "bus" / "pci" / "devices" / address
    device.mkdir(parents=True)
    (device / "vendor").write_text(f"{vendor}\n")
    (device / "class").write_text(f"{klass}\n")
    (device / "current_link_speed").write_text(f"{speed}\n")
    (device / "max_link_speed").write_text("32.0 GT/s PCIe\n")
    (device / "current_link_width").write_text(f"{width}\n")
    (device / "max_link_width").write_text("16\n")
    if aer:
        (device / "aer_dev_correctable").write_text(AER_CORRECTABLE.format(total=3))
        (device / "aer_dev_fatal").write_text(AER_FATAL)
    return device


def test_reads_link_state_and_aer_counters_of_nvidia_gpus(tmp_path: Path) -> None:
    make_device(tmp_path, "0000:c1:00.0", "0x10de", "0x030200", "16.0 GT/s PCIe", "8", aer=False)
    first = make_device(tmp_path, "0000:41:00.0", "0x10de", "0x030200", "32.0 GT/s PCIe", "16",
                        aer=True)
    make_device(tmp_path, "0000:01:00.0", "0x15b3", "0x020700", "16.0 GT/s PCIe", "16", aer=True)
    assert find_gpus(str(tmp_path)) == ["0000:41:00.0", "0000:c1:00.0"]
    source = PcieSysfsSource(sys_root=str(tmp_path))
    found = source.discover()
    assert found.devices is not None and found.devices.count == 2
    assert "pcie_aer_correctable_errors" in found.counters
    assert "pcie_aer_nonfatal_errors" in found.unavailable  # no aer_dev_nonfatal anywhere
    assert any("not readable for 0000:c1:00.0" in note for note in found.notes)
    values = source.sample()
    np.testing.assert_array_equal(values["pcie_link_speed"], [32e9, 16e9])
    np.testing.assert_array_equal(values["pcie_link_width"], [16.0, 8.0])
    np.testing.assert_array_equal(values["pcie_aer_correctable_errors"], [3.0, np.nan])
    (first / "aer_dev_correctable").write_text(AER_CORRECTABLE.format(total=7))
    (first / "current_link_speed").write_text("Unknown\n")  # link retraining
    values = source.sample()
    assert values["pcie_aer_correctable_errors"][0] == 7.0
    assert np.isnan(values["pcie_link_speed"][0])


def test_this_machine_says_why_it_has_nothing_to_read() -> None:
    found = PcieSysfsSource().discover()
    if find_gpus():
        pytest.skip("this machine has NVIDIA GPUs")
    assert found.counters == []
    assert "no NVIDIA GPU PCI functions" in found.unavailable["pcie_link_speed"]


def test_a_real_non_express_device_is_explained(tmp_path: Path) -> None:
    devices = sorted(Path("/sys/bus/pci/devices").glob("*"))
    plain = [d for d in devices if not (d / "current_link_speed").exists()]
    if not plain:
        pytest.skip("every PCI device here is PCI Express")
    found = PcieSysfsSource([plain[0].name]).discover()
    assert "not a PCI Express device" in found.unavailable["pcie_link_speed"]


def test_bus_id_forms_and_speed_text() -> None:
    assert normalize_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalize_bus_id("0000:3b:00.0") == "0000:3b:00.0"
    assert parse_link_speed("8 GT/s") == 8e9
    assert parse_link_speed("2.5 GT/s PCIe") == 2.5e9
    assert np.isnan(parse_link_speed("Unknown speed"))
