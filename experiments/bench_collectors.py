"""Benchmark the node collector and the counters store; prints one table.

    PYTHONPATH=. python experiments/bench_collectors.py [--seconds 60] [--memory-seconds 30]
    PYTHONPATH=. python experiments/bench_collectors.py --store-only [--store-hours 1]
    PYTHONPATH=. python experiments/bench_collectors.py --resident-only [--base-tree DIR]

Measures, on this machine, with every source that is available here:

* overhead: CPU time of the collector process and its commit processes while it samples at
  1 Hz, committing to its store every 60 samples (five times as often as the default), as a
  fraction of one core;
* resident memory of a real ``bayes-sched collect --out`` process (procfs source, 20 Hz, a
  commit every second), polled from /proc every 0.1 s: peak and median, for this tree and, with
  ``--base-tree DIR`` (a checkout of another commit, e.g. ``git worktree add DIR COMMIT``), for
  that tree in the same run, with the ratio;
* commit latency: one 300-sample batch of the whole catalog for 8 GPUs committed in process
  (:class:`counters.store.StoreWriter`, imports warm) and in a child process
  (:class:`counters.committer.ChildCommitWriter`, as ``collect --out`` does), and the child's
  peak resident memory;
* sample latency p50/p99 at 1 Hz and at 100 Hz;
* resident memory over a run at 200 Hz with a flush every second: start, end and slope;
* store: append throughput and bytes per node-hour for the Zarr store against rotated netCDF
  (HDF5 extended in place with h5netcdf), both holding the whole catalog for 8 GPUs, with
  synthetic values shaped like real ones (integer-percent utilisation, milliwatt power, growing
  byte counters), seeded. Each 300-sample batch is committed as a new part (written to a
  temporary directory, fsync-ed, renamed), with compaction, as the collector does;
* journal: cost per sample of the write-ahead journal that makes each sample durable within a
  second (one framed record per sample, ``fdatasync`` every second, as the collector runs it, and
  every sample for comparison), and its bytes per sample.

Where a GPU is present it also times ``nvidia-smi`` polling for the side-by-side comparison.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import xarray as xr

from bayes_sched.tables import print_table
from collectors.daemon import Collector, resident_bytes
from collectors.nvml import NvmlSource
from collectors.pcie import PcieSysfsSource
from collectors.perf import PerfSource
from collectors.procfs import ProcfsSource
from counters import schema
from counters.catalog import CATALOG
from counters.committer import ChildCommitWriter
from counters.journal import JournalLayout
from counters.store import StoreWriter, directory_bytes, parts

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

N_GPUS = 8


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children waited for (the commit processes)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def all_sources() -> list:
    return [NvmlSource(), PcieSysfsSource(), PerfSource(), ProcfsSource()]


def run_collector(interval: float, seconds: float, store: Path | None, flush_every: int,
                  rss_every: float | None = None) -> dict:
    writer = ChildCommitWriter(store) if store is not None else None  # as collect --out
    collector = Collector(all_sources(), interval, writer=writer, node="bench",
                          flush_every=flush_every)
    collector.discover()
    rss: list[tuple[float, float]] = []
    stop = threading.Event()
    if rss_every is not None:
        def watch() -> None:
            start = time.monotonic()
            while not stop.wait(rss_every):
                rss.append((time.monotonic() - start, resident_bytes()))
        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    stats = collector.run(threading.Event(), duration_s=seconds)
    cpu, wall = cpu_seconds() - cpu0, time.monotonic() - wall0
    stop.set()
    collector.close()
    latencies = np.asarray(stats.latencies_s) * 1e3
    return {"cpu_fraction": cpu / wall, "samples": stats.samples, "skipped": stats.skipped,
            "flushes": stats.flushed // flush_every,
            "p50_ms": float(np.percentile(latencies, 50)),
            "p99_ms": float(np.percentile(latencies, 99)), "rss": rss,
            "counters": len(collector.counters)}


def synthetic_batch(start: int, n: int, rng: np.random.Generator, state: dict) -> xr.Dataset:
    """``n`` samples of every catalog counter, 1 s apart, for one node with 8 GPUs."""
    variables = {}
    for counter in CATALOG.values():
        shape = (n, N_GPUS) if counter.per_device else (n,)
        if counter.kind == "counter":
            steps = rng.gamma(2.0, 1e6 if counter.units == "byte" else 1.0, size=shape)
            total = state.get(counter.name, np.zeros(shape[1:])) + np.cumsum(steps, axis=0)
            state[counter.name] = total[-1]
            variables[counter.name] = np.floor(total)
        elif counter.units == "1" and "fraction" not in counter.name:
            level = np.clip(0.6 + 0.1 * rng.standard_normal(shape), 0, 1)
            variables[counter.name] = np.round(level * 100) / 100  # NVML gives whole percent
        else:
            variables[counter.name] = np.round(250e3 + 5e3 * rng.standard_normal(shape)) / 1e3
    return schema.build(1.7e9 + np.arange(start, start + n, dtype=float), "bench", variables,
                        gpu_uuid=[f"GPU-{i:08d}" for i in range(N_GPUS)])


def bench_zarr(folder: Path, hours: float, batch: int) -> tuple[float, float]:
    rng, state = np.random.default_rng(0), {}
    writer = StoreWriter(folder / "zarr")
    total = int(hours * 3600)
    spent = 0.0
    for start in range(0, total, batch):
        data = synthetic_batch(start, batch, rng, state)
        began = time.perf_counter()
        writer.append(data)
        spent += time.perf_counter() - began
    return total / spent, directory_bytes(folder / "zarr") / hours


def bench_journal(folder: Path, samples: int, sync_interval_s: float) -> tuple[float, float]:
    """(seconds per journalled sample, journal bytes per sample) for the whole catalog."""
    rng, state = np.random.default_rng(0), {}
    data = synthetic_batch(0, samples, rng, state)
    writer = StoreWriter(folder / f"journal-{sync_interval_s:g}", sync_interval_s=sync_interval_s)
    names = schema.value_names(data)
    per_device = [n for n in names if "device" in data[n].dims]
    writer.journal_layout = JournalLayout(
        node="bench", node_counters=tuple(n for n in names if n not in per_device),
        device_counters=tuple(per_device), n_devices=N_GPUS)
    seconds = schema.time_to_seconds(data.time.values)
    rows = [writer.journal_layout.row(seconds[i], {n: data[n].values[i, 0] for n in names})
            for i in range(samples)]
    spent = 0.0
    for row in rows:
        began = time.perf_counter()
        writer.log(row)
        spent += time.perf_counter() - began
        if sync_interval_s > 0:  # samples arrive spread out (here 100 Hz), not in a burst
            time.sleep(0.01)
    size = (folder / f"journal-{sync_interval_s:g}" / "journal-00000.bin").stat().st_size
    writer.close()
    return spent / samples, size / samples


def bench_netcdf(folder: Path, hours: float, batch: int) -> tuple[float, float]:
    import h5netcdf

    rng, state = np.random.default_rng(0), {}
    path = folder / "part-00000.nc"
    total = int(hours * 3600)
    spent = 0.0
    for start in range(0, total, batch):
        data = synthetic_batch(start, batch, rng, state)
        began = time.perf_counter()
        with h5netcdf.File(path, "a") as f:
            if "time" not in f.variables:
                f.dimensions = {"time": None, "node": 1, "device": N_GPUS}
                f.create_variable("time", ("time",), "i8", chunks=(3600,)).attrs.update(
                    units=schema.TIME_ENCODING["units"])
                for name in schema.value_names(data):
                    dims = data[name].dims
                    v = f.create_variable(name, dims, "f8", compression="gzip",
                                          chunks=(3600, *data[name].shape[1:]), fillvalue=np.nan)
                    v.attrs.update(data[name].attrs)
            n0 = f.dimensions["time"].size
            f.resize_dimension("time", n0 + batch)
            f["time"][n0:] = np.round(schema.time_to_seconds(data.time.values) * 1e6)
            for name in schema.value_names(data):
                f[name][n0:] = data[name].values
        spent += time.perf_counter() - began
    return total / spent, path.stat().st_size / hours


def collect_resident(tree: Path, seconds: float, folder: Path) -> dict:
    """Resident memory of ``bayes-sched collect --out`` run from ``tree`` (its sources first on
    the path): peak and median over the run (MiB), and its summary line."""
    store = folder / f"resident-{abs(hash(str(tree)))}"
    command = [sys.executable, "-m", "bayes_sched", "collect", "--out", str(store), "--sources",
               "procfs", "--interval", "0.05s", "--flush-every", "1s", "--duration",
               f"{seconds:g}s", "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    log = folder / "resident.log"
    with open(log, "w") as stderr:
        process = subprocess.Popen(command, cwd=tree, env=env, stderr=stderr)
        trace = []
        while process.poll() is None:
            try:
                status = Path(f"/proc/{process.pid}/status").read_text()
                trace.append(int(next(line for line in status.splitlines()
                                      if line.startswith("VmRSS:")).split()[1]) / 1024)
            except (OSError, StopIteration):
                pass
            time.sleep(0.1)
    summary = [line for line in log.read_text().splitlines() if "samples taken" in line]
    return {"peak": max(trace), "median": float(np.median(trace)),
            "summary": summary[-1].split("collect: ", 1)[-1] if summary else "(no summary)",
            "parts": len(parts(store))}


def bench_commit(folder: Path, batches: int = 3) -> dict:
    """Seconds to commit one 300-sample batch of the whole catalog for 8 GPUs, in process and
    in a child; the child's peak resident memory (MiB)."""
    rng, state = np.random.default_rng(0), {}
    data = [synthetic_batch(300 * k, 300, rng, state) for k in range(batches)]
    names = schema.value_names(data[0])
    per_device = [n for n in names if "device" in data[0][n].dims]
    layout = JournalLayout(node="bench", node_counters=tuple(n for n in names
                                                             if n not in per_device),
                           device_counters=tuple(per_device), n_devices=N_GPUS)
    result = {}
    for label, writer in (("in process", StoreWriter(folder / "commit-in-process")),
                          ("child process", ChildCommitWriter(folder / "commit-child"))):
        writer.journal_layout = layout
        spent = []
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        for ds in data:
            seconds = schema.time_to_seconds(ds.time.values)
            for i in range(ds.sizes["time"]):
                writer.log(layout.row(seconds[i], {n: ds[n].values[i, 0] for n in names}))
            below = writer.seal()
            began = time.perf_counter()
            assert writer.commit(below) == ds.sizes["time"]
            spent.append(time.perf_counter() - began)
        writer.close()
        result[label] = float(np.median(spent))
        if isinstance(writer, ChildCommitWriter):
            result["child peak"] = max(c.peak_rss_bytes for c in writer.commits) / 2**20
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            result["child cpu"] = (after.ru_utime + after.ru_stime - children.ru_utime
                                   - children.ru_stime) / batches
    return result


