"""``bayes-sched demo``: the main job on shipped data — fit every model and write the report."""

from __future__ import annotations

import argparse

from bayes_sched.cli._common import stderr
from bayes_sched.cli.report import prepare_out_dir, write_fit_reports
from perfmodel.datasets import POLLUX_MODELS


def _demo(args: argparse.Namespace) -> int:
    out = prepare_out_dir(args.out)
    stderr.print(f"fitting the {len(POLLUX_MODELS)} shipped Pollux models ...")
    write_fit_reports(list(POLLUX_MODELS), out / "models", seed=args.seed)
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the end-to-end demo on the shipped data and write a report",
        description="Fit every shipped model's throughput posterior and efficiency and write "
        "the report under OUT/models.")
    parser.add_argument("--out", default="report", help="report folder (default: report)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=_demo)
