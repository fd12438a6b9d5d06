"""The ``bayes-sched`` command line: the front door, the one module that may import every package.

Each sub-command group lives in its own module exposing ``register(subparsers)``; add a module to
:data:`COMMAND_MODULES` to add a group. Options are checked by the parser before any work starts
(:mod:`bayes_sched.cli.options`).

Exit statuses: 0 done; 2 bad input or options (one line naming the file, row, column or flag);
3 a simulation whose jobs did not all finish; 130 interrupted (Ctrl-C); 141 stdout closed early
(e.g. piped into ``head``); 1 an unexpected error, a bug: one line with the exception's type
and message (set ``BAYES_SCHED_DEBUG=1`` to see its traceback).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

from bayes_sched import __version__
from bayes_sched.cli._common import USER_ERRORS, fail
from bayes_sched.cli.options import OptionParser

COMMAND_MODULES: tuple[str, ...] = (
    "bayes_sched.cli.fit",
    "bayes_sched.cli.report",
    "bayes_sched.cli.demo",
    "bayes_sched.cli.collect",
    "bayes_sched.cli.simulate",
    "bayes_sched.cli.infer",
)

#: Set to a non-empty value to let unexpected exceptions print their traceback.
DEBUG_VARIABLE = "BAYES_SCHED_DEBUG"


def build_parser() -> OptionParser:
    parser = OptionParser(
        prog="bayes-sched",
        description="Bayesian scheduling and performance modelling for GPU deep-learning clusters.",
    )
    parser.add_argument("--version", action="version", version=f"bayes-sched {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        status = args.handler(args)
        sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's last flush
    except USER_ERRORS as error:
        return fail(str(error))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return 141
    except Exception as error:  # a bug: one visible line, not a silent exit
        if os.environ.get(DEBUG_VARIABLE):
            raise
        return fail(f"internal error: {type(error).__name__}: {error} (a bug, not your input: "
                    f"please report it with the command line; set {DEBUG_VARIABLE}=1 for the "
                    "traceback)", status=1)
    return int(status or 0)


if __name__ == "__main__":
    sys.exit(main())
