"""A tiny elastic training job: a seeded synthetic classification task and a small MLP.

Run it alone (``python examples/train_tiny.py --target-epochs 2``) or submit it to the scheduler
(``bayes-sched submit examples/tiny_job.toml``); under the scheduler the per-GPU batch, the number
of replicas and the checkpoints are the scheduler's business (:mod:`bayes_sched.client.elastic`).
"""

from __future__ import annotations

import argparse

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
    parser.add_argument("--report-interval", type=float, default=1.0)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    dataset = synthetic_dataset(args.examples, args.features, args.classes, args.seed)
    model = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, args.classes))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    job = ElasticJob(model, optimizer, dataset, init_batch_size=args.init_batch,
                     target_epochs=args.target_epochs, seed=args.seed,
                     report_interval=args.report_interval)
    with job:
        for inputs, labels in job.micro_batches():
            if args.step_sleep:
                import time

                time.sleep(args.step_sleep)
            job.step(loss_fn(job.model(inputs), labels))


if __name__ == "__main__":
    main()
