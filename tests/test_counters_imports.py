"""Import directions: counters depends on nothing of ours, collectors only on counters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OURS = ("counters", "collectors", "perfmodel", "bayes_sched", "experiments")


def loaded_after(module: str) -> set[str]:
    code = (f"import json, pkgutil, sys\nimport {module}\n"
            f"import {module} as package\n"
            "for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
            "    __import__(info.name)\n"
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=True)
    return set(json.loads(result.stdout)) & set(OURS)


def test_counters_imports_nothing_of_ours() -> None:
    assert loaded_after("counters") == {"counters"}


def test_collectors_import_only_counters() -> None:
    assert loaded_after("collectors") == {"collectors", "counters"}
