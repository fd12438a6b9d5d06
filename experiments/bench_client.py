"""Benchmark of the training client: overhead per iteration, and reallocation latency.

1. Overhead: the same model, data and micro-batches trained by a plain PyTorch loop and by
   :class:`~bayes_sched.client.elastic.ElasticJob` (reporting into a job directory, reading its
   control file, measuring step times and gradient noise), in alternating blocks of steps in one
   process, so both see the same machine load; the ratio of median seconds per iteration.
1b. Overhead of the example script: ``examples/train_tiny.py`` with the client (reporting into a
   job directory whose control asks for the same micro-batch and accumulation) and with
   ``--plain`` (the same model and micro-batches, a plain loop), run as separate processes in
   alternating pairs (ABBA); per pair the ratio of the loops' seconds, wall-clock and CPU time
   (the process's own: what a loaded machine's waiting for a core does not inflate), and the
   median ratio with a 90 % bootstrap interval over pairs (seeded); the load average before and
   after.
2. Reallocation latency with the local launcher: a running job moved from 1 to 2 logical GPUs
   (and back) by :class:`~bayes_sched.backends.real_cluster.RealCluster`, broken into its parts:
   checkpoint (request -> acknowledgement), stop (-> processes gone), launch (-> the restarted
   client's ``start`` report: interpreter, torch import, process group, restore) and first step
   (-> its first step done); ``--ray``: also with the Ray launcher on a local Ray cluster (one
   node, 2 logical GPUs), where launch includes the placement group and the actors.

    python experiments/bench_client.py [--blocks 12] [--steps 40] [--moves 2] [--script-pairs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import TensorDataset

from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.backends.local import LocalLauncher
from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
from bayes_sched.client import protocol
from bayes_sched.client.elastic import ElasticJob

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from experiments.results_record import add_record_flag, record_results  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _mlp(features: int, hidden: int, classes: int) -> nn.Module:
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def _cnn(classes: int) -> nn.Module:
    """A small CNN for 3 x 32 x 32 images (CIFAR-10's shape): two 3x3 convolutions (32, 64
    channels) with max-pooling, one linear layer; tens of milliseconds a step of 32 images on
    one CPU core."""
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(64 * 8 * 8, classes))


#: Models of the overhead benchmark: name -> (input shape of one example, a maker of the model).
MODELS: dict[str, tuple[tuple[int, ...], Any]] = {
    "CNN 3x32x32 conv32-conv64-fc10": ((3, 32, 32), lambda: _cnn(10)),
    "MLP 128-256-256-10": ((128,), lambda: _mlp(128, 256, 10)),
    "MLP 128-1024-1024-10": ((128,), lambda: _mlp(128, 1024, 10)),
    "trivial (Linear 8-2)": ((8,), lambda: nn.Linear(8, 2)),
}


def bootstrap_median(values: np.ndarray, seed: int = 0) -> tuple[float, float, float]:
    """Median of ``values`` and its 90 % bootstrap interval (2000 resamples, seeded)."""
    rng = np.random.default_rng(seed)
    medians = np.median(rng.choice(values, (2000, values.size)), axis=1)
    low, high = np.quantile(medians, [0.05, 0.95])
    return float(np.median(values)), float(low), float(high)


def overhead(model_name: str, local_bsz: int, accum_steps: int, blocks: int, steps: int,
             seed: int = 0) -> dict[str, Any]:
    """Seconds per optimiser step, plain loop vs client, in interleaved blocks of ``steps``
    steps (plain, client, client, plain, ...: ABBA, so neither always runs first) in one
    process; per pair of blocks the ratio client/plain (wall-clock, and the process's CPU time,
    which a loaded machine's waiting for a core does not inflate) and the CPU time the client
    adds per step, and their medians over pairs with a 90 % bootstrap interval."""
    shape, make = MODELS[model_name]
    classes = 10 if len(shape) > 1 or shape[0] > 8 else 2
    generator = torch.Generator().manual_seed(seed)
    examples = local_bsz * (accum_steps + 1) * steps * 4
    dataset = TensorDataset(torch.randn(examples, *shape, generator=generator),
                            torch.randint(classes, (examples,), generator=generator))
    loss_fn = nn.CrossEntropyLoss()
    torch.manual_seed(seed)
    plain_model = make()
    torch.manual_seed(seed)
    client_model = make()
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    client_opt = torch.optim.SGD(client_model.parameters(), lr=0.01, momentum=0.9)
    with tempfile.TemporaryDirectory() as job_dir:
        os.environ[protocol.ENV_JOB_DIR] = job_dir
        protocol.write_control(job_dir, protocol.Control(local_bsz, accum_steps))
        job = ElasticJob(client_model, client_opt, dataset,
                         init_batch_size=local_bsz * (accum_steps + 1), target_epochs=1e9,
                         seed=seed, report_interval=2.0)
        batches = job.micro_batches()
        order = torch.randperm(examples, generator=generator)
        plain_times: list[tuple[float, float]] = []
        client_times: list[tuple[float, float]] = []
        position = 0

        def plain_block() -> tuple[float, float]:
            nonlocal position
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps):  # the plain loop: same micro-batches, same accumulation
                for _ in range(accum_steps + 1):
                    index = order[position:position + local_bsz]
                    position = (position + local_bsz) % (examples - local_bsz)
                    inputs, labels = dataset[index]
                    loss = loss_fn(plain_model(inputs), labels) / (accum_steps + 1)
                    loss.backward()
                plain_opt.step()
                plain_opt.zero_grad(set_to_none=True)
            return ((time.perf_counter() - start) / steps,
                    (time.process_time() - cpu) / steps)

        def client_block() -> tuple[float, float]:
            start, cpu = time.perf_counter(), time.process_time()
            for _ in range(steps * (accum_steps + 1)):
                inputs, labels = next(batches)
                job.step(loss_fn(job.model(inputs), labels))
            return ((time.perf_counter() - start) / steps,
                    (time.process_time() - cpu) / steps)

        plain_block(), client_block()  # warm-up (allocator, the client's first steps)
        load_before = os.getloadavg()[0]
        for block in range(blocks):
            if block % 2 == 0:
                plain_times.append(plain_block())
                client_times.append(client_block())
            else:
                client_times.append(client_block())
                plain_times.append(plain_block())
        del os.environ[protocol.ENV_JOB_DIR]
        reports = protocol.read_reports(job_dir)[0]
    plain, client = np.array(plain_times), np.array(client_times)  # (blocks, wall | cpu)
    ratio, low, high = bootstrap_median(client[:, 0] / plain[:, 0], seed)
    cpu_ratio, cpu_low, cpu_high = bootstrap_median(client[:, 1] / plain[:, 1], seed)
    extra, extra_low, extra_high = bootstrap_median((client[:, 1] - plain[:, 1]) * 1e6, seed)
    return {"model": model_name, "micro_batch": local_bsz, "accum_steps": accum_steps,
            "plain_ms": float(np.median(plain[:, 0])) * 1e3,
            "client_ms": float(np.median(client[:, 0])) * 1e3,
            "wall_ratio": ratio, "wall_90": f"[{low:.3f}, {high:.3f}]",
            "cpu_ratio": cpu_ratio, "cpu_90": f"[{cpu_low:.3f}, {cpu_high:.3f}]",
            "extra_cpu_us": extra, "extra_90": f"[{extra_low:.0f}, {extra_high:.0f}]",
            "pairs": blocks, "reports": len(reports),
            "load": f"{load_before:.1f}-{os.getloadavg()[0]:.1f}"}


#: Sizes of the example script timed by :func:`script_overhead`: its defaults, and a wider MLP
#: whose step takes milliseconds on one CPU core, as a real job's does (name, arguments).
SCRIPT_SIZES = (
    ("train_tiny defaults (MLP 32-64-4)", ("--examples", "32768")),
    ("wide (MLP 512-2048-10)", ("--examples", "4096", "--features", "512", "--hidden", "2048",
                                "--classes", "10")),
)


def script_overhead(pairs: int, name: str, size: tuple[str, ...], local_bsz: int = 16,
                    accum_steps: int = 1, seed: int = 0) -> dict[str, Any]:
    """Ratio of ``train_tiny.py``'s loop seconds with the client to ``--plain``, over ``pairs``
    pairs of runs in ABBA order; median and a 90 % bootstrap interval over pairs."""
    script = str(ROOT / "examples" / "train_tiny.py")
    common = [sys.executable, script, "--timing", "--target-epochs", "1", "--seed", str(seed),
              "--local-bsz", str(local_bsz), "--accum-steps", str(accum_steps), *size]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    load_before = os.getloadavg()[0]
    seconds: dict[str, list[float]] = {"plain": [], "client": []}
    cpu: dict[str, list[float]] = {"plain": [], "client": []}
    steps = 0
    with tempfile.TemporaryDirectory() as job_dir:
        for pair in range(pairs):
            for mode in (("plain", "client") if pair % 2 == 0 else ("client", "plain")):
                run_env = dict(env)
                if mode == "client":  # under a scheduler: a job directory, its control
                    run_dir = Path(job_dir) / f"run-{pair}"
                    protocol.write_control(run_dir, protocol.Control(local_bsz, accum_steps))
                    run_env[protocol.ENV_JOB_DIR] = str(run_dir)
                done = subprocess.run([*common, *(["--plain"] if mode == "plain" else [])],
                                      env=run_env, capture_output=True, text=True, check=True)
                timing = json.loads(done.stdout.strip().splitlines()[-1])
                seconds[mode].append(timing["train_seconds"])
                cpu[mode].append(timing["cpu_seconds"])
                steps = timing["steps"]
    def ratio(times: dict[str, list[float]]) -> tuple[float, float, float]:
        """Median client/plain ratio over pairs, and its 90 % bootstrap interval."""
        return bootstrap_median(np.array(times["client"]) / np.array(times["plain"]), seed)

    wall, wall_low, wall_high = ratio(seconds)
    cpu_ratio, cpu_low, cpu_high = ratio(cpu)
    return {"script": name, "steps": steps, "pairs": pairs,
            "plain_ms_per_step": 1e3 * statistics.median(seconds["plain"]) / steps,
            "client_ms_per_step": 1e3 * statistics.median(seconds["client"]) / steps,
            "wall_ratio": wall, "wall_90": f"[{wall_low:.3f}, {wall_high:.3f}]",
            "cpu_ratio": cpu_ratio, "cpu_90": f"[{cpu_low:.3f}, {cpu_high:.3f}]",
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def _local_ray_launcher() -> tuple[Any, Any]:
    """A Ray launcher on a local Ray cluster of one node with 2 logical GPUs (what the Ray
    backend's tests use), and the cluster to shut down."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT),
                                                              os.environ.get("PYTHONPATH")]))
    from ray.cluster_utils import Cluster

    from bayes_sched.backends.ray_launcher import RayLauncher

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "num_gpus": 2, "object_store_memory": 80 * 2**20,
        "include_dashboard": False})
    return RayLauncher(cluster.address), cluster


