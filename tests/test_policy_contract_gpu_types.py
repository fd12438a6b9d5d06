"""The policy contract, for every registered policy: on a two-GPU-type cluster a decision is a valid
allocation (GPUs per node within each node's capacity, known jobs only) for zero jobs, for jobs
with and without observations, and for more jobs than GPUs; a cluster a policy cannot use is
refused with one clear line."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_sched.agent import JobAgent
from bayes_sched.cluster import ClusterState, validate_allocations
from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobSettings, JobView
from bayes_sched.policies import POLICIES, make_policy
from bayes_sched.sim.physics import get_application
from tests.agents import decide, job_view, measured_agent

#: Two GPU types, equal nodes: 2 nodes of 4 V100 then 2 nodes of 4 K80.
TWO_TYPES = ClusterState(spec=parse_cluster_spec("v100:2x4,k80:2x4"), now=600.0)


def _view(cluster: ClusterState, name: str, replicas: int = 1, batch: int = 256,
          submit: float = 0.0, app: str = "cifar10", allocation: list[int] | None = None,
          agent: JobAgent | None = None) -> JobView:
    settings = JobSettings(batch, replicas)
    agent = agent or JobAgent(name, get_application(app).limits, settings)
    return job_view(agent, app, cluster.now, allocation or [0] * cluster.num_nodes, submit=submit,
                    replicas=replicas, batch=batch, settings=settings)


def _decide(name: str, cluster: ClusterState, jobs: list[JobView]) -> dict[str, np.ndarray]:
    # A short genetic search where a policy has one: the contract is validity, not quality.
    quick: dict[str, object] = (
        {"ga": {"population": 16, "generations": 8}} if "ga" in POLICIES.options(name)
        else {"future_rounds": 4} if "future_rounds" in POLICIES.options(name) else {})
    policy = make_policy(name, **quick)
    decision = decide(policy, cluster, jobs)
    # validate_allocations raises on an unknown job, a wrong shape or an oversubscribed node.
    valid = validate_allocations(decision, cluster, [job.name for job in jobs])
    used = sum(valid.values(), np.zeros(cluster.num_nodes, dtype=np.int64))
    assert np.all(used <= cluster.capacity())
    return valid


def test_the_two_type_cluster_is_what_the_contract_says() -> None:
    assert TWO_TYPES.gpu_types == ("v100", "v100", "k80", "k80")
    assert TWO_TYPES.gpus_of_type("v100") == 8 and TWO_TYPES.gpus_of_type("k80") == 8
    assert TWO_TYPES.gpus_of_type("t4") == 0 and TWO_TYPES.total_gpus == 16


@pytest.mark.parametrize("name", list(POLICIES))
def test_zero_jobs_get_an_empty_allocation(name: str) -> None:
    assert _decide(name, TWO_TYPES, []) == {}


@pytest.mark.parametrize("name", list(POLICIES))
def test_new_and_measured_jobs_on_two_gpu_types(name: str) -> None:
    jobs = [_view(TWO_TYPES, "fresh", 2, submit=10.0),
            _view(TWO_TYPES, "measured", 4, 1024, agent=measured_agent("measured")),
            _view(TWO_TYPES, "running", 2, allocation=[0, 0, 2, 0],
                  agent=measured_agent("running"))]
    decision = _decide(name, TWO_TYPES, jobs)
    assert decision, "three jobs and 16 free GPUs: someone must run"


@pytest.mark.parametrize("name", list(POLICIES))
def test_more_jobs_than_gpus(name: str) -> None:
    jobs = [_view(TWO_TYPES, f"j{i:02d}", 1 + i % 3, submit=float(i),
                  agent=measured_agent(f"j{i:02d}") if i % 2 else None) for i in range(24)]
    decision = _decide(name, TWO_TYPES, jobs)
    assert 0 < len(decision) < len(jobs)
    assert sum(int(v.sum()) for v in decision.values()) <= TWO_TYPES.total_gpus


@pytest.mark.parametrize("name", list(POLICIES))
def test_nodes_of_different_sizes_are_used_validly_or_refused_in_one_line(name: str) -> None:
    cluster = ClusterState(spec=parse_cluster_spec("v100:1x8,k80:2x4"), now=600.0)
    jobs = [_view(cluster, "a", 2, agent=measured_agent("a")), _view(cluster, "b", 8),
            _view(cluster, "c", 1, submit=5.0)]
    try:
        decision = _decide(name, cluster, jobs)
    except InputError as error:
        assert "\n" not in str(error) and "GPUs" in str(error)
        return
    assert decision