def resident_rows(folder: Path, seconds: float, base: Path | None) -> list[dict]:
    here = Path(__file__).resolve().parents[1]
    rows = []
    measured = {"this tree": collect_resident(here, seconds, folder)}
    if base is not None:
        measured["base tree"] = collect_resident(base.resolve(), seconds, folder)
    for label, got in measured.items():
        rows.append({"measure": f"collect --out resident memory, {label}, 20 Hz, commit every "
                                f"1 s, {seconds:g} s: peak / median ({got['summary']}; "
                                f"{got['parts']} parts)",
                     "value": f"{got['peak']:.1f} / {got['median']:.1f}", "unit": "MiB",
                     "target": "<= 80"})
    if base is not None:
        rows.append({"measure": "collect --out resident memory peak, this tree / base tree",
                     "value": measured["this tree"]["peak"] / measured["base tree"]["peak"],
                     "unit": "1", "target": ""})
    commit = bench_commit(folder)
    for label in ("in process", "child process"):
        rows.append({"measure": f"commit latency, 300 samples x {len(CATALOG)} counters x "
                                f"{N_GPUS} GPUs, {label} (median of 3)",
                     "value": commit[label], "unit": "s", "target": ""})
    rows.append({"measure": "commit child process: peak resident memory", "unit": "MiB",
                 "value": commit["child peak"], "target": ""})
    rows.append({"measure": "commit child process: CPU per commit / as a fraction of one core "
                            "at the default 5-min commits",
                 "value": f"{commit['child cpu']:.2f} / {commit['child cpu'] / 300:.4f}",
                 "unit": "s / 1", "target": ""})
    return rows