def reallocation_latency(moves: int, seed: int = 0, ray: bool = False) -> list[dict[str, Any]]:
    """Parts of the reallocation latency of a tiny job moved between 1 and 2 logical GPUs, on
    this machine's local launcher or (``ray``) a local Ray cluster's."""
    events: list[tuple[float, str, int]] = []
    ray_cluster = None
    with tempfile.TemporaryDirectory() as root:
        if ray:
            launcher, ray_cluster = _local_ray_launcher()
        else:
            launcher = LocalLauncher(2)
        cluster = RealCluster(launcher, root, RealClusterConfig(poll_interval=0.02))

        def on_change() -> None:
            record = cluster.records["bench"]
            events.append((time.time(), record.status, record.attempt))

        cluster.on_change = on_change
        argv = (sys.executable, str(ROOT / "examples" / "train_tiny.py"), "--examples",
                "65536", "--seed", str(seed), "--step-sleep", "0.005", "--report-interval",
                "0.05")
        cluster.submit(RealJobSpec("bench", argv, 32, 256, 64, 1000,
                                   env={"PYTHONPATH": str(ROOT)}))
        job_dir = cluster.job_dir("bench")
        rows = []
        counts = [np.array([1]), np.array([2])]
        cluster.apply({"bench": counts[0]})
        try:
            for move in range(moves + 1):
                _wait_steps(cluster, job_dir)
                if move == moves:
                    break
                offset = protocol.read_reports(job_dir)[1]
                requested = time.time()
                events.clear()
                cluster.apply({"bench": counts[(move + 1) % 2]})
                started = next(t for t, status, _ in events if status == "running")
                stopped = next(t for t, status, _ in events if status == "pending")
                _wait_steps(cluster, job_dir, offset)
                new = protocol.read_reports(job_dir, offset)[0]
                ack = next(r["time"] for r in new if r["kind"] == "checkpoint")
                start = next(r for r in new if r["kind"] == "start")
                step = next(r["time"] for r in new if r["kind"] == "progress"
                            and r["time"] > start["time"] and r["step"] > start["step"])
                rows.append({"backend": "ray" if ray else "local",
                             "move": f"{move % 2 + 1} -> {(move + 1) % 2 + 1} GPUs",
                             "checkpoint_s": ack - requested, "stop_s": stopped - ack,
                             "launch_s": start["time"] - started,
                             "first_step_s": step - start["time"],
                             "total_s": step - requested,
                             "steps_lost": 0 if start["step"] >= next(
                                 r["step"] for r in new if r["kind"] == "checkpoint") else 1})
        finally:
            launcher.close()
            if ray_cluster is not None:
                import ray as ray_module

                ray_module.shutdown()
                ray_cluster.shutdown()
    return rows


