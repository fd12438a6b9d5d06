"""Run the ``bayes-sched`` command line in this process, as a subprocess would, minus start-up.

Tests of option handling and small runs use it so that each call costs the work, not a fresh
interpreter importing torch and Pyro (several seconds each on a loaded 2-core machine); the
start-up path itself is tested with real subprocesses in ``test_cli_startup.py``."""

from __future__ import annotations

import io
import os
import subprocess
from contextlib import redirect_stderr, redirect_stdout

from bayes_sched.cli import main


def run_cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """``bayes-sched ARGV``: its exit status and what it printed on stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    umask = os.umask(0o022)  # the service's commands set their own: a subprocess's stays its own
    os.umask(umask)
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(list(argv))
        except SystemExit as stop:  # argparse's --help/--version and usage errors
            status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        finally:
            os.umask(umask)
    return subprocess.CompletedProcess(["bayes-sched", *argv], status, out.getvalue(),
                                       err.getvalue())
