"""The quick subset of the bad-input corpus (experiments/bad_inputs.py), run as a user runs it.

The corpus script is run as a subprocess (nothing imports experiments): about 25 cases over the
sub-commands, each a real ``bayes-sched`` subprocess on a real bad file or option. Every one must
fail fast with one line naming the flag or file, exit 2 (or 3 for unfinished simulations): no
traceback, no hang, no exit 0. The cases cover issue 14's items 8, 10, 11, 15, 16, 18 (f), 19, 20.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_quick_corpus_fails_every_case_cleanly(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "bad_inputs.py"), "--quick", "--json",
         "--jobs", "2", "--timeout", "120", "--keep", str(tmp_path / "corpus")],
        capture_output=True, text=True, env=env, timeout=900)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    results = report["results"]
    assert len(results) >= 20
    assert {r["command"] for r in results} >= {
        "fit throughput", "fit efficiency", "report", "simulate", "compare", "demo",
        "infer synthetic", "infer interference"}
    failures = [f"{r['outcome']}: {r['argv']} -> exit {r['returncode']}: {r['stderr'][-300:]}"
                for r in results if r["outcome"] != "ok"]
    assert not failures, "\n".join(failures)
    total = report["summary"][-1]
    assert total["command"] == "TOTAL" and total["ok"] == len(results)
