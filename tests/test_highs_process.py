"""Every HiGHS user of ours in one process: HiGHS sizes one thread scheduler per process at its
first run and fails a later run that asks for another size. Session 13's CI hung on this: a
worker that had solved Sia's program failed every Shockwave solve after, so no job was planned
and a Shockwave simulation ran on to its horizon. Run in a fresh process, where the first
solve sizes the scheduler, whatever ran before in the test worker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import logging
from dataclasses import replace

import numpy as np

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.estimates import NO_ESTIMATES
from bayes_sched.policies import make_policy
from bayes_sched.policies.gavel.max_min_fairness import class_max_min_program
from bayes_sched.policies.sia import config_utilities, normalized_goodputs
from bayes_sched.policies.sia_program import Configurations, solve_assignment
from bayes_sched.mechanisms.time_fraction_lp import HighsModel
from tests.test_gavel_packing import _inputs
from tests.test_shockwave import _view, shockwave_estimates

logging.basicConfig(level=logging.WARNING)


def sia():
    # Three jobs wanting 2 GPUs each on 4 GPUs of one type: the solver has to choose.
    configs = Configurations(np.array([0, 1, 2]), np.zeros(3, dtype=int), np.full(3, 2),
                             np.array([1.0, 2.0, 3.0]))
    utility = config_utilities(normalized_goodputs(configs, 3), -0.5, 1.1)
    chosen = solve_assignment(utility, configs, np.array([4]), 3)
    assert chosen is not None and (chosen >= 0).sum() == 2, chosen
    print("sia ok")


def held_lp():
    _, _, program = class_max_min_program(_inputs())
    assert HighsModel(program).solve()
    print("lp ok")


def shockwave():
    policy = make_policy("shockwave", future_rounds=4)
    state = ClusterState(spec=replace(load_cluster_spec("v100:1x1"), round_interval=120.0),
                         now=0.0)
    policy.decide(state, [_view("behind", 0.0), _view("ahead", 10.0)], shockwave_estimates())
    assert sum(len(jobs) for jobs in policy._plan.values()) == 4, policy._plan
    print("shockwave ok")


for step in (sia, held_lp, shockwave, sia):
    step()
"""


def test_sia_the_held_lp_and_shockwave_all_solve_in_one_process() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sia", "ok", "lp", "ok", "shockwave", "ok", "sia", "ok"]
    assert "failed" not in done.stderr and "status" not in done.stderr, done.stderr
