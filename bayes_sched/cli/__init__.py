"""The ``bayes-sched`` command line: the front door, the one module that may import every package.

Each sub-command group lives in its own module exposing ``register(subparsers)``; add a module to
:data:`COMMAND_MODULES` to add a group.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from bayes_sched import __version__
from bayes_sched.cli._common import USER_ERRORS, fail

COMMAND_MODULES: tuple[str, ...] = (
    "bayes_sched.cli.fit",
    "bayes_sched.cli.report",
    "bayes_sched.cli.demo",
    "bayes_sched.cli.collect",
    "bayes_sched.cli.simulate",
    "bayes_sched.cli.infer",
    "bayes_sched.cli.listing",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bayes-sched",
        description="Bayesian scheduling and performance modelling for GPU deep-learning clusters.",
    )
    parser.add_argument("--version", action="version", version=f"bayes-sched {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        status = args.handler(args)
    except USER_ERRORS as error:
        return fail(str(error))
    except KeyboardInterrupt:
        return fail("interrupted", status=130)
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