def nvidia_smi_cpu(seconds: float) -> float | None:
    if shutil.which("nvidia-smi") is None:
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used,power.draw",
                        "--format=csv,noheader"], capture_output=True, check=False)
        time.sleep(max(0.0, 1.0 - (time.monotonic() - start) % 1.0))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=120.0, help="1 Hz overhead run")
    parser.add_argument("--memory-seconds", type=float, default=60.0, help="200 Hz memory run")
    parser.add_argument("--store-hours", type=float, default=1.0, help="store size benchmark")
    parser.add_argument("--store-only", action="store_true",
                        help="only the store and journal rows (no collector runs)")
    parser.add_argument("--resident-seconds", type=float, default=20.0,
                        help="collect --out resident-memory run")
    parser.add_argument("--base-tree", type=Path,
                        help="also measure collect --out from this checkout (before/after)")
    parser.add_argument("--resident-only", action="store_true",
                        help="only the resident-memory and commit rows")
    parser.add_argument("--json", action="store_true")
    add_record_flag(parser)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        rows.extend(resident_rows(folder, args.resident_seconds, args.base_tree))
        if args.resident_only:
            print_table(rows, title="bayes-sched collectors benchmark", as_json=args.json)
            return
        if not args.store_only:
            slow = run_collector(1.0, args.seconds, folder / "s1", flush_every=60)
            rows.append({"measure": f"collector CPU at 1 Hz, {slow['counters']} counters, "
                                    f"{slow['flushes']} commits in {args.seconds:g} s, commit "
                                    "processes included (fraction of one core)",
                         "value": slow["cpu_fraction"], "unit": "1", "target": "<= 0.005"})
            rows.append({"measure": "sample latency p50 / p99 at 1 Hz",
                         "value": f"{slow['p50_ms']:.2f} / {slow['p99_ms']:.2f}", "unit": "ms",
                         "target": ""})
            fast = run_collector(0.01, 10.0, None, flush_every=100)
            rows.append({"measure": f"sample latency p50 / p99 at 100 Hz ({fast['samples']} samples, "
                                    f"{fast['skipped']} skipped)",
                         "value": f"{fast['p50_ms']:.2f} / {fast['p99_ms']:.2f}", "unit": "ms",
                         "target": ""})
            memory = run_collector(0.005, args.memory_seconds, folder / "s2", flush_every=200,
                                   rss_every=1.0)
            trace = np.asarray(memory["rss"])
            steady = trace[len(trace) // 3:]  # after imports, first part and caches settle
            slope = np.polyfit(steady[:, 0], steady[:, 1], 1)[0] * 60 / 2**20
            rows.append({"measure": f"resident memory at 200 Hz over {args.memory_seconds:g} s "
                                    "(after warm-up -> end)",
                         "value": f"{steady[0, 1] / 2**20:.1f} -> {trace[-1, 1] / 2**20:.1f}",
                         "unit": "MiB", "target": "flat"})
            rows.append({"measure": "resident memory slope after warm-up", "value": slope,
                         "unit": "MiB/min", "target": "~0"})
        for label, bench in (("Zarr store (chosen)", bench_zarr),
                             ("rotated netCDF, HDF5 in place", bench_netcdf)):
            rate, size = bench(folder, args.store_hours, batch=300)
            rows.append({"measure": f"{label}: append throughput, 300-sample batches",
                         "value": rate, "unit": "samples/s", "target": ""})
            rows.append({"measure": f"{label}: on disk, {len(CATALOG)} counters, {N_GPUS} GPUs",
                         "value": size / 2**20, "unit": "MiB/node-hour", "target": ""})
        store = folder / "zarr"
        files = sum(len(f) for _, _, f in os.walk(store))
        rows.append({"measure": f"Zarr store after {args.store_hours:g} node-hour(s) of "
                                "300-sample commits: parts / files (compacted)",
                     "value": f"{len(parts(store))} / {files}", "unit": "", "target": ""})
        for sync_s, label in ((1.0, "fdatasync every 1 s (collector)"),
                              (0.0, "fdatasync every sample")):
            per_sample, size = bench_journal(folder, 300, sync_s)
            rows.append({"measure": f"journal, {label}: time per sample",
                         "value": per_sample * 1e6, "unit": "us", "target": ""})
        rows.append({"measure": "journal: bytes per sample (whole catalog, 8 GPUs)",
                     "value": size, "unit": "byte", "target": ""})
        smi = None if args.store_only else nvidia_smi_cpu(min(args.seconds, 30.0))
        rows.append({"measure": "nvidia-smi polling at 1 Hz, CPU (fraction of one core)",
                     "value": "n/a: no GPU here" if smi is None else smi, "unit": "1",
                     "target": ""})
    print_table(rows, title="bayes-sched collectors benchmark", as_json=args.json)
    if args.record:
        record_results(__file__, {"collectors benchmark": rows})


if __name__ == "__main__":
    main()
