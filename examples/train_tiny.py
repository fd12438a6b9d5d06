"""A tiny elastic training job: a seeded synthetic classification task and a small MLP.

Run it alone (``python examples/train_tiny.py --target-epochs 2``) or submit it to the scheduler
(``bayes-sched submit examples/tiny_job.toml``); under the scheduler the per-GPU batch, the number
of replicas and the checkpoints are the scheduler's business (:mod:`bayes_sched.client.elastic`).
It prints its progress on stderr (the client's log lines, into the job's log under the
scheduler: ``bayes-sched logs NAME``): its start and the checkpoint it restored, every report
interval the step, epochs, mean loss, batch (per-GPU x micro-steps x replicas), learning-rate
gain and examples per second, batch changes, checkpoints and its end.

``--plain`` trains the same model on the same micro-batches with a plain PyTorch loop and no
client (the per-GPU batch and accumulation from ``--local-bsz``/``--accum-steps``), and
``--timing`` prints the seconds the training loop took (wall-clock, and this process's CPU time,
which a loaded machine's waiting does not inflate) as one JSON line: what
``experiments/bench_client.py --script-pairs N`` compares.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn
from torch.utils.data import TensorDataset

from bayes_sched.client.elastic import ElasticJob


def synthetic_dataset(num_examples: int, num_features: int, num_classes: int,
                      seed: int) -> TensorDataset:
    """Gaussian inputs labelled by a random linear teacher with 10 % label noise, seeded."""
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(num_examples, num_features, generator=generator)
    teacher = torch.randn(num_features, num_classes, generator=generator)
    labels = (inputs @ teacher).argmax(dim=1)
    noisy = torch.rand(num_examples, generator=generator) < 0.1
    labels[noisy] = torch.randint(num_classes, (int(noisy.sum()),), generator=generator)
    return TensorDataset(inputs, labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--classes", type=int, default=4)
    parser.add_argument("--init-batch", type=int, default=32)
    parser.add_argument("--target-epochs", type=float, default=2.0)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--step-sleep", type=float, default=0.0,
                        help="seconds to sleep in each micro-step (slows a tiny job down to the "
                             "pace of a real one, for tests and demos)")
    parser.add_argument("--example-sleep", type=float, default=0.0,
                        help="seconds to sleep per example of each micro-step: compute that "
                             "grows with the batch, as on a GPU, so that more GPUs (not only a "
                             "larger batch) raise throughput (for tests and demos)")
    parser.add_argument("--report-interval", type=float, default=1.0)
    parser.add_argument("--plain", action="store_true",
                        help="a plain PyTorch loop, no client (for overhead comparisons)")
    parser.add_argument("--local-bsz", type=int, default=16, help="per-GPU batch (--plain)")
    parser.add_argument("--accum-steps", type=int, default=1, help="accumulation (--plain)")
    parser.add_argument("--timing", action="store_true",
                        help="print the training loop's seconds and steps as one JSON line")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dataset = synthetic_dataset(args.examples, args.features, args.classes, args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    train = train_plain if args.plain else train_elastic
    steps, (seconds, cpu_seconds) = train(model, optimizer, loss_fn, dataset, args)
    if args.timing:
        print(json.dumps({"mode": "plain" if args.plain else "client", "steps": steps,
                          "train_seconds": seconds, "cpu_seconds": cpu_seconds}), flush=True)


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(began: tuple[float, float]) -> tuple[float, float]:
    """Wall-clock and CPU seconds since ``began`` (:func:`_clocks`)."""
    wall, cpu = _clocks()
    return wall - began[0], cpu - began[1]


def train_plain(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: nn.Module,
                dataset: TensorDataset, args: argparse.Namespace
                ) -> tuple[int, tuple[float, float]]:
    """The same training without the client: shuffled micro-batches (seeded), gradients
    accumulated over ``accum_steps + 1`` of them per optimiser step; returns the steps taken
    and the wall-clock and CPU seconds the loop took."""
    micro = args.accum_steps + 1
    steps = int(args.target_epochs * len(dataset)) // (args.local_bsz * micro)
    generator = torch.Generator().manual_seed(args.seed)
    order = torch.randperm(len(dataset), generator=generator)
    position = 0
    began = _clocks()
    for _ in range(steps):
        for _ in range(micro):
            if position + args.local_bsz > len(dataset):
                order, position = torch.randperm(len(dataset), generator=generator), 0
            inputs, labels = dataset[order[position:position + args.local_bsz]]
            position += args.local_bsz
            _pace(args, len(inputs))
            (loss_fn(model(inputs), labels) / micro).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return steps, _since(began)


def train_elastic(model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn: nn.Module,
                  dataset: TensorDataset, args: argparse.Namespace
                  ) -> tuple[int, tuple[float, float]]:
    """Training under the client; returns the optimiser steps taken and the wall-clock and CPU
    seconds its loop took (from the first micro-batch to the last step: what the client adds
    per iteration, not its one-off start and finish)."""
    job = ElasticJob(model, optimizer, dataset, init_batch_size=args.init_batch,
                     target_epochs=args.target_epochs, seed=args.seed,
                     report_interval=args.report_interval)
    with job:
        began = _clocks()
        for inputs, labels in job.micro_batches():
            _pace(args, len(inputs))
            job.step(loss_fn(job.model(inputs), labels))
        seconds = _since(began)
    return job.steps, seconds


def _pace(args: argparse.Namespace, examples: int) -> None:
    """Sleep as a real micro-step of ``examples`` examples would take: ``--step-sleep`` plus
    ``--example-sleep`` per example."""
    seconds = args.step_sleep + args.example_sleep * examples
    if seconds > 0:
        time.sleep(seconds)


if __name__ == "__main__":
    main()
