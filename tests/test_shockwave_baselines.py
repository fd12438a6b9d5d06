"""Shockwave's baselines in its world: ``simulate --trace`` on a Shockwave trace runs them with
the settings of Shockwave's artifact where they differ from Gavel's (AlloX's alpha 0.2, FTF's
isolated share, Gandiva-fair's equal time per job), unless told otherwise."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli_inprocess import run_cli
from tests.test_shockwave import GOOD


def _avg_jct(trace: Path, policy: str, *options: str) -> float:
    flags = [item for option in options for item in ("--policy-opt", option)]
    done = run_cli("simulate", "--trace", str(trace), "--cluster", "v100:1x1", "--policy",
                   policy, *flags, "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["finished"] == 3
    return float(row["avg_jct"])


def test_shockwave_trace_runs_allox_and_ftf_with_shockwaves_settings(tmp_path: Path) -> None:
    """Three static jobs arrive together on one GPU, the longest first. AlloX at Shockwave's
    alpha 0.2 matches only the longest-waiting job (the first in line) to the free GPU; at
    Gavel's 1.0 every waiting job enters the matching and the shortest goes first."""
    static = GOOD.replace("\tgns\t", "\tstatic\t")
    trace = tmp_path / "three.trace"
    trace.write_text("\n".join(static.replace("\t77584\t", f"\t{steps}\t")
                               for steps in (12000, 6000, 3000)) + "\n")
    default = _avg_jct(trace, "allox")
    assert default == _avg_jct(trace, "allox", "alpha=0.2")
    assert default > _avg_jct(trace, "allox", "alpha=1.0")
    ftf = _avg_jct(trace, "finish_time_fairness")
    assert ftf == _avg_jct(trace, "finish_time_fairness", "isolated_share=shockwave")
