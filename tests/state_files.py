"""Real state folders for the state tests: a populated one written by the store itself, and the
``bayes-sched`` command line run as a real subprocess (optionally as another user)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.service.state import StateStore

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534


def spec(name: str, argv: tuple[str, ...] = ("python", "train.py")) -> RealJobSpec:
    """A job spec with a few hundred bytes of environment (so that rows fill several pages)."""
    return RealJobSpec(name=name, argv=argv, init_batch_size=32, max_batch_size=256,
                       max_local_bsz=64, target_epochs=2,
                       env={"NOTE": f"{name} " + "x" * 600})


def populated_state(root: Path, jobs: int = 60, rounds: int = 40) -> dict[str, dict[str, Any]]:
    """A state with ``jobs`` jobs (every other one taken up, with a record) and ``rounds``
    rounds, written through :class:`StateStore`; returns ``store.jobs()`` by name."""
    store = StateStore(root)
    for k in range(jobs):
        store.submit(spec(f"job{k:03d}"))
    records = [{"spec": {"name": f"job{k:03d}"}, "status": "running", "epochs": 0.5,
                "allocation": [1, 0], "log": "y" * 300} for k in range(0, jobs, 2)]
    store.epoch()
    for number in range(1, rounds + 1):
        store.save(records, round_row=(number, 60.0 * number, {"job000": [1, 0]},
                                       {"job000": {"goodput": 1.0}}, 0.01))
    result = {job["name"]: job for job in store.jobs()}
    store.close()
    return result


def truncate_half(path: Path) -> None:
    """Cut a file to half its length (a disk or copy that stopped half-way)."""
    size = path.stat().st_size
    with path.open("r+b") as stream:
        stream.truncate(size // 2)


def setpriv() -> str | None:
    """``setpriv`` where this process may use it to run commands as uid 65534 (root only)."""
    tool = shutil.which("setpriv")
    return tool if tool is not None and os.geteuid() == 0 else None


def cli(*args: str, as_nobody: bool = False, timeout: float = 120.0,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``bayes-sched ARGS`` in a real subprocess (as uid 65534 with ``as_nobody``)."""
    prefix: list[str] = []
    if as_nobody:
        tool = setpriv()
        assert tool is not None
        prefix = [tool, "--reuid", str(NOBODY), "--regid", str(NOBODY), "--clear-groups"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("BAYES_SCHED_DEBUG", None)
    return subprocess.run([*prefix, sys.executable, "-m", "bayes_sched", *args],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def one_error_line(result: subprocess.CompletedProcess[str], *expected: str) -> str:
    """Check ``result`` failed as bad input: exit 2, one line on stderr holding each of
    ``expected``, no traceback, no internal error; returns the line."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]
