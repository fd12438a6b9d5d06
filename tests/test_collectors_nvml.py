"""NVML through the real pynvml ctypes code, against a stand-in libnvidia-ml.so.1 built here.

The stand-in (tests/fixtures/nvml/standin_nvml.c) is compiled with gcc against NVIDIA's official
nvml.h from the nvidia-nvml-dev package, so its signatures are NVIDIA's; pynvml loads it by name
through LD_LIBRARY_PATH in a fresh process, exactly as it loads the driver's library. No GPU was
available while this was written: these tests do not replace a run on real hardware.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from collectors.nvml import NvmlSource
from counters import schema
from counters.store import open_store
from tests.nvml_standin import FIXTURES, compile_standin, standin_environment

ROOT = Path(__file__).resolve().parents[1]
STANDIN_SOURCE = FIXTURES / "standin_nvml.c"

PROBE = """
import json, sys
from collectors.nvml import NvmlSource
source = NvmlSource()
found = source.discover()
samples = [{k: [None if v != v else v for v in values] for k, values in source.sample().items()}
           for _ in range(int(sys.argv[1]))]
print(json.dumps({"counters": found.counters, "unavailable": found.unavailable,
                  "notes": found.notes, "lost": source.lost_notes, "samples": samples,
                  "devices": None if found.devices is None else vars(found.devices),
                  "processes": {str(k): v for k, v in source.process_usage().items()}}))
source.close()
"""


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the compiled stand-in ``libnvidia-ml.so.1``."""
    return compile_standin(STANDIN_SOURCE, tmp_path_factory.mktemp("nvml"))


def probe(library_dir: Path, samples: int = 3, **extra: str) -> dict:
    result = subprocess.run([sys.executable, "-c", PROBE, str(samples)], capture_output=True,
                            text=True, timeout=120, env=standin_environment(library_dir, **extra))
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_discovery_and_samples_cover_not_supported_no_permission_and_a_lost_gpu(
        standin: Path) -> None:
    report = probe(standin, samples=3, STANDIN_NVML_LOSE_AFTER="3")
    devices = report["devices"]
    assert devices["count"] == 3
    assert devices["names"] == ["NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A100-SXM4-40GB"]
    assert devices["pci_bus_ids"][0] == "00000000:18:00.0"
    assert devices["uuids"][1].startswith("GPU-")
    counters = set(report["counters"])
    assert {"gpu_power", "gpu_energy", "gpu_pcie_tx", "gpu_nvlink_rx", "gpu_gpm_sm_utilization",
            "gpu_compute_processes", "gpu_clock_event_reasons"} <= counters
    notes = "\n".join(report["notes"])
    assert "gpu_power on GPU 1 (Tesla T4): not supported on this GPU" in notes
    assert "gpu_compute_processes on GPU 1 (Tesla T4): not permitted" in notes
    assert "gpu_gpm_sm_utilization on GPU 1 (Tesla T4): GPM not supported" in notes
    first, second, third = report["samples"]
    assert first["gpu_power"][1] is None and first["gpu_power"][0] == pytest.approx(302.0)
    assert second["gpu_energy"][0] - first["gpu_energy"][0] == pytest.approx(0.3)
    assert second["gpu_pcie_tx"][0] - first["gpu_pcie_tx"][0] == pytest.approx(1e6)
    assert first["gpu_nvlink_tx"][0] == pytest.approx(2 * 4096 * 1024)  # KiB -> bytes
    assert first["gpu_gpm_sm_utilization"] == [0.5, None, 0.52]
    assert first["gpu_gpm_pcie_rx_rate"][0] == pytest.approx(200 * 1048576)
    assert first["gpu_utilization"][0] == pytest.approx(0.2)
    assert first["gpu_sm_clock"][0] == 1980e6
    assert {first["gpu_clock_event_reasons"][0], second["gpu_clock_event_reasons"][0]} == {1, 4}
    assert first["gpu_compute_processes"] == [2.0, None, 0.0]
    assert first["gpu_process_memory_used"][0] == float(3 << 30)
    # GPU 2 is lost at its third utilisation query: NaN from then on, and said so.
    assert first["gpu_utilization"][2] is not None
    assert all(v is None for v in second["gpu_energy"][2:] + third["gpu_utilization"][2:])
    assert report["lost"] == ["GPU 2 (NVIDIA A100-SXM4-40GB) is lost; its values are NaN "
                              "from now on"]
    assert report["processes"]["0"] == [[4242, 2147483648.0], [4243, 1073741824.0]]


