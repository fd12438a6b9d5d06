"""Starts real ``bayes-sched collect`` processes quickly, for the SIGKILL fault-injection test.

Run as a script, it imports the CLI once, then reads one JSON request per line on stdin --
``{"argv": [...], "stderr": PATH}`` -- forks a child that runs ``bayes_sched.cli.main(argv)`` with
its stderr written to PATH, and answers the child's pid on stdout. The child is a real process
running the real command (the test SIGKILLs it); forking skips the seconds of imports a fresh
interpreter would spend per start. The command modules import the collector sources lazily, so
:func:`warm_up` imports them once before serving. (A collector's commits run in fresh child
interpreters, :mod:`counters.committer`, which the test's kills may orphan or cut short too.)
Children are reaped automatically (SIGCHLD ignored here).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys

from bayes_sched.cli import build_parser, main


def warm_up() -> None:
    """Import what ``collect --out`` loads lazily (the sources, numpy, the journal and the
    committer's parent side; its commits run in child processes, which import xarray)."""
    for module in ("collectors.daemon", "collectors.nvml", "collectors.pcie", "collectors.perf",
                   "collectors.procfs", "counters.committer"):
        importlib.import_module(module)


def serve() -> None:
    build_parser()  # import every command module before forking
    warm_up()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            fd = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(fd, 2)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            sys.stderr = os.fdopen(2, "w", buffering=1)
            status = 1
            try:
                status = main(request["argv"])
            finally:
                os._exit(status)
        sys.stdout.write(f"{pid}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    serve()
