"""``simulate --trace --measurement-noise SD``: the noise on the steps/s jobs report, as a flag.

Bad values are a one-line error naming the flag with exit 2; a valid value reaches the jobs'
reports (a policy that learns from them decides differently), and the physics does not change
(a policy reading the table runs exactly as with exact reports)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMALL_TRACE = ROOT / "bayes_sched" / "data" / "gavel" / "traces" / "small_test.trace"


def _long_trace(tmp_path: Path) -> Path:
    """Six jobs of the shipped small trace with 30,000 steps each (some 50 rounds on six GPUs)."""
    rows = SMALL_TRACE.read_text().splitlines()[:6]
    fields = [row.split("\t") for row in rows]
    for f in fields:
        f[5] = "30000"
    path = tmp_path / "long.trace"
    path.write_text("".join("\t".join(f) + "\n" for f in fields))
    return path


def _simulate(trace: Path, *extra: str) -> dict[str, float]:
    done = run_cli("simulate", "--trace", str(trace), "--cluster", "v100:1x2,p100:1x2,k80:1x2",
                   "--json", "--no-progress", *extra)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return row


@pytest.mark.parametrize("value", ["-0.1", "nan", "inf", "lots"])
def test_a_bad_measurement_noise_is_a_one_line_error(value: str) -> None:
    done = run_cli("simulate", "--trace", "small_test", "--measurement-noise", value)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "--measurement-noise" in lines[0] and ">= 0" in lines[0]
    assert "Traceback" not in done.stderr


def test_measurement_noise_outside_the_table_world_is_refused() -> None:
    done = run_cli("simulate", "--workload", "workload-6", "--measurement-noise", "0.1")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "--measurement-noise" in done.stderr


def test_measurement_noise_reaches_the_reports_and_not_the_physics(tmp_path: Path) -> None:
    trace = _long_trace(tmp_path)
    learner = ("--estimator", "throughput=per_cell")
    exact = _simulate(trace, "--measurement-noise", "0", *learner)
    noisy = _simulate(trace, "--measurement-noise", "1.0", *learner)
    # A learner reading the reports decides on what it was told: other allocations.
    assert (exact["avg_jct"], exact["rounds"]) != (noisy["avg_jct"], noisy["rounds"])
    # The oracle's known table reads no report: the run is the same whatever the noise.
    table_exact = _simulate(trace, "--measurement-noise", "0")
    table_noisy = _simulate(trace, "--measurement-noise", "1.0")
    assert table_exact["avg_jct"] == table_noisy["avg_jct"]
    assert table_exact["rounds"] == table_noisy["rounds"]