def test_nvml_refusing_initialisation_is_explained(standin: Path) -> None:
    report = probe(standin, samples=1, STANDIN_NVML_INIT="no_permission")
    assert report["counters"] == [] and report["samples"] == [{}]
    assert report["unavailable"]["gpu_utilization"].startswith("not permitted (NVML NoPermission")
    report = probe(standin, samples=0, STANDIN_NVML_INIT="driver_not_loaded")
    assert report["unavailable"]["gpu_energy"] == "the NVIDIA kernel driver is not loaded"


def test_a_missing_library_is_explained(tmp_path: Path) -> None:
    report = probe(tmp_path, samples=1)  # an empty directory on LD_LIBRARY_PATH
    if report["counters"]:
        pytest.skip("this machine has a real NVIDIA driver")
    assert report["unavailable"]["gpu_power"] == "no NVIDIA driver: libnvidia-ml.so.1 not found"
    found = NvmlSource(library=str(tmp_path / "libnvidia-ml.so.1")).discover()
    assert "libnvidia-ml.so.1 not found" in found.unavailable["gpu_temperature"]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_collect_command_records_gpus_and_serves_them_to_prometheus(
        standin: Path, tmp_path: Path) -> None:
    store = tmp_path / "store"
    process = subprocess.Popen(
        [sys.executable, "-m", "bayes_sched", "collect", "--interval", "0.2s", "--out", str(store),
         "--sources", "nvml,pcie,procfs", "--prometheus", "0", "--node", "gpu-node-1",
         "--flush-every", "1s"],
        stderr=subprocess.PIPE, text=True, env=standin_environment(standin, STANDIN_NVML_LOSE_AFTER="8"))
    assert process.stderr is not None
    port = None
    lines = []
    for line in process.stderr:
        lines.append(line)
        if "serving Prometheus metrics on" in line:
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            break
    assert port is not None, "".join(lines)
    deadline = time.monotonic() + 30
    metrics: dict = {}
    while time.monotonic() < deadline:
        metrics = scrape(port)
        if any(name == "bayes_sched_gpu_energy_joules_total" for name, _ in metrics):
            break
        time.sleep(0.1)
    first_metrics = metrics
    while time.monotonic() < deadline:  # wait for GPU 2 to be lost, then stop the daemon
        metrics = scrape(port)
        if not any(name == "bayes_sched_gpu_utilization_ratio" and ("gpu", "2") in key
                   for name, key in metrics):
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 0, "".join(lines) + rest

    def labels(**items: str) -> tuple[tuple[str, str], ...]:
        return tuple(sorted({"hostname": "gpu-node-1", **items}.items()))

    def gpu(index: str, **items: str) -> tuple[tuple[str, str], ...]:
        uuid = "GPU-5tand1n0-0000-4000-8000-00000000000" + index
        model = ("NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A100-SXM4-40GB")[int(index)]
        return labels(gpu=index, uuid=uuid, model_name=model, **items)

    assert ("bayes_sched_gpu_utilization_ratio", gpu("2")) in first_metrics
    assert metrics[("bayes_sched_gpu_energy_joules_total", gpu("0"))] > 5000
    assert ("bayes_sched_gpu_power_watts", gpu("0")) in metrics
    assert not any(name == "bayes_sched_gpu_power_watts" and ("gpu", "1") in key
                   for name, key in metrics)
    # pid 4242 is not a process here: no pod or container.
    assert metrics[("bayes_sched_gpu_process_memory_used_bytes",
                    gpu("0", pid="4242", pod_uid="", container_id=""))] == 2 * 2**30
    info = [dict(key) for name, key in metrics if name == "bayes_sched_gpu_info"]
    assert sorted(item["model_name"] for item in info) == sorted(
        ["NVIDIA H100 80GB HBM3", "Tesla T4", "NVIDIA A100-SXM4-40GB"])
    assert ("bayes_sched_cpu_seconds_total", labels(mode="user")) in metrics
    assert metrics[("bayes_sched_collector_samples_total", labels())] >= 1

    ds = open_store(store).load()
    assert schema.problems(ds) == []
    assert ds.sizes["device"] == 3 and ds["node"].values.tolist() == ["gpu-node-1"]
    assert ds["gpu_uuid"].values[0, 0] == "GPU-5tand1n0-0000-4000-8000-000000000000"
    assert np.isnan(ds["gpu_power"].values[:, 0, 1]).all()
    assert np.isfinite(ds["gpu_power"].values[:, 0, 0]).all()
    lost = ds["gpu_utilization_valid"].values[:, 0, 2]
    assert lost[0] and not lost[-1]  # recorded until it was lost, NaN after
    assert "GPU 2 (NVIDIA A100-SXM4-40GB) is lost" in rest
