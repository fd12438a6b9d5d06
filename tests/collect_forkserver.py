"""Starts real ``bayes-sched collect`` processes quickly, for the SIGKILL fault-injection test.

Run as a script, it imports the CLI once, then reads one JSON request per line on stdin --
``{"argv": [...], "stderr": PATH}`` -- forks a child that runs ``bayes_sched.cli.main(argv)`` with
its stderr written to PATH, and answers the child's pid on stdout. The child is a real process
running the real command (the test SIGKILLs it); forking skips the seconds of imports a fresh
interpreter would spend per start. The command modules import xarray, zarr and the collector
sources lazily, so :func:`warm_up` writes, journals and reads a small store once before serving:
each child then starts in a fraction of a second instead of re-importing them (about 2 s on a
loaded 2-core machine). Children are reaped automatically (SIGCHLD ignored here).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from pathlib import Path

from bayes_sched.cli import build_parser, main


def warm_up() -> None:
    """Import what ``collect --out`` loads lazily (xarray, zarr, numcodecs, the sources) by doing
    it once: commit a part, journal a sample, recover the journal, read the store back."""
    import numpy as np

    import collectors.daemon
    import collectors.nvml
    import collectors.pcie
    import collectors.perf
    import collectors.procfs  # noqa: F401  (imported for the children)
    from counters import schema
    from counters.journal import JournalLayout
    from counters.store import StoreWriter, open_store

    with tempfile.TemporaryDirectory(prefix="forkserver-warm-") as folder:
        store = Path(folder) / "store"
        writer = StoreWriter(store)
        writer.append(schema.build(np.array([1.0, 2.0]), "warm", {"cpu_user": np.ones(2)}))
        writer.journal_layout = JournalLayout(node="warm", node_counters=("cpu_user",),
                                              device_counters=(), n_devices=0, gpu_uuid=())
        writer.log(writer.journal_layout.row(3.0, {"cpu_user": 1.0}))
        writer.close()
        StoreWriter(store).close()  # recovers the journal into a part
        open_store(store, lazy=False)


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
