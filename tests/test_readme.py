"""The README's examples run exactly as written."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_readme_starts_with_the_two_setup_commands() -> None:
    first = code_blocks("bash")[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in first] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_python_api_example_runs(tmp_path: Path) -> None:
    # The API example is the block that imports the package (others are fragments of scripts).
    (block,) = [b for b in code_blocks("python") if b.startswith(("import", "from"))]
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                            env=ENV, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") >= 3


def test_quick_cli_examples_run(tmp_path: Path) -> None:
    commands = [line.split("#")[0].strip() for block in code_blocks("bash")
                for line in block.splitlines() if line.startswith("bayes-sched ")]
    assert len(commands) >= 5
    # The quick ones run here; the fits and reports are exercised in test_cli_perfmodel.
    quick = [c for c in commands if "--method point" in c or c.startswith("bayes-sched fit eff")]
    assert quick
    for command in quick:
        args = shlex.split(command)[1:]
        result = subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                                text=True, env=ENV, cwd=tmp_path, timeout=300)
        assert result.returncode == 0, (command, result.stderr)