def _wait_steps(cluster: RealCluster, job_dir: Path, offset: int = 0,
                timeout: float = 180.0) -> None:
    """Until the job has made a step since ``offset`` of its reports (after a start)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cluster.poll()
        reports = protocol.read_reports(job_dir, offset)[0]
        starts = [r for r in reports if r["kind"] == "start"]
        if starts and any(r["kind"] == "progress" and r["time"] > starts[-1]["time"]
                          and r["step"] > starts[-1]["step"] for r in reports):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the job made no step in {timeout} s")


def _print(rows: list[dict[str, Any]], title: str, tables: dict[str, list[dict[str, Any]]]
           ) -> None:
    tables[title] = rows
    print(f"\n{title}")
    columns = list(rows[0])
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(f"{row[c]:.4g}" if isinstance(row[c], float) else str(row[c])
                         for c in columns))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip-overhead", action="store_true", help="time reallocations only")
    parser.add_argument("--script-pairs", type=int, default=0,
                        help="pairs of example-script runs timed, client vs plain (0: skip)")
    parser.add_argument("--ray", action="store_true",
                        help="time the reallocations on a local Ray cluster's launcher too")
    parser.add_argument("--moves", type=int, default=2,
                        help="reallocations timed (0: skip the latency part)")
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tables: dict[str, list[dict[str, Any]]] = {}
    if not args.skip_overhead:
        cases = [(name, bsz, accum, steps) for name, bsz, accum, steps in (
            ("CNN 3x32x32 conv32-conv64-fc10", 32, 0, 1), ("CNN 3x32x32 conv32-conv64-fc10", 16, 1, 1),
            ("MLP 128-256-256-10", 32, 0, 10), ("MLP 128-256-256-10", 32, 1, 10),
            ("MLP 128-1024-1024-10", 64, 1, 1),
            ("trivial (Linear 8-2)", 4, 0, 100), ("trivial (Linear 8-2)", 4, 1, 100))]
        rows = [overhead(name, bsz, accum, args.blocks, max(1, args.steps * scale))
                for name, bsz, accum, scale in cases]
        _print(rows, "Client overhead per optimiser step (one process, interleaved blocks, "
                     "median over block pairs [90 % bootstrap]; target ratio <= 1.02). "
                     "extra_cpu_us: the client's CPU time per step beyond the plain loop's; on "
                     "the trivial model that is its fixed cost, and 2 % holds for steps longer "
                     "than 50 times it", tables)
    if args.script_pairs:
        _print([script_overhead(args.script_pairs, name, size) for name, size in SCRIPT_SIZES],
               "Client overhead of examples/train_tiny.py (separate processes, ABBA pairs; "
               "target ratio <= 1.02)", tables)
    if args.moves:
        rows = reallocation_latency(args.moves)
        if args.ray:
            rows += reallocation_latency(args.moves, ray=True)
        _print(rows, "Reallocation latency (seconds; request -> stepping again)", tables)
    if args.record:
        record_results(__file__, tables)


if __name__ == "__main__":
    main()
