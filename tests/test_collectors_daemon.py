"""The collector loop and the collect command: timing, buffering, signals, bad input."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from prometheus_client.parser import text_string_to_metric_families

from collectors.base import CollectorError, Devices, Discovery, Values
from collectors.buffer import SampleBuffer
from collectors.daemon import Collector, RunStats
from collectors.procfs import ProcfsSource
from collectors.prometheus import LatestSampleCollector, PrometheusEndpoint
from collectors.replay import ReplaySource
from counters import schema
from counters.committer import ChildCommitWriter
from counters.store import StoreWriter, open_store, parts, write_store

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class SlowProcfs(ProcfsSource):
    """The real procfs source, made to take ``delay`` seconds per sample."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

        self.started: list[tuple[float, float]] = []  # (monotonic, wall) as each read starts

    def sample(self) -> Values:
        self.started.append((time.monotonic(), time.time()))
        time.sleep(self.delay)
        return super().sample()


class LateWake(threading.Event):
    """A stop event whose ``wait`` number ``late_call`` returns ``extra`` seconds late."""

    def __init__(self, late_call: int, extra: float) -> None:
        super().__init__()
        self.late_call, self.extra, self.calls = late_call, extra, 0

    def wait(self, timeout: float | None = None) -> bool:
        self.calls += 1
        woken = super().wait(timeout)
        if self.calls == self.late_call:
            time.sleep(self.extra)
        return woken


def assert_on_the_schedule(source: SlowProcfs, stats: RunStats, interval: float) -> None:
    """On the loop's (monotonic) clock the last sample starts within the interval of its
    instant -- one per sample taken or counted skipped -- and the grid does not drift."""
    ticks = (np.array([m for m, _ in source.started]) - source.started[0][0]) / interval
    last = len(ticks) - 1 + stats.skipped
    # The first read starts a hair after the loop's start: the others may read that much early.
    assert last - 0.05 <= ticks[-1] < last + 1
    # A loop sleeping a fixed interval after each 20 ms sample drifts 20 ms per sample; on a
    # drift-free schedule every sample stays near a multiple of the interval from the first.
    assert np.median(np.abs(ticks - np.round(ticks))) < 0.1


def test_sampling_is_drift_free() -> None:
    collector = Collector([SlowProcfs(0.02)], interval_s=0.1, node="n1", flush_every=100)
    stats = collector.run(threading.Event(), max_samples=15)
    collector.close()
    assert collector.buffer is not None and collector.buffer.size == 0  # nothing kept
    assert stats.samples == 15 and len(stats.latencies_s) == 15
    assert min(stats.latencies_s) >= 0.02


def test_samples_stay_on_the_grid_and_land_in_the_store(tmp_path: Path) -> None:
    writer = StoreWriter(tmp_path / "store")
    source = SlowProcfs(0.02)
    collector = Collector([source], interval_s=0.1, writer=writer, node="n1", flush_every=7)
    stats = collector.run(threading.Event(), max_samples=15)
    collector.close()
    ds = open_store(tmp_path / "store").load()
    assert stats.samples == ds.sizes["time"] == 15 and stats.flushed == 15
    # The schedule is the monotonic clock's (the loop's); the store holds each sample's wall
    # clock stamp, taken as the sample starts: just before its source's read.
    assert_on_the_schedule(source, stats, 0.1)
    seconds = schema.time_to_seconds(ds["time"].values)
    wall = np.array([w for _, w in source.started])
    assert np.all(seconds <= wall + 1e-6) and np.all(seconds[1:] >= wall[:-1] - 1e-6)
    assert schema.problems(ds) == []
    assert ds.attrs["interval_s"] == 0.1 and "procfs" in ds.attrs["sources"]


def test_a_late_wake_counts_the_instants_it_missed_even_before_the_last_sample() -> None:
    """The wake before the 15th sample comes 0.86 s late: instants 14..21 had no sample, and the
    count that an operator reads as skipped_samples_total says so."""
    source = SlowProcfs(0.02)
    collector = Collector([source], interval_s=0.1, node="n1", flush_every=100)
    stats = collector.run(LateWake(late_call=14, extra=0.86), max_samples=15)
    collector.close()
    assert stats.samples == 15 and stats.skipped >= 8
    assert_on_the_schedule(source, stats, 0.1)


