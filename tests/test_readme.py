"""The README's first block and the Python API example (docs/guide/models.md) run as written."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MODELS_PAGE = (ROOT / "docs" / "guide" / "models.md").read_text()
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def code_blocks(language: str, text: str = README) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def test_readme_starts_with_the_two_setup_commands() -> None:
    first = code_blocks("bash")[0].strip().splitlines()
    assert [line.split("#")[0].strip() for line in first] == [
        "bash scripts/demo.sh", "bash scripts/test.sh"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "scripts/test.sh" in ci


def test_python_api_example_runs(tmp_path: Path) -> None:
    # The API example is the block that imports the package (others are fragments of scripts).
    (block,) = [b for b in code_blocks("python", MODELS_PAGE) if b.startswith(("import", "from"))]
    result = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True,
                            env=ENV, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") >= 3


# Every README command (and every docs command) is run or accounted for in test_docs_commands.
