"""A job that fails on its first start (before training) and trains as examples/train_tiny.py on
every later one: the service's retry and restart path on a job that then finishes. It imports
the checkout it lies in (a job's environment carries no PYTHONPATH)."""

import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if os.environ.get("BAYES_SCHED_ATTEMPT") == "0":
    print("first start: failing on purpose", file=sys.stderr)
    sys.exit(3)
sys.path.insert(0, str(ROOT))
runpy.run_path(str(ROOT / "examples" / "train_tiny.py"), run_name="__main__")