class FlakyProcfs(ProcfsSource):
    """The real procfs source, failing on every other sample."""

    calls = 0

    def sample(self) -> Values:
        self.calls += 1
        if self.calls % 2 == 0:
            raise RuntimeError("procfs went away")
        return super().sample()


def test_a_wall_clock_stepping_back_costs_only_the_samples_before_the_last_stored_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An NTP step back of 2.5 s: the samples stamped at or before the last stored one are
    counted, logged once and exported, not stored; the store stays readable and commits go on
    (they had failed forever: 'not after the last stored sample'), the samples after it kept."""
    stamps = iter([100.0, 101.0, 102.0, 99.5, 100.5, 101.5, 102.5, 103.5, 98.0, 104.0])
    store = tmp_path / "store"
    exporter = LatestSampleCollector("n1", None)
    collector = Collector([ProcfsSource()], interval_s=0.01, writer=StoreWriter(store),
                          exporter=exporter, node="n1", flush_every=4,
                          wall_clock=lambda: next(stamps))
    with caplog.at_level("WARNING", logger="collectors.daemon"):
        for _ in range(10):
            collector.sample_once()
    collector.flush(wait=True)
    assert collector.stats.out_of_order == 4 and collector.stats.flush_errors == []
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "the wall clock stepped back 2.500 s", "the wall clock stepped back 5.500 s"]
    stored = schema.time_to_seconds(open_store(store, lazy=False)["time"].values)
    np.testing.assert_allclose(stored, [100.0, 101.0, 102.0, 102.5, 103.5, 104.0])
    served = {m.name: m for m in exporter.collect()}
    assert served["bayes_sched_collector_out_of_order_samples"].samples[0].value == 4


@pytest.mark.parametrize("committer", ["in process", "child"])
def test_a_restarted_collector_stores_nothing_before_the_store_s_newest_sample(
        tmp_path: Path, committer: str, caplog: pytest.LogCaptureFixture) -> None:
    """A collector restarted after the wall clock stepped back 52 s: its samples stamped before
    the store's newest (from its earlier run) are all counted and none stored. An in-process
    writer knows the newest sample on opening and refuses them when taken; a child committer
    learns it from its first commit, which leaves out what was journalled before (counted and
    logged then), and the collector refuses the rest when taken. The metric had read 0 for
    both kinds."""
    store = tmp_path / "store"
    first = iter([200.0, 201.0, 202.0])
    before = Collector([ProcfsSource()], interval_s=0.01, writer=StoreWriter(store), node="n1",
                       wall_clock=lambda: next(first))
    for _ in range(3):
        before.sample_once()
    before.flush(wait=True)
    before.close()

    stamps = iter([150.0, 151.0, 152.0, 153.0, 154.0, 203.0, 204.0])
    writer = StoreWriter(store) if committer == "in process" else ChildCommitWriter(store)
    exporter = LatestSampleCollector("n1", None)
    collector = Collector([ProcfsSource()], interval_s=0.01, writer=writer, exporter=exporter,
                          node="n1", flush_every=100, wall_clock=lambda: next(stamps))
    with caplog.at_level("WARNING", logger="collectors.daemon"):
        for _ in range(3):
            collector.sample_once()
        collector.flush(wait=True)  # the child's first commit tells the store's newest sample
        for _ in range(4):
            collector.sample_once()
        collector.flush(wait=True)
    collector.close()
    logged = [r.getMessage().split(" (")[0].split(";")[0] for r in caplog.records]
    assert logged == (["the wall clock stepped back 52.000 s"] if committer == "in process" else
                      ["a commit left out 3 sample(s) journalled at or before the store's newest "
                       "sample", "the wall clock stepped back 49.000 s"])

    stats = collector.stats
    assert stats.flush_errors == [] and stats.out_of_order == 5
    assert (stats.refused_out_of_order, stats.committed_out_of_order) == (
        (5, 0) if committer == "in process" else (2, 3))
    stored = schema.time_to_seconds(open_store(store, lazy=False)["time"].values)
    np.testing.assert_allclose(stored, [200.0, 201.0, 202.0, 203.0, 204.0])
    served = {m.name: m for m in exporter.collect()}
    assert served["bayes_sched_collector_out_of_order_samples"].samples[0].value == 5


def test_a_stamp_within_the_stored_microsecond_is_out_of_order(tmp_path: Path) -> None:
    """The store keeps times to the microsecond: 0.4 us after the last stored sample is the same
    time there (a schema error: not strictly increasing), so that sample is not stored."""
    stamps = iter([100.0, 100.0000004, 100.000001])
    store = tmp_path / "store"
    collector = Collector([ProcfsSource()], interval_s=0.01, writer=StoreWriter(store),
                          node="n1", wall_clock=lambda: next(stamps))
    for _ in range(3):
        collector.sample_once()
    collector.flush(wait=True)
    assert collector.stats.out_of_order == 1 and collector.stats.flush_errors == []
    np.testing.assert_array_equal(
        open_store(store, lazy=False)["time"].values,
        schema.seconds_to_time([100.0, 100.000001]))


def test_a_failing_source_gives_nan_and_the_loop_goes_on() -> None:
    collector = Collector([FlakyProcfs()], interval_s=0.01, node="n1", flush_every=100)
    collector.discover()
    for _ in range(4):
        collector.sample_once()
    assert collector.buffer is not None
    cpu_user = collector.buffer.to_dataset()["cpu_user"].values[:, 0]
    np.testing.assert_array_equal(np.isfinite(cpu_user), [True, False, True, False])
    assert collector.stats.source_errors == {"procfs: RuntimeError: procfs went away": 2}


def test_the_buffer_is_bounded_and_drops_the_oldest() -> None:
    buffer = SampleBuffer("n", ["cpu_user"], ["gpu_power"], Devices(count=2), capacity=4)
    for i in range(7):
        buffer.add(1.7e9 + i, {"cpu_user": float(i), "gpu_power": np.array([i, 10.0 * i])})
    assert buffer.size == 4 and buffer.dropped == 3
    ds = buffer.to_dataset()
    np.testing.assert_array_equal(ds["cpu_user"].values[:, 0], [3, 4, 5, 6])
    np.testing.assert_array_equal(ds["gpu_power"].values[:, 0, 1], [30, 40, 50, 60])
    buffer.add(1.7e9 + 8, {})  # a source that returned nothing: NaN, not zero
    assert np.isnan(buffer.to_dataset()["cpu_user"].values[-1, 0])


def test_a_failing_disk_keeps_samples_in_bounded_memory_until_it_recovers(tmp_path: Path) -> None:
    store = tmp_path / "store"
    writer = StoreWriter(store)
    collector = Collector([ProcfsSource()], interval_s=0.01, writer=writer, node="n1",
                          flush_every=5)
    collector.discover()
    for _ in range(5):
        collector.sample_once()
    collector.flush(wait=True)
    assert collector.stats.flushed == 5
    moved = tmp_path / "moved-away"
    store.rename(moved)
    store.write_text("a file where the store was")  # every journal write and commit now fails
    for _ in range(30):
        collector.sample_once()
        collector.flush(wait=True)
    assert collector.stats.flush_errors and "cannot" in collector.stats.flush_errors[-1]
    assert collector.stats.journal_errors == 30
    assert collector.buffer is not None
    assert writer.unwritten == writer.max_unwritten == collector.buffer.capacity == 10
    assert collector.stats.dropped == 20  # 30 samples cannot fit in 2 x 5
    store.unlink()
    moved.rename(store)
    collector.flush(wait=True)
    ds = open_store(store).load()
    # The part before, then what memory held while the disk refused: journalled, then committed.
    assert [p.name for p in parts(store)] == ["part-00000.zarr", "part-00001.zarr"]
    assert ds.sizes["time"] == collector.stats.flushed == 35 - collector.stats.dropped
    assert writer.unwritten == 0
    assert schema.problems(ds) == []


def small_store_batch():  # a small one-node dataset
    return schema.build(1.0e9 + np.arange(4), "n1", {"cpu_user": np.arange(4.0)})


def test_prometheus_endpoint_serves_over_loopback_and_a_busy_port_is_one_error() -> None:
    exporter = LatestSampleCollector("n1", Devices(count=2, uuids=["GPU-x", "GPU-y"],
                                                   names=["NVIDIA A100", "NVIDIA H100"]))
    endpoint = PrometheusEndpoint(exporter, 0)
    try:
        exporter.update({"cpu_user": 12.5, "gpu_power": np.array([250.0, np.nan]),
                         "gpu_energy": np.array([1e4, 2e4]),
                         "gpu_clock_event_reasons": np.array([0x4 | 0x40, np.nan])},
                        {"samples_total": 3.0})
        with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(text) for s in f.samples}

        def gpu(index: str, uuid: str, model: str) -> tuple[tuple[str, str], ...]:
            return (("gpu", index), ("hostname", "n1"), ("model_name", model), ("uuid", uuid))

        assert samples[("bayes_sched_cpu_seconds_total",
                        (("hostname", "n1"), ("mode", "user")))] == 12.5
        assert samples[("bayes_sched_gpu_power_watts", gpu("0", "GPU-x", "NVIDIA A100"))] == 250.0
        assert ("bayes_sched_gpu_power_watts", gpu("1", "GPU-y", "NVIDIA H100")) not in samples
        assert samples[("bayes_sched_gpu_energy_joules_total",
                        gpu("1", "GPU-y", "NVIDIA H100"))] == 2e4
        active = {dict(k)["reason"]: v for (name, k), v in samples.items()
                  if name == "bayes_sched_gpu_clock_event_reason_active" and dict(k)["gpu"] == "0"}
        assert active["sw_power_cap"] == active["hw_thermal_slowdown"] == 1.0
        assert active["gpu_idle"] == 0.0 and sum(active.values()) == 2.0
        assert not any(name == "bayes_sched_gpu_clock_event_reason_active"
                       and dict(k)["gpu"] == "1" for name, k in samples)
        assert any(line.startswith("# TYPE bayes_sched_gpu_energy_joules")
                   and line.endswith(" counter") for line in text.splitlines())
        assert "# HELP bayes_sched_collector_samples_total Samples taken since the collector " \
               "started." in text
        with pytest.raises(CollectorError, match=f"port {endpoint.port} on 127.0.0.1 is "
                                                 "already in use"):
            PrometheusEndpoint(exporter, endpoint.port)
    finally:
        endpoint.close()


def scrape_samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One real scrape of ``127.0.0.1:port``: (metric, sorted labels) -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}


def test_build_info_and_each_sources_up_are_served(tmp_path: Path) -> None:
    """NVML that cannot load (no such library) is 0 from the start; a source that fails a read
    is 0 for that sample and 1 again when it reads; build_info names the installed version."""
    import platform
    from importlib.metadata import version

    from collectors.nvml import NvmlSource

    class Flaky(FlakyProcfs):
        name = "flaky"

    nvml = NvmlSource(library=str(tmp_path / "libnvidia-ml-missing.so"))
    exporter = LatestSampleCollector("n1", None)
    endpoint = PrometheusEndpoint(exporter, 0)
    collector = Collector([nvml, ProcfsSource(), Flaky()], interval_s=0.01, node="n1",
                          exporter=exporter, flush_every=100)
    try:
        before = scrape_samples(endpoint.port)
        build = [dict(k) for name, k in before if name == "bayes_sched_build_info"]
        assert build == [{"hostname": "n1", "version": version("bayes-sched"),
                          "python": platform.python_version()}]
        assert not any(name == "bayes_sched_collector_source_up" for name, _ in before)
        collector.discover()
        seen = []
        for _ in range(2):
            collector.sample_once()
            served = scrape_samples(endpoint.port)
            seen.append({dict(k)["source"]: v for (name, k), v in served.items()
                         if name == "bayes_sched_collector_source_up"})
        assert seen == [{"nvml": 0.0, "procfs": 1.0, "flaky": 1.0},
                        {"nvml": 0.0, "procfs": 1.0, "flaky": 0.0}]
        assert served[("bayes_sched_collector_samples_total", (("hostname", "n1"),))] == 2.0
    finally:
        endpoint.close()
        collector.close()


def start_collect(*args: str) -> subprocess.Popen[str]:
    process = subprocess.Popen([sys.executable, "-m", "bayes_sched", "collect", *args],
                               stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
    assert process.stderr is not None
    for line in process.stderr:
        if "sampling" in line and "counters every" in line:
            return process
    process.kill()
    raise AssertionError(f"collect did not start: {process.communicate()[1]}")


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_flushes_every_sample_taken(tmp_path: Path, stop_signal: int) -> None:
    store = tmp_path / "store"
    # Flushing only hourly: everything on disk at the end was written by the signal path.
    process = start_collect("--interval", "0.1s", "--out", str(store), "--flush-every", "1h",
                            "--sources", "procfs,perf", "--node", "sig-node")
    time.sleep(1.2)
    process.send_signal(stop_signal)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    summary = [line for line in stderr.splitlines() if "samples taken" in line][-1]
    taken = int(summary.split("collect: ")[1].split()[0])
    written = int(summary.split("taken, ")[1].split()[0])
    assert taken >= 5 and written == taken
    ds = open_store(store).load()
    assert ds.sizes["time"] == taken
    assert schema.problems(ds) == []
    assert "perf_task_clock_running_fraction" in ds


def test_replaying_a_store_reproduces_it(tmp_path: Path) -> None:
    recorded = tmp_path / "recorded"
    collector = Collector([ProcfsSource()], interval_s=0.02, writer=StoreWriter(recorded),
                          node="n1", flush_every=100)
    collector.run(threading.Event(), max_samples=6)
    original = open_store(recorded).load()
    source = ReplaySource(recorded)
    found = source.discover()
    assert set(found.counters) == set(schema.value_names(original))
    stream = list(source.stream(speed=float("inf")))
    assert [t for t, _ in stream] == pytest.approx(schema.time_to_seconds(original.time.values))
    assert stream[3][1]["cpu_user"] == float(original["cpu_user"].values[3, 0])
    paced = ReplaySource(recorded)
    started = time.monotonic()
    list(paced.stream(speed=2.0))  # 5 gaps of ~0.02 s at double speed
    assert time.monotonic() - started >= 0.04
    copied = tmp_path / "copied"
    result = subprocess.run([sys.executable, "-m", "bayes_sched", "collect", "--replay",
                             str(recorded), "--interval", "10ms", "--out", str(copied),
                             "--quiet"], capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr
    replayed = open_store(copied).load()
    np.testing.assert_array_equal(replayed["cpu_user"].values, original["cpu_user"].values)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                          text=True, env=ENV, timeout=120)


def test_bad_input_is_one_line_a_nonzero_exit_and_harms_nothing(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(small_store_batch(), store)
    before = open_store(store).load()

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("collect", "--out", str(store), "--prometheus", str(port),
                         "--sources", "procfs", "--quiet", "--samples", "3")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"bayes-sched: error: Prometheus port {port} on 127.0.0.1 is already in use")
    assert "Traceback" not in result.stderr
    after = open_store(store).load()
    assert after.identical(before)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_cli("collect", "--out", str(tmp_path / "new-store"), "--prometheus",
                         str(port), "--samples", "1")
    assert result.returncode == 2 and not (tmp_path / "new-store").exists()

    a_file = tmp_path / "file"
    a_file.write_text("x")
    result = run_cli("collect", "--out", str(a_file / "store"), "--samples", "1")
    assert result.returncode == 2 and "cannot write the store" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.csv").write_text("a,b\n1,2\n")
    for args in (("counters", "validate", str(foreign)), ("collect", "--out", str(foreign))):
        result = run_cli(*args)
        assert result.returncode == 2 and "not a bayes-sched counters store" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert (foreign / "data.csv").read_text() == "a,b\n1,2\n"

    backwards = tmp_path / "backwards"
    write_store(schema.build(1.0e9 + np.arange(4), "n1", {"cpu_user": np.array([1, 2, 1.5, 3])}),
                backwards)
    result = run_cli("counters", "validate", str(backwards))
    assert result.returncode == 2
    assert "counter 'cpu_user' goes backwards at time=" in result.stderr
    assert run_cli("counters", "validate", str(backwards), "--allow-resets").returncode == 0

    result = run_cli("collect", "--sources", "procfs,gpu", "--out", str(tmp_path / "s2"))
    assert result.returncode == 2 and "unknown source(s) gpu" in result.stderr
    assert not (tmp_path / "s2").exists()

    result = run_cli("collect", "--interval", "fast", "--out", str(store))
    assert result.returncode == 2 and "is not a duration" in result.stderr


def test_counters_commands_list_summarise_and_export(tmp_path: Path) -> None:
    store = tmp_path / "store"
    write_store(small_store_batch(), store)
    listing = run_cli("counters", "catalog", "--source", "nvml_gpm", "--json")
    assert listing.returncode == 0
    assert "gpu_gpm_dram_bandwidth_utilization" in listing.stdout
    info = run_cli("counters", "info", str(store), "--json")
    assert info.returncode == 0 and '"valid_fraction": 1.0' in info.stdout
    out = tmp_path / "out.nc"
    assert run_cli("counters", "export", str(store), str(out)).returncode == 0
    assert out.stat().st_size > 0


def test_a_collector_needs_something_to_do() -> None:
    with pytest.raises(CollectorError, match="interval must be a positive"):
        Collector([], interval_s=0.0)
    result = run_cli("collect", "--samples", "1")
    assert result.returncode == 2 and "give --out STORE and/or --prometheus PORT" in result.stderr


def test_discovery_lines_group_reasons() -> None:
    found = Discovery("x", unavailable={f"c{i}": "no driver" for i in range(6)})
    assert found.lines()[-1] == "x: cannot read 6 counters (c0, ...): no driver"


def test_counters_align_merges_node_stores(tmp_path: Path) -> None:
    for node, offset in (("a", 0.0), ("b", 30.0)):
        values = np.arange(6.0) * (2.0 if node == "b" else 1.0)
        write_store(schema.build(1.7e9 + offset + np.arange(6.0), node, {"cpu_user": values}),
                    tmp_path / node)
    out = tmp_path / "merged.nc"
    result = run_cli("counters", "align", str(tmp_path / "a"), str(tmp_path / "b"),
                     "--interval", "1s", "--clock-offset", "b=30", "--out", str(out))
    assert result.returncode == 0, result.stderr
    merged = xr.open_dataset(out, engine="h5netcdf").load()
    assert schema.problems(merged) == []
    np.testing.assert_array_equal(merged["cpu_user"].sel(node="b").values, 2.0 * np.arange(6))
    bad = run_cli("counters", "align", str(tmp_path / "a"), "--interval", "1s",
                  "--clock-offset", "b", "--out", str(tmp_path / "bad.nc"))
    assert bad.returncode == 2 and "expected NODE=SECONDS" in bad.stderr
    again = run_cli("counters", "align", str(tmp_path / "a"), "--interval", "1s", "--out",
                    str(out))  # an existing output is never replaced without --force
    assert again.returncode == 2 and "--force" in again.stderr



def test_collecting_in_process_puts_back_the_signal_handlers_it_replaced() -> None:
    # A collector run in-process (as tests and embedding programs do) sets its stop on SIGINT
    # and SIGTERM while it runs; once it returns, a Ctrl-C must reach the caller's handler again
    # (it used to set the finished collector's stop instead, and nothing happened).
    from bayes_sched.cli import main

    def mine(signum: int, frame: object) -> None:
        raise AssertionError("not called")

    before = signal.signal(signal.SIGINT, mine)
    term_before = signal.getsignal(signal.SIGTERM)
    try:
        assert main(["collect", "--sources", "procfs", "--prometheus", "0", "--samples", "2",
                     "--interval", "0.02s", "--quiet"]) == 0
        assert signal.getsignal(signal.SIGINT) is mine
        assert signal.getsignal(signal.SIGTERM) == term_before
    finally:
        signal.signal(signal.SIGINT, before)
