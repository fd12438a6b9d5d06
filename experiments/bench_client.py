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
   (-> its first step done).

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

ROOT = Path(__file__).resolve().parents[1]


def _model(features: int, hidden: int, classes: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                         nn.ReLU(), nn.Linear(hidden, classes))


def overhead(hidden: int, local_bsz: int, accum_steps: int, blocks: int, steps: int,
             seed: int = 0) -> dict[str, Any]:
    """Median seconds per optimiser step, plain loop vs client, in alternating blocks."""
    features, classes = 128, 10
    generator = torch.Generator().manual_seed(seed)
    examples = local_bsz * (accum_steps + 1) * steps * 4
    dataset = TensorDataset(torch.randn(examples, features, generator=generator),
                            torch.randint(classes, (examples,), generator=generator))
    loss_fn = nn.CrossEntropyLoss()
    plain_model = _model(features, hidden, classes, seed)
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    client_model = _model(features, hidden, classes, seed)
    client_opt = torch.optim.SGD(client_model.parameters(), lr=0.01, momentum=0.9)
    with tempfile.TemporaryDirectory() as job_dir:
        os.environ[protocol.ENV_JOB_DIR] = job_dir
        protocol.write_control(job_dir, protocol.Control(local_bsz, accum_steps))
        job = ElasticJob(client_model, client_opt, dataset,
                         init_batch_size=local_bsz * (accum_steps + 1), target_epochs=1e9,
                         seed=seed, report_interval=2.0)
        batches = job.micro_batches()
        order = torch.randperm(examples, generator=generator)
        plain_times: list[float] = []
        client_times: list[float] = []
        position = 0
        def plain_block() -> float:
            nonlocal position
            start = time.perf_counter()
            for _ in range(steps):  # the plain loop: same micro-batches, same accumulation
                for _ in range(accum_steps + 1):
                    index = order[position:position + local_bsz]
                    position = (position + local_bsz) % (examples - local_bsz)
                    inputs, labels = dataset[index]
                    loss = loss_fn(plain_model(inputs), labels) / (accum_steps + 1)
                    loss.backward()
                plain_opt.step()
                plain_opt.zero_grad(set_to_none=True)
            return (time.perf_counter() - start) / steps

        def client_block() -> float:
            start = time.perf_counter()
            for _ in range(steps * (accum_steps + 1)):
                inputs, labels = next(batches)
                job.step(loss_fn(job.model(inputs), labels))
            return (time.perf_counter() - start) / steps

        for block in range(blocks):  # ABBA order: neither loop always runs first
            if block % 2 == 0:
                plain_times.append(plain_block())
                client_times.append(client_block())
            else:
                client_times.append(client_block())
                plain_times.append(plain_block())
        del os.environ[protocol.ENV_JOB_DIR]
        reports = protocol.read_reports(job_dir)[0]
    plain, client = statistics.median(plain_times), statistics.median(client_times)
    return {"model": f"MLP {features}-{hidden}-{hidden}-{classes}",
            "micro_batch": local_bsz, "accum_steps": accum_steps,
            "plain_ms": plain * 1e3, "client_ms": client * 1e3, "ratio": client / plain,
            "ratio_best_blocks": min(client_times) / min(plain_times),
            "reports": len(reports)}


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
    rng = np.random.default_rng(seed)

    def ratio(times: dict[str, list[float]]) -> tuple[float, float, float]:
        """Median client/plain ratio over pairs, and its 90 % bootstrap interval."""
        ratios = np.array(times["client"]) / np.array(times["plain"])
        medians = np.median(rng.choice(ratios, (2000, ratios.size)), axis=1)
        low, high = np.quantile(medians, [0.05, 0.95])
        return float(np.median(ratios)), float(low), float(high)

    wall, wall_low, wall_high = ratio(seconds)
    cpu_ratio, cpu_low, cpu_high = ratio(cpu)
    return {"script": name, "steps": steps, "pairs": pairs,
            "plain_ms_per_step": 1e3 * statistics.median(seconds["plain"]) / steps,
            "client_ms_per_step": 1e3 * statistics.median(seconds["client"]) / steps,
            "wall_ratio": wall, "wall_90": f"[{wall_low:.3f}, {wall_high:.3f}]",
            "cpu_ratio": cpu_ratio, "cpu_90": f"[{cpu_low:.3f}, {cpu_high:.3f}]",
            "load_before": load_before, "load_after": os.getloadavg()[0]}


def reallocation_latency(moves: int, seed: int = 0) -> list[dict[str, Any]]:
    """Parts of the reallocation latency of a tiny job moved between 1 and 2 logical GPUs."""
    events: list[tuple[float, str, int]] = []
    with tempfile.TemporaryDirectory() as root:
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
                rows.append({"move": f"{move % 2 + 1} -> {(move + 1) % 2 + 1} GPUs",
                             "checkpoint_s": ack - requested, "stop_s": stopped - ack,
                             "launch_s": start["time"] - started,
                             "first_step_s": step - start["time"],
                             "total_s": step - requested,
                             "steps_lost": 0 if start["step"] >= next(
                                 r["step"] for r in new if r["kind"] == "checkpoint") else 1})
        finally:
            launcher.close()
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


def _print(rows: list[dict[str, Any]], title: str) -> None:
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
    parser.add_argument("--moves", type=int, default=2,
                        help="reallocations timed (0: skip the latency part)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if not args.skip_overhead:
        rows = [overhead(hidden, bsz, accum, args.blocks, args.steps)
                for hidden, bsz, accum in ((256, 32, 0), (256, 32, 1), (1024, 64, 1))]
        _print(rows, "Client overhead per optimiser step (one process, alternating blocks; "
                     "target ratio <= 1.02)")
    if args.script_pairs:
        _print([script_overhead(args.script_pairs, name, size) for name, size in SCRIPT_SIZES],
               "Client overhead of examples/train_tiny.py (separate processes, ABBA pairs; "
               "target ratio <= 1.02)")
    if args.moves:
        _print(reallocation_latency(args.moves), "Reallocation latency, local launcher "
                                                 "(seconds; request -> stepping again)")


if __name__ == "__main__":
    main()
