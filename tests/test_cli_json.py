"""Machine output: every ``--json`` of the command line is strict JSON (no NaN or Infinity), numbers
are numbers, and a reader that stops early (``| head``) gets no traceback."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.tables import print_json

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def strict(text: str) -> object:
    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def run_cli(*args: str, cwd: Path) -> str:
    result = subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                            text=True, env=ENV, cwd=cwd, timeout=300)
    assert result.returncode == 0, (args, result.stderr)
    return result.stdout


def test_every_json_output_is_strict_json(tmp_path: Path) -> None:
    store = tmp_path / "store"
    run_cli("collect", "--sources", "procfs", "--out", str(store), "--samples", "4",
            "--interval", "0.05s", "--quiet", cwd=tmp_path)
    outputs = {
        "catalog": run_cli("counters", "catalog", "--json", cwd=tmp_path),
        "info": run_cli("counters", "info", str(store), "--json", cwd=tmp_path),
        "validate": run_cli("counters", "validate", str(store), "--json", cwd=tmp_path),
        "align": run_cli("counters", "align", str(store), "--interval", "50ms", "--out",
                         str(tmp_path / "aligned.nc"), "--json", cwd=tmp_path),
        "point": run_cli("fit", "throughput", "cifar10", "--method", "point", "--json",
                         cwd=tmp_path),
        "efficiency": run_cli("fit", "efficiency", "imagenet", "--batch-size", "400", "3200",
                              "--json", cwd=tmp_path),
        "simulate": run_cli("simulate", "--workload", "workload-6", "--max-jobs", "3",
                            "--policy", "fifo", "--no-progress", "--json", cwd=tmp_path),
    }
    parsed = {name: strict(text) for name, text in outputs.items()}
    info = parsed["info"]
    assert isinstance(info, dict) and info["samples"] == 4 and info["parts"] >= 1
    names = [row["name"] for row in info["variables"]]
    assert names == sorted(names) and "(store)" not in names and "cpu_user" in names
    assert all(isinstance(row["valid_fraction"], float) for row in info["variables"])
    efficiency = parsed["efficiency"]
    assert isinstance(efficiency, list)
    assert {type(row["progress"]) for row in efficiency} == {float}
    assert {row["batch_size"] for row in efficiency} == {400, 3200}
    assert all(row["lower_90"] <= row["efficiency"] <= row["upper_90"] for row in efficiency)
    assert all(isinstance(row["avg_jct"], float | int) for row in parsed["simulate"])


def test_non_finite_numbers_print_as_null(capsys: pytest.CaptureFixture[str]) -> None:
    print_json([{"a": float("nan"), "b": np.float32(2.5), "c": np.array([1.0, np.inf]),
                 "d": np.int64(3), "e": math.inf, "f": "text"}])
    assert strict(capsys.readouterr().out) == [
        {"a": None, "b": 2.5, "c": [1.0, None], "d": 3, "e": None, "f": "text"}]


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_reader_that_leaves_early_gets_no_traceback(json_flag: list[str]) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "bayes_sched", "counters", "catalog", *json_flag],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    assert process.stdout is not None
    process.stdout.close()  # like `| head` that has read enough
    _, stderr = process.communicate(timeout=120)
    # Quiet, and not a success: 141 (SIGPIPE's status) from our guard, 1 where rich's console
    # met the closed pipe first and exited itself.
    assert stderr == b"" and process.returncode in (1, 141)
