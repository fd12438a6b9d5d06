"""The README's service commands, run as a new user runs them: the lines of its ``bayes-sched
serve`` block, in order, each a real subprocess, from a fresh folder holding the repository's
``examples/`` (as a fresh clone's root does) with every option at its default (``--state`` too),
the package as installed (no ``PYTHONPATH``)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from bayes_sched.client.protocol import latest_log
from bayes_sched.service.state import StateStore

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def service_block() -> list[list[str]]:
    """The argv (after ``bayes-sched``) of each command of the README's bash block that runs
    ``bayes-sched serve``, comments stripped."""
    blocks = [b for b in re.findall(r"```bash\n(.*?)```", README, flags=re.S)
              if "bayes-sched serve" in b]
    assert len(blocks) == 1, "expected one README block with the service's commands"
    commands = [shlex.split(line, comments=True) for line in blocks[0].splitlines()]
    return [argv[1:] for argv in commands if argv and argv[0] == "bayes-sched"]


def test_readme_service_commands_run_from_a_fresh_folder(tmp_path: Path) -> None:
    commands = service_block()
    assert [argv[0] for argv in commands] == ["submit", "serve", "status"]
    assert not any("--state" in argv or "&" in argv for argv in commands)  # the defaults
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    outputs = []
    for argv in commands:
        done = subprocess.run([sys.executable, "-m", "bayes_sched", *argv], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=240)
        assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-3000:])
        outputs.append(done.stdout)
    assert "submitted tiny" in outputs[0]
    # A row of the jobs table, or (a narrow terminal) its stacked field/value form.
    assert re.search(r"│ tiny +│ +done +│", outputs[2]) or (
        re.search(r"│ name +│ tiny +│", outputs[2])
        and re.search(r"│ status +│ done +│", outputs[2])), outputs[2]

    # The job ran in its job directory with absolute paths, and all it wrote is private.
    state = tmp_path / "bayes-sched-state"
    (job,) = StateStore(state, create=False).jobs()
    assert job["status"] == "done" and job["record"]["failures"] == 0
    log = latest_log(state / "jobs" / "tiny")
    assert log is not None
    assert "Traceback" not in log.read_text()
    written = list((state / "jobs" / "tiny").rglob("*"))
    assert any(p.name == "reports.jsonl" for p in written) and log in written
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
