"""GPU types: the built-in table's published figures, device names, and types a cluster file
declares."""

from __future__ import annotations

import math

import pytest

from bayes_sched.errors import InputError
from bayes_sched.gpu_types import (
    GPU_TYPES,
    declared_gpu_type,
    gpu_catalog,
    gpu_type,
    gpu_type_of_device,
)


def test_built_in_table_has_the_issue_39_types_with_published_figures() -> None:
    for name in ("a100", "h100", "l4", "a10", "rtx2080ti", "rtx6000", "t4", "v100"):
        gpu = GPU_TYPES[name]
        assert gpu.memory_bytes > 0 and gpu.peak_flops > 1e12
        assert gpu.interconnect in ("pcie", "nvlink") and gpu.link_bandwidth > 1e10
    assert GPU_TYPES["h100"].peak_tensor_flops > GPU_TYPES["a100"].peak_tensor_flops
    assert GPU_TYPES["v100"].interconnect == "nvlink" and GPU_TYPES["t4"].interconnect == "pcie"
    links = GPU_TYPES["t4"].links(6.25e9, 4)
    assert (links.within, links.across, links.gpus_per_node) == (15.75e9, 6.25e9, 4)
    with pytest.raises(InputError, match="peer link bandwidth is unknown"):
        GPU_TYPES["cpu"].links(1e9, 1)


@pytest.mark.parametrize(("device", "expected"), [
    ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti"), ("Quadro RTX 6000", "rtx6000"),
    ("NVIDIA RTX 6000 Ada Generation", None), ("NVIDIA A10", "a10"), ("NVIDIA A10G", "a10g"),
    ("NVIDIA A100-SXM4-40GB", "a100")])
def test_several_word_device_names_map_onto_their_type(device: str, expected: str | None) -> None:
    assert gpu_type_of_device(device) == expected


def test_a_cluster_file_may_declare_a_type_beside_the_built_in_ones() -> None:
    declared = declared_gpu_type({"name": "mi250x", "memory_gib": 64, "peak_tflops": 47.9,
                                  "interconnect": "pcie", "link_gbytes_per_s": 31.5},
                                 "gpu_types[0]")
    assert declared.memory_bytes == 64 * 2**30 and declared.peak_flops == pytest.approx(47.9e12)
    assert math.isnan(declared.peak_tensor_flops)
    catalog = gpu_catalog((declared,))
    assert gpu_type("mi250x", catalog=catalog) is declared and "t4" in catalog
    with pytest.raises(InputError, match="unknown GPU type 'mi250x'"):
        gpu_type("mi250x")
    with pytest.raises(InputError, match="declared twice"):
        gpu_catalog((declared, declared))
    for table, match in (({"name": "t4", "memory_gib": 16}, r"gpu_types\[0\].name: 't4' is a "
                                                             "built-in"),
                         ({"name": "x", "memory_gib": -1}, r"gpu_types\[0\].memory_gib"),
                         ({"name": "x", "memory_gib": 8, "interconnect": "pci"},
                          "interconnect"),
                         ({"name": "x", "memory_gib": 8, "nic": 1}, r"gpu_types\[0\].nic"),
                         ({"name": "Bad Name", "memory_gib": 8}, "name"),
                         ({"name": "x", "memory_gib": 8, "peak_tflops": 1e9}, "peak_tflops")):
        with pytest.raises(InputError, match=match):
            declared_gpu_type(table, "gpu_types[0]")
