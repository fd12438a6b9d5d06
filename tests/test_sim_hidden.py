"""Hidden interference laws in the simulator: the generator's max-min law, Gavel's measured pairs,
the counters they emit, and that policies see counters but never the truth."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from bayes_sched.errors import InputError
from bayes_sched.interference.gavel import load_gavel_pairs
from bayes_sched.sim import SimConfig, Workload, read_workload, run_simulation
from bayes_sched.sim.laws import RunningJob, make_hidden
from bayes_sched.sim.laws.contention import ARTIFACT_NODE, ContentionLaw, job_demands
from bayes_sched.sim.laws.contention_generator import max_min_share
from bayes_sched.sim.laws.gavel_pairs import GAVEL_TYPE_OF, GavelLaw
from bayes_sched.sim.simulator import SimulatedCluster
from counters import schema
from counters.rates import counter_rate


def _job(app: str, counts: list[int], local_bsz: int = 8) -> RunningJob:
    return RunningJob(app, np.array(counts), local_bsz)


def test_contention_law_follows_max_min_at_the_nic() -> None:
    law = ContentionLaw(demand_spread=0.0)
    alone = {"a": _job("bert", [2, 2, 0, 0], 4)}
    assert law.slowdowns(alone) == {}  # a job alone runs as profiled
    # Two distributed jobs sharing both nodes: their sync traffic contends for the NIC.
    shared = {"a": _job("bert", [2, 2, 0, 0], 4), "b": _job("yolov3", [2, 2, 0, 0], 4)}
    slow = law.slowdowns(shared)
    nic = np.array([job_demands(j.application, (2, 2), 4, ARTIFACT_NODE)[2]
                    for j in shared.values()])
    grant = max_min_share(nic, ARTIFACT_NODE.nic_capacity)
    expected = 1 - grant / nic
    got = np.array([slow.get("a", 0.0), slow.get("b", 0.0)])
    assert nic.sum() > ARTIFACT_NODE.nic_capacity and got.max() > 0.1
    # A job goes at its worst-served resource: at least as slow as the NIC's max-min share.
    assert np.all(got >= expected - 1e-9)
    # Single-GPU jobs with no sync traffic sharing a node barely contend.
    singles = {n: _job("cifar10", [1, 0, 0, 0], 128) for n in ("c", "d", "e", "f")}
    assert max(law.slowdowns(singles).values(), default=0.0) < 0.05


def test_contention_counters_follow_the_schema_and_show_the_traffic() -> None:
    law = ContentionLaw(demand_spread=0.0, missing_fraction=0.0)
    jobs = {"a": _job("bert", [2, 2, 0, 0], 4), "b": _job("imagenet", [2, 2, 0, 0], 50)}
    law.slowdowns(jobs)
    rng = np.random.default_rng(0)
    first = law.counters(0.0, 60.0, 4, rng)
    second = law.counters(60.0, 60.0, 4, rng)
    window = xr.concat([first, second], dim="time")
    schema.validate(window)
    rate = counter_rate(window["network_rx"]).mean("time")
    # Nodes 0-1 carry both jobs' all-reduce, nodes 2-3 are idle.
    assert float(rate.isel(node=0)) > 1e8 and float(rate.isel(node=3)) == 0.0
    assert np.all(np.diff(window["network_rx"].isel(node=0).values) >= 0)  # cumulative


def test_gavel_law_uses_the_measured_pairs() -> None:
    law = GavelLaw(node_share_factor=0.5)
    pairs = load_gavel_pairs()
    v100 = pairs[pairs["gpu"] == "v100"]
    measured = v100[(v100.type_a == GAVEL_TYPE_OF["imagenet"])
                    & (v100.type_b == GAVEL_TYPE_OF["cifar10"])]["speed_a"].mean()
    jobs = {"x": _job("imagenet", [1, 0]), "y": _job("cifar10", [1, 0]),
            "z": _job("bert", [0, 2])}
    slow = law.slowdowns(jobs)
    assert slow["x"] == pytest.approx(0.5 * (1 - min(measured, 1.0)))
    assert "z" not in slow  # alone on its node
    with pytest.raises(InputError, match="node_share_factor"):
        GavelLaw(node_share_factor=1.5)
    with pytest.raises(InputError, match="unknown hidden"):
        make_hidden("cosmic-rays")


def test_simulator_applies_the_law_and_policies_see_only_counters() -> None:
    jobs = [job for job in read_workload("workload-1").jobs if job.num_replicas <= 16][:8]
    workload = Workload("w1-slice", tuple(jobs))
    config = SimConfig(num_nodes=4, gpus_per_node=4, max_time=1200.0, hidden=ContentionLaw())
    cluster = SimulatedCluster(workload, config)
    cluster.advance(60.0)
    state = cluster.state
    assert state.counters is not None and "network_rx" in state.counters
    assert not hasattr(state, "hidden")
    plain = run_simulation(workload, "pollux", SimConfig(num_nodes=4, gpus_per_node=4,
                                                         max_time=1200.0))
    gavel = run_simulation(workload, "pollux", SimConfig(num_nodes=4, gpus_per_node=4,
                                                         max_time=1200.0,
                                                         hidden=GavelLaw(node_share_factor=1.0)))
    # Sharing nodes now costs progress: jobs finish later or fewer finish.
    done_plain, done_gavel = plain.summary["finished"], gavel.summary["finished"]
    assert done_gavel < done_plain or (gavel.jobs["jct"].sum() > plain.jobs["jct"].sum())
