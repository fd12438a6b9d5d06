"""Three real tiny PyTorch jobs (gloo on the CPU) scheduled by Pollux on a real local Ray cluster
(``ray.cluster_utils``: two logical nodes of two logical GPUs each, one GPU type), through the
scheduler service and its SQLite state, as ``bayes-sched serve --backend ray`` runs them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli_inprocess import run_cli
from tests.real_jobs import (
    check_moved_jobs,
    check_step_times_reach_the_model,
    local_ray_cluster,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_tiny.py"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(RAY_ENV)
ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    common: dict[str, Any] = {"num_cpus": 1, "num_gpus": 2, "object_store_memory": 80 * 2**20}
    with local_ray_cluster(common, [common]) as cluster:
        yield cluster.address


@pytest.mark.slow  # a dozen starts of PyTorch processes: 2-4 minutes on a loaded 2-core machine
def test_three_jobs_under_pollux_on_ray_move_resume_and_feed_their_models(
        address: str, tmp_path: Path) -> None:
    """Pollux reallocates the jobs as their models fit; every restart resumes at or after the
    checkpoint acknowledged at the request, nothing runs twice, the batch Pollux tunes is the
    one the job trains with, and the step times measured on Ray are the job model's data."""
    from bayes_sched.backends.ray_launcher import RayLauncher
    from bayes_sched.backends.real_cluster import RealClusterConfig
    from bayes_sched.policies import make_policy
    from bayes_sched.service.serve import Service
    from bayes_sched.service.state import StateStore

    state = tmp_path / "state"
    names = ("a", "b", "c")
    for seed, name in enumerate(names):
        values = {"name": name, "script": str(EXAMPLE), "init_batch_size": 32,
                  "max_batch_size": 256, "max_local_bsz": 64, "target_epochs": 2,
                  "args": ["--examples", "4096", "--seed", str(seed), "--step-sleep", "0.03",
                           "--report-interval", "0.5"]}
        path = tmp_path / f"{name}.toml"
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()))
        assert run_cli("submit", str(path), "--state", str(state)).returncode == 0
    launcher = RayLauncher(address, restart_delay=2.0, round_interval=1.5,
                           placement_timeout_seconds=20.0)
    try:
        assert launcher.cluster_spec().num_nodes == 2
        config = RealClusterConfig(checkpoint_timeout=20.0, stop_grace=20.0,
                                   report_timeout=60.0, poll_interval=0.05,
                                   exit_when_idle=True)
        service = Service(StateStore(state), launcher, make_policy("pollux"), config)
        service.run(interval=1.5, max_rounds=300)
        service.store.close()
        store = StateStore(state, create=False)
        jobs = {j["name"]: j for j in store.jobs()}
        assert set(jobs) == set(names)
        assert check_moved_jobs(state, jobs, 2.0) >= 1  # Pollux moved at least one job
        placements = {len(p) for j in jobs.values()
                      for _, p in j["record"]["allocation_history"] if p}
        assert placements  # the allocations went through Ray's nodes
        gpu_type = launcher.cluster_spec().gpu_types[0]
        for name in names:
            check_step_times_reach_the_model(state, jobs[name]["record"], gpu_type, launcher)
    finally:
        launcher.close(grace_seconds=2.0)
