"""The Ray launcher and ``compare --ray`` on a real local Ray cluster (``ray.cluster_utils``): three
logical nodes with logical GPUs and accelerator types, real actors, real subprocesses that write
what they saw into their job directory. One cluster serves the whole module (Ray starts slowly);
every Ray process is on loopback and gone when the module ends."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bayes_sched.backends.launcher import LaunchSpec
from bayes_sched.backends.ray_launcher import (
    DEFAULT_GPU_TYPE,
    ENV_RAY_NODE_ID,
    NODE_LOST_RETURNCODE,
    RayLauncher,
)
from bayes_sched.backends.ray_session import probe_address
from bayes_sched.client.protocol import replica_log_path
from bayes_sched.errors import AllocationError, InputError
from tests.cli_inprocess import run_cli
from tests.real_jobs import local_ray_cluster

ROOT = Path(__file__).resolve().parents[1]
#: Keep Ray light and on loopback (this machine's address is not Ray's to use in tests); Ray
#: reads these when imported, so they are set before it is, for every process it starts.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_DEDUP_LOGS": "0",
           "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PYTHONPATH": str(ROOT)}
os.environ.update({k: v for k, v in RAY_ENV.items() if k != "PYTHONPATH"})
ray = pytest.importorskip("ray")
SMALL_STORE = 80 * 2**20
#: Node death noticed within about a second (Ray's default is 15 s or more).
FAST_HEALTH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 300,
               "health_check_failure_threshold": 3}

#: A replica: writes its environment, records SIGTERM (exiting, unless told to ignore it), and
#: sleeps; mode "fail" makes rank 1 print a line and exit 3.
REPLICA = """\
import json, os, signal, sys, time
from pathlib import Path
mode = sys.argv[1]
job = Path(os.environ["BAYES_SCHED_JOB_DIR"])
rank = os.environ["RANK"]
def on_term(signum, frame):
    (job / f"term-{rank}").write_text(str(time.time()))
    if mode != "ignore-term":
        sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
seen = {k: v for k, v in os.environ.items() if k.startswith("BAYES_SCHED_") or k in (
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")}
seen["pid"] = os.getpid()
(job / f"env-{rank}.tmp").write_text(json.dumps(seen))
os.replace(job / f"env-{rank}.tmp", job / f"env-{rank}.json")
if mode == "fail" and rank == "1":
    print("boom: rank 1 fails", flush=True)
    sys.exit(3)
while True:
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    common = {"num_cpus": 1, "object_store_memory": SMALL_STORE}
    with local_ray_cluster(
            {**common, "num_gpus": 2, "resources": {"accelerator_type:V100": 1},
             "_system_config": FAST_HEALTH},
            [{**common, "num_gpus": 2, "labels": {"ray.io/accelerator-type": "A100-80G"}},
             {**common, "num_gpus": 2}]) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def launcher(cluster: Any) -> Iterator[RayLauncher]:
    """The module's connection to Ray too: the launcher connects this process (probe, then
    ``ray.init``), and disconnects it when closed."""
    launcher = RayLauncher(cluster.address, placement_timeout_seconds=5.0,
                           failure_grace_seconds=2.0)
    assert ray.is_initialized()
    yield launcher
    launcher.close(grace_seconds=1.0)
    assert not ray.is_initialized()


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("scripts") / "replica.py"
    path.write_text(REPLICA)
    return path


def _node_of(launcher: RayLauncher, gpu_type: str) -> int:
    return launcher.cluster_spec().gpu_types.index(gpu_type)


def _spec(launcher: RayLauncher, script: Path, job_dir: Path, counts: dict[str, int],
          mode: str = "run", name: str = "job") -> LaunchSpec:
    spec = launcher.cluster_spec()
    per_node = [0] * spec.num_nodes
    for gpu_type, count in counts.items():
        per_node[spec.gpu_types.index(gpu_type)] = count
    return LaunchSpec(name, (sys.executable, str(script), mode), tuple(per_node), str(job_dir))


def _wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.1)


def _envs(job_dir: Path, world: int) -> list[dict[str, Any]]:
    _wait_for(lambda: all((job_dir / f"env-{r}.json").exists() for r in range(world)), 60,
              "every replica wrote its environment")
    return [json.loads((job_dir / f"env-{r}.json").read_text()) for r in range(world)]


def _live_groups() -> list[dict[str, Any]]:
    from ray.util import placement_group_table

    return [g for g in placement_group_table().values() if g["state"] != "REMOVED"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent's reaper) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(")")[-1].split()[0] == "Z")


def test_cluster_spec_reads_gpu_counts_and_types_from_ray(launcher: RayLauncher) -> None:
    spec = launcher.cluster_spec()
    assert sorted(spec.gpu_types) == sorted(["v100", "a100", DEFAULT_GPU_TYPE])
    assert list(spec.capacity()) == [2, 2, 2]
    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert set(launcher.node_ids) == alive and len(launcher.node_ids) == 3
    assert launcher.cluster_spec().gpu_types == spec.gpu_types  # a stable order


def test_start_places_replicas_on_the_named_nodes_with_their_environment(
        launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    spec = _spec(launcher, script, tmp_path, {"a100": 1, "v100": 2})
    job = launcher.start(spec)
    envs = _envs(tmp_path, 3)
    ids = launcher.node_ids
    types = launcher.cluster_spec().gpu_types
    ranks_on = {t: sorted(int(e["RANK"]) for e in envs
                          if e[ENV_RAY_NODE_ID] == ids[types.index(t)]) for t in types}
    order = [t for t in types if t in ("a100", "v100")]  # ranks fill nodes in spec order
    first, second = order
    assert ranks_on[first] == list(range(spec.gpus_per_node[types.index(first)]))
    assert len(ranks_on["a100"]) == 1 and len(ranks_on["v100"]) == 2
    assert ranks_on[DEFAULT_GPU_TYPE] == []
    for env in envs:
        node_type = types[ids.index(env[ENV_RAY_NODE_ID])]
        assert env["WORLD_SIZE"] == "3" and env["BAYES_SCHED_GPU_TYPE"] == node_type
        assert env["LOCAL_WORLD_SIZE"] == str(len(ranks_on[node_type]))
        assert int(env["LOCAL_RANK"]) == ranks_on[node_type].index(int(env["RANK"]))
        assert env["MASTER_ADDR"] == "127.0.0.1" and 0 < int(env["MASTER_PORT"]) < 65536
        assert env["BAYES_SCHED_PLACEMENT"] == spec.placement
        assert env["BAYES_SCHED_JOB_DIR"] == str(tmp_path) and env["BAYES_SCHED_ATTEMPT"] == "0"
        assert "OMP_NUM_THREADS" not in env  # Ray's 1 for a CPU-less actor is not the job's
    assert len({e["MASTER_PORT"] for e in envs}) == 1
    v100 = [e["CUDA_VISIBLE_DEVICES"] for e in envs if e["BAYES_SCHED_GPU_TYPE"] == "v100"]
    assert sorted(v100) == ["0", "1"]  # each replica its own GPU of its node
    assert job.poll() is None and len(_live_groups()) == 2  # one group per used node
    status = job.stop(grace_seconds=10.0)
    assert status.returncode == 0  # each replica exited on SIGTERM, having recorded it
    assert all((tmp_path / f"term-{r}").exists() for r in range(3))
    assert not any(_alive(e["pid"]) for e in envs)
    assert _live_groups() == []
    assert set(job.timings) == {"placement_group_ready", "actors_up", "processes_started", "stop"}
    _wait_for(lambda: ray.available_resources().get("GPU") == 6.0, 10, "GPUs released")


def test_stop_sends_sigterm_then_sigkill(launcher: RayLauncher, script: Path,
                                         tmp_path: Path) -> None:
    spec = _spec(launcher, script, tmp_path, {"a100": 1}, mode="ignore-term")
    job = launcher.start(dataclasses.replace(spec, env={"OMP_NUM_THREADS": "3"}))
    (env,) = _envs(tmp_path, 1)
    assert env["OMP_NUM_THREADS"] == "3"  # the job's own choice passes
    began = time.monotonic()
    status = job.stop(grace_seconds=1.0)
    assert time.monotonic() - began >= 1.0
    assert (tmp_path / "term-0").exists()  # SIGTERM came first, and was ignored
    assert status.returncode == -signal.SIGKILL
    assert not _alive(env["pid"]) and _live_groups() == []


def test_over_asking_raises_allocation_error_and_reserves_nothing(
        cluster: Any, launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    launcher = RayLauncher(cluster.address, placement_timeout_seconds=1.0)  # same connection
    with pytest.raises(AllocationError, match="not free within 1 s; nothing started"):
        launcher.start(_spec(launcher, script, tmp_path, {"v100": 3}))
    assert _live_groups() == []
    holder = launcher.start(_spec(launcher, script, tmp_path / "holder", {"v100": 2}))
    try:  # a node's GPUs held by one job are not free for another; other nodes' are untouched
        with pytest.raises(AllocationError):
            launcher.start(_spec(launcher, script, tmp_path, {"v100": 1, "a100": 1}))
        assert len(_live_groups()) == 1
    finally:
        holder.stop(grace_seconds=5.0)
    with pytest.raises(AllocationError, match="one per node"):
        launcher.start(LaunchSpec("bad", ("true",), (1,), str(tmp_path)))
    assert _live_groups() == [] and not list(tmp_path.glob("env-*"))


def test_start_many_starts_jobs_together_and_one_failure_leaves_the_others(
        launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    """A round's starts in one call: every job's groups and actors asked for together; a job
    that cannot start gets its AllocationError and holds nothing, the others run. (GPUs not
    free within the bound: test_over_asking_..., through start, which is start_many of one.)"""
    specs = [_spec(launcher, script, tmp_path / "a", {"v100": 1, "a100": 1}, name="a"),
             _spec(launcher, script, tmp_path / "b", {"v100": 1}, name="b"),
             LaunchSpec("c", (sys.executable, str(script), "run"), (1,), str(tmp_path / "c"))]
    began = time.monotonic()
    a, b, c = launcher.start_many(specs)
    assert isinstance(c, AllocationError) and "job c" in str(c) and "one per node" in str(c)
    assert not isinstance(a, Exception) and not isinstance(b, Exception)
    assert [e["BAYES_SCHED_JOB"] for e in _envs(tmp_path / "a", 2)] == ["a", "a"]
    assert _envs(tmp_path / "b", 1)[0]["BAYES_SCHED_GPU_TYPE"] == "v100"
    assert time.monotonic() - began < 30
    assert len(_live_groups()) == 3  # a: two nodes, b: one
    assert a.stop(grace_seconds=5.0).returncode == 0 and b.stop(grace_seconds=5.0).returncode == 0
    assert _live_groups() == [] and not (tmp_path / "c").exists()


def test_a_failed_replica_stops_the_others_and_reports_its_log_tail(
        launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    job = launcher.start(_spec(launcher, script, tmp_path, {"v100": 1, "a100": 1}, mode="fail"))
    envs = _envs(tmp_path, 2)
    _wait_for(lambda: job.poll() is not None, 30, "the job ends after rank 1 fails")
    status = job.poll()
    assert status is not None and status.returncode == 3
    assert "boom: rank 1 fails" in status.log_tail
    assert "boom" in replica_log_path(tmp_path, 0, 1).read_text()
    assert (tmp_path / "term-0").exists() and not _alive(envs[0]["pid"])
    assert _live_groups() == []


def test_a_command_that_cannot_start_fails_with_127_and_its_reason(
        launcher: RayLauncher, tmp_path: Path) -> None:
    spec = launcher.cluster_spec()
    counts = tuple(1 if t == "v100" else 0 for t in spec.gpu_types)
    job = launcher.start(LaunchSpec("missing", (str(tmp_path / "no-such-program"),), counts,
                                    str(tmp_path)))
    _wait_for(lambda: job.poll() is not None, 30, "the job is reported failed")
    status = job.poll()
    assert status is not None and status.returncode == 127
    assert "cannot start" in status.log_tail and "no-such-program" in status.log_tail
    assert _live_groups() == []


def test_an_address_that_does_not_answer_is_one_line_at_once(launcher: RayLauncher,
                                                             tmp_path: Path) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    began = time.monotonic()
    with pytest.raises(InputError, match=f"127.0.0.1:{port}: no Ray cluster answers"):
        probe_address(f"127.0.0.1:{port}", 2.0)
    with pytest.raises(InputError, match="expected auto or HOST:PORT"):
        probe_address("nowhere", 2.0)
    assert time.monotonic() - began < 5
    # Refused also where this process is connected to a cluster already (the fixture's).
    done = run_cli("compare", "--ray", f"127.0.0.1:{port}", "--workloads", "workload-1",
                   "--policies", "fifo", "--out", str(tmp_path / "out"), "--no-progress")
    assert done.returncode == 2, done.stderr
    assert time.monotonic() - began < 30 and ray.is_initialized()
    assert done.stderr.count("\n") == 1 and "--ray" in done.stderr and "Traceback" not in \
        done.stderr and "no Ray cluster answers" in done.stderr
    served = run_cli("serve", "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                     "--state", str(tmp_path / "state"))
    assert served.returncode == 2 and served.stderr.count("\n") == 1, served.stderr
    assert "no Ray cluster answers" in served.stderr and "Traceback" not in served.stderr


@pytest.mark.parametrize(("answer", "reason"), [
    (None, "no answer within 1 s"),  # silent: what Ray's own client retries on for a minute
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "it does not speak gRPC"),  # e.g. the dashboard
])
def test_a_port_that_accepts_tcp_but_is_not_ray_is_one_line_within_the_bound(
        launcher: RayLauncher, tmp_path: Path, answer: bytes | None, reason: str) -> None:
    """A real listening socket on loopback that accepts connections, then says nothing or
    answers as another service would: serve names the flag and what it expected within its
    --ray-timeout, exit 2, no traceback."""
    import threading

    held: list[socket.socket] = []
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]

        def accept() -> None:
            while True:
                try:
                    connection = server.accept()[0]
                except OSError:  # closed at the end of the test
                    return
                held.append(connection)
                if answer is not None:
                    connection.sendall(answer)
        threading.Thread(target=accept, daemon=True).start()
        began = time.monotonic()
        served = run_cli("serve", "--backend", "ray", "--ray-address", f"127.0.0.1:{port}",
                         "--ray-timeout", "1", "--state", str(tmp_path / "state"))
        elapsed = time.monotonic() - began
        assert served.returncode == 2 and served.stderr.count("\n") == 1, served.stderr
        assert f"--ray-address 127.0.0.1:{port}: accepts connections but is not a Ray cluster " \
               f"({reason})" in served.stderr and "ray start --head" in served.stderr
        assert "Traceback" not in served.stderr and held  # it did connect
        assert elapsed < 10, elapsed
        assert ray.is_initialized()  # the module's connection is untouched
    for connection in held:
        connection.close()


def _compare_on_ray_equals_local(cluster: Any, tmp_path: Path, seeds: int,
                                 *policies: str) -> None:
    workload = tmp_path / "tiny.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\n"
                        "a,0,ncf,1,1024\nb,30,bert,2,48\nc,60,ncf,2,1024\nd,90,cifar10,1,128\n")
    argv = ("compare", "--workloads", str(workload), "--policies", *policies,
            "--seed", "3", "--seeds", str(seeds), "--nodes", "2", "--gpus-per-node", "2",
            "--no-progress",
            "--hidden", "contention")
    local = run_cli(*argv, "--processes", "1", "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    # In this process, connected already (the launcher fixture): the runs are Ray tasks in the
    # cluster's worker processes all the same.
    remote = run_cli(*argv, "--ray", cluster.address, "--out", str(tmp_path / "ray"))
    assert remote.returncode == 0, remote.stderr
    assert ray.is_initialized()  # compare leaves a connection it did not make
    assert (tmp_path / "ray" / "jobs.csv").read_bytes() == \
        (tmp_path / "local" / "jobs.csv").read_bytes()
    timing = ("wall_s", "decision_median_ms", "decision_p95_ms", "decision_mean_ms")

    def outcomes(folder: str) -> list[dict[str, Any]]:
        rows = json.loads((tmp_path / folder / "summary.json").read_text())
        return [{k: v for k, v in row.items() if not k.startswith(timing)} for row in rows]
    assert outcomes("ray") == outcomes("local") and len(outcomes("ray")) == seeds * len(policies)


def test_compare_on_ray_equals_local_processes(cluster: Any, launcher: RayLauncher,
                                               tmp_path: Path) -> None:
    # Two runs (two Ray workers, each importing the simulator: the bulk of the time on 2 cores).
    _compare_on_ray_equals_local(cluster, tmp_path, 1, "fifo", "tiresias")


@pytest.mark.slow
def test_compare_on_ray_equals_local_processes_under_pollux(cluster: Any, launcher: RayLauncher,
                                                            tmp_path: Path) -> None:
    _compare_on_ray_equals_local(cluster, tmp_path, 2, "pollux", "fifo")


def test_a_real_training_job_moves_on_ray_and_resumes_from_its_checkpoint(
        launcher: RayLauncher, tmp_path: Path) -> None:
    """The shared backend over the Ray launcher: a tiny PyTorch job (gloo on the CPU) starts on
    one GPU of the V100 node, is moved to two, checkpoints at the request, resumes there, and
    finishes; its step times reach its job model under the node's GPU type."""
    import numpy as np

    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.backends.local import python_command
    from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
    from bayes_sched.client.protocol import read_reports

    example = ROOT / "examples" / "train_tiny.py"
    cluster = RealCluster(launcher, tmp_path / "jobs", RealClusterConfig(
        exit_when_idle=True, poll_interval=0.05, checkpoint_timeout=60, stop_grace=30))
    argv = python_command(str(example), ["--examples", "2048", "--step-sleep", "0.01",
                                         "--report-interval", "0.3"])
    cluster.submit(RealJobSpec("tiny", argv, 32, 256, 64, 2))
    node = _node_of(launcher, "v100")
    one, two = np.zeros(cluster.spec.num_nodes, np.int64), np.zeros(cluster.spec.num_nodes,
                                                                      np.int64)
    one[node], two[node] = 1, 2
    cluster.apply({"tiny": one})
    deadline = time.monotonic() + 120
    while cluster.records["tiny"].progress == 0 and time.monotonic() < deadline:
        cluster.advance(0.2)
    assert cluster.records["tiny"].status == "running", cluster.records["tiny"]
    cluster.apply({"tiny": two})
    while not cluster.done() and time.monotonic() < deadline + 120:
        cluster.advance(0.2)
    record = cluster.records["tiny"]
    assert record.status == "done", record
    reports = read_reports(cluster.job_dir("tiny"))[0]
    starts = [r for r in reports if r["kind"] == "start"]
    acked = [r for r in reports if r["kind"] == "checkpoint"]
    assert [s["attempt"] for s in starts] == [0, 1] and acked
    assert starts[1]["restored"] and starts[1]["step"] >= acked[-1]["step"] > 0
    assert reports[-1]["kind"] == "exit" and reports[-1]["epochs"] == 2.0
    placements = {r["num_replicas"] for r in reports if r["kind"] == "step"}
    assert placements == {1, 2}
    assert {r["gpu_type"] for r in reports if r["kind"] == "step"} == {"v100"}
    assert cluster.job_views() == []  # done: no longer active
    profile = cluster.agent("tiny", "v100").profile()
    assert set(profile.num_replicas.tolist()) == {1, 2}


def _add_t4_node(cluster: Any, launcher: RayLauncher) -> Any:
    launcher.cluster_spec()  # the nodes seen before: the new one comes after them
    extra = cluster.add_node(num_cpus=1, num_gpus=2, object_store_memory=SMALL_STORE,
                             resources={"accelerator_type:T4": 1})
    _wait_for(lambda: launcher.cluster_spec() is not None and extra.node_id in launcher.node_ids,
              30, "the new node is listed")
    return extra


def _counts(spec: Any, **per_type: int) -> Any:
    import numpy as np

    counts = np.zeros(spec.num_nodes, np.int64)
    for gpu_type, count in per_type.items():
        counts[spec.gpu_types.index(gpu_type)] = count
    return counts


def _advance_until(real: Any, condition: Callable[[], bool], seconds: float, what: str) -> None:
    """Advance the cluster until ``condition``; failing, say where each job stands (its record,
    the end of its logs and reports)."""
    def step() -> bool:
        real.advance(0.1)
        return condition()
    try:
        _wait_for(step, seconds, what)
    except AssertionError as error:
        story = []
        for name, record in real.records.items():
            story.append(f"{name}: {record.status} {record.reason!r} attempt {record.attempt}")
            for path in sorted(real.job_dir(name).glob("logs/*")) + [
                    real.job_dir(name) / "reports.jsonl"]:
                if path.exists():
                    story.append(f"{path.name}: {path.read_text()[-1500:]}")
        raise AssertionError(f"{error}\n" + "\n".join(story)) from None


def test_a_removed_node_fails_its_processes_and_the_job_restarts_elsewhere(
        cluster: Any, launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    """A node leaves: the launcher fails the processes of the job it held (its replica's actor
    died; the others get SIGTERM; nothing is left running or reserved) and drops it from the
    spec. The shared backend, reading the nodes every round, stops the job and makes it wait for
    GPUs with no failure counted; the spec, the allocations and the cluster state shrink to the
    nodes left, where the job starts again (its next attempt)."""
    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig

    extra = _add_t4_node(cluster, launcher)
    real = RealCluster(launcher, tmp_path / "jobs", RealClusterConfig(poll_interval=0.05,
                                                                      stop_grace=2.0))
    assert real.spec.num_nodes == 4 and real.node_ids[-1] == extra.node_id
    assert real.spec.gpu_types[-1] == "t4"  # a new node comes last
    real.submit(RealJobSpec("moved", (sys.executable, str(script), "run"), 32, 256, 64, 1))
    counts = _counts(real.spec, v100=1)
    counts[-1] = 1  # one replica on the node about to leave
    real.apply({"moved": counts})
    processes = real._processes["moved"]
    job_dir = real.job_dir("moved")
    envs = _envs(job_dir, 2)
    for path in job_dir.glob("env-*.json"):
        path.unlink()
    cluster.remove_node(extra, allow_graceful=False)
    record = real.records["moved"]
    _advance_until(real, lambda: record.status == "pending", 60, "the job waits for GPUs")
    status = processes.poll()
    assert status is not None and status.returncode == NODE_LOST_RETURNCODE and status.node_lost
    assert f"Ray node {extra.node_id} left the cluster" in status.log_tail
    on_extra = next(e for e in envs if e[ENV_RAY_NODE_ID] == extra.node_id)
    assert all((job_dir / f"term-{e['RANK']}").exists() for e in envs if e is not on_extra)
    _wait_for(lambda: not any(_alive(e["pid"]) for e in envs), 15,
              "no replica outlives its job (the lost node's dies with its actor)")
    assert _live_groups() == []
    assert record.failures == 0 and "left the cluster" in record.reason
    assert launcher.cluster_spec().num_nodes == 3 and extra.node_id not in launcher.node_ids
    assert real.spec.num_nodes == 3 and real.node_ids == launcher.node_ids
    assert real.state.num_nodes == 3 and record.allocation == [0, 0, 0]
    assert real.allocations() == {} and [v.allocation.tolist() for v in real.job_views()] == [
        [0, 0, 0]]
    real.apply({"moved": _counts(real.spec, v100=2)})
    envs = _envs(job_dir, 2)
    v100 = real.node_ids[real.spec.gpu_types.index("v100")]
    assert {e["BAYES_SCHED_ATTEMPT"] for e in envs} == {"1"}
    assert {e[ENV_RAY_NODE_ID] for e in envs} == {v100}
    assert record.status == "running" and record.num_restarts == 1 and record.failures == 0
    real.cancel("moved")
    assert record.status == "cancelled" and _live_groups() == []


@pytest.mark.slow  # three starts of a PyTorch job (each imports torch): 30-90 s on 2 cores
def test_a_training_job_on_a_removed_node_resumes_from_its_checkpoint_elsewhere(
        cluster: Any, launcher: RayLauncher, tmp_path: Path) -> None:
    """A tiny PyTorch job (gloo, CPU) runs across the V100 node and a node that then leaves the
    cluster: the scheduler stops it without counting a failure, places it on the nodes left, and
    it resumes at or after its acknowledged checkpoint and finishes."""
    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.backends.local import python_command
    from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
    from bayes_sched.client.protocol import read_reports

    extra = _add_t4_node(cluster, launcher)
    real = RealCluster(launcher, tmp_path / "jobs", RealClusterConfig(
        exit_when_idle=True, poll_interval=0.05, checkpoint_timeout=60, stop_grace=10))
    argv = python_command(str(ROOT / "examples" / "train_tiny.py"), [
        "--examples", "4096", "--step-sleep", "0.02", "--report-interval", "0.3"])
    real.submit(RealJobSpec("tiny", argv, 32, 256, 64, 2))
    record = real.records["tiny"]
    on_extra = _counts(real.spec)
    on_extra[-1] = 1
    real.apply({"tiny": on_extra})
    _advance_until(real, lambda: record.progress > 0, 120, "the job trains on the new node")
    across = _counts(real.spec, v100=1)
    across[-1] = 1  # moved across two nodes: a checkpoint at the request
    real.apply({"tiny": across})
    _advance_until(real, lambda: record.reported_attempt == 1 and any(
        o["num_replicas"] == 2 for o in record.observations), 120,
        "the job trains across both nodes (its step times reported)")
    cluster.remove_node(extra, allow_graceful=False)
    _advance_until(real, lambda: record.status == "pending", 60, "the job waits for GPUs")
    assert record.failures == 0 and real.spec.num_nodes == 3
    real.apply({"tiny": _counts(real.spec, v100=1)})
    _advance_until(real, real.done, 180, "the job finishes on the nodes left")
    assert record.status == "done" and record.failures == 0, record
    reports = read_reports(real.job_dir("tiny"))[0]
    starts = [r for r in reports if r["kind"] == "start"]
    acked = [r for r in reports if r["kind"] == "checkpoint"]
    assert [s["attempt"] for s in starts] == [0, 1, 2] and acked
    assert starts[2]["restored"] and starts[2]["step"] >= acked[-1]["step"] > 0
    assert reports[-1]["kind"] == "exit" and reports[-1]["epochs"] == 2.0
    assert {r["num_replicas"] for r in reports if r["kind"] == "step"} == {1, 2}


#: A scheduler's stand-in: starts two jobs through the Ray launcher, prints the handle of the
#: first (recorded) but not of the second (killed before its record was saved), and waits to be
#: killed.
DRIVER = """\
import json, sys, time
from bayes_sched.backends.launcher import LaunchSpec
from bayes_sched.backends.ray_launcher import RayLauncher
launcher = RayLauncher(sys.argv[1], placement_timeout_seconds=20.0)
recorded, unrecorded = (launcher.start(LaunchSpec(**spec)) for spec in json.loads(sys.argv[2]))
print(json.dumps(recorded.handle()), flush=True)
time.sleep(600)
"""


def test_a_killed_schedulers_jobs_run_on_and_are_reattached_unrecorded_ones_released(
        cluster: Any, launcher: RayLauncher, script: Path, tmp_path: Path) -> None:
    """A driver (a scheduler) starts two jobs and is SIGKILLed: their detached actors and
    placement groups, and so their processes, run on. A new launcher reattaches to the recorded
    job by its handle (the same processes: same PIDs, no new start), releases the unrecorded
    one (it would run twice), and stops the reattached one as any other; a handle whose actors
    are gone reports the job lost with its node (restarted from its checkpoint, not a failure)."""
    import subprocess

    specs = [dataclasses.asdict(_spec(launcher, script, tmp_path / name, counts, name=name))
             for name, counts in (("kept", {"v100": 1, "a100": 1}), ("stray", {"v100": 1}))]
    env = {**os.environ, **RAY_ENV}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, cluster.address, json.dumps(specs)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None
        handle = json.loads(driver.stdout.readline() or "null")
        assert handle is not None, driver.stderr.read() if driver.stderr else ""
        kept, stray = _envs(tmp_path / "kept", 2), _envs(tmp_path / "stray", 1)
    finally:
        driver.kill()
        driver.wait()
    time.sleep(2.0)  # Ray would have killed a dead driver's non-detached actors by now
    assert all(_alive(e["pid"]) for e in kept + stray)
    assert len(_live_groups()) == 3

    spec = LaunchSpec(**{**specs[0], "gpus_per_node": tuple(specs[0]["gpus_per_node"]),
                         "argv": tuple(specs[0]["argv"])})
    job = launcher.reattach(spec, handle)
    assert job is not None and job.poll() is None
    released = launcher.release_strays([str(tmp_path / "kept"), str(tmp_path / "stray")])
    assert len(released) == 2 and all("rank" in n or "node" in n for n in released)
    _wait_for(lambda: not _alive(stray[0]["pid"]), 15, "the unrecorded start is released")
    assert all(_alive(e["pid"]) for e in kept) and len(_live_groups()) == 2
    assert not (tmp_path / "kept" / "env-0.json.tmp").exists()
    assert sorted(p.name for p in (tmp_path / "kept").glob("env-*.json")) == [
        "env-0.json", "env-1.json"]  # no replica started again
    assert job.stop(grace_seconds=10.0).returncode == 0  # the actors still own the processes
    assert all((tmp_path / "kept" / f"term-{r}").exists() for r in range(2))
    assert not any(_alive(e["pid"]) for e in kept) and _live_groups() == []

    gone = launcher.reattach(spec, handle)  # its actors were killed with the stop
    assert gone is not None
    status = gone.poll()
    assert status is not None and status.node_lost and status.returncode == NODE_LOST_RETURNCODE
    assert "was gone when the scheduler restarted" in status.log_tail


def _serve_on_ray(cluster: Any, state: Path, log: Path, *options: str) -> Any:
    import subprocess

    command = [sys.executable, "-m", "bayes_sched", "serve", "--backend", "ray",
               "--ray-address", cluster.address, "--state", str(state), "--interval", "1",
               "--checkpoint-timeout", "30", "--stop-grace", "20", "--report-timeout", "60",
               "--exit-when-idle", "--max-rounds", "300", *options]
    with log.open("ab") as stream:
        return subprocess.Popen(command, env={**os.environ, **RAY_ENV}, stdout=stream,
                                stderr=subprocess.STDOUT)


def _named_actors() -> list[str]:
    from ray.util import list_named_actors

    return [a["name"] for a in list_named_actors(all_namespaces=True)
            if a["namespace"] == "bayes-sched"]


@pytest.mark.slow  # a serve process started twice and a PyTorch job: 40-80 s on 2 cores
def test_serve_on_ray_sigkilled_and_restarted_reattaches_and_runs_nothing_twice(
        cluster: Any, launcher: RayLauncher, tmp_path: Path) -> None:
    """``bayes-sched serve --backend ray`` is SIGKILLed while a tiny PyTorch job trains, and
    started again over the same state: the job is still known, its processes (detached Ray
    actors) ran on meanwhile, the new scheduler reattaches to them (the same attempt, the same
    process: one start report, step counters that only grow), and the job finishes, with no
    failure and no restart."""
    from bayes_sched.service.state import StateStore

    state, log = tmp_path / "state", tmp_path / "serve.log"
    job = tmp_path / "tiny.toml"
    job.write_text(f'name = "tiny"\nscript = "{ROOT / "examples" / "train_tiny.py"}"\n'
                   'args = ["--examples", "8192", "--step-sleep", "0.04", '
                   '"--report-interval", "0.3"]\ninit_batch_size = 32\nmax_batch_size = 256\n'
                   'max_local_bsz = 64\ntarget_epochs = 2\n')
    assert run_cli("submit", str(job), "--state", str(state)).returncode == 0
    server = _serve_on_ray(cluster, state, log, "--policy", "fifo")
    store = StateStore(state, create=False)
    try:
        def training() -> bool:
            assert server.poll() is None, log.read_text()[-3000:]
            record = store.jobs()[0]["record"]
            return bool(record) and record["status"] == "running" and record["progress"] > 0
        _wait_for(training, 120, "the job trains under the first scheduler")
        server.kill()
        server.wait()
        killed_at = time.time()
        before = store.jobs()[0]["record"]
        reports = read_reports_of(state / "jobs" / "tiny")
        (start,) = [r for r in reports if r["kind"] == "start"]
        assert _alive(start["pid"])
        time.sleep(2.0)  # a non-detached actor would be dead by now, and its process with it
        assert _alive(start["pid"])
        server = _serve_on_ray(cluster, state, log, "--policy", "fifo")
        assert server.wait(timeout=180) == 0, log.read_text()[-3000:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert "reattached: tiny" in log.read_text()  # the service's event line
    (job_row,) = store.jobs()
    record = job_row["record"]
    assert job_row["status"] == "done", record["reason"]
    assert record["attempt"] == before["attempt"] == 1
    assert record["failures"] == 0 and record["num_restarts"] == 0
    reports = read_reports_of(state / "jobs" / "tiny")
    assert [(r["attempt"], r["pid"]) for r in reports if r["kind"] == "start"] == [
        (0, start["pid"])]  # nothing started again
    steps = [r["step"] for r in reports if r["kind"] == "progress"]
    assert steps == sorted(steps)  # no step ran twice: the counter never went back
    assert any(r["kind"] == "progress" and r["time"] > killed_at for r in reports)
    assert [r["status"] for r in reports if r["kind"] == "exit"] == ["done"]
    assert reports[-1]["epochs"] == 2.0
    _wait_for(lambda: _live_groups() == [] and _named_actors() == [], 15,
              "the finished job's actors and groups are released")


def read_reports_of(job_dir: Path) -> list[dict[str, Any]]:
    from bayes_sched.client.protocol import read_reports

    return read_reports(job_dir)[0]


def test_counters_are_keyed_by_ray_node_ids(launcher: RayLauncher, tmp_path: Path) -> None:
    """Two nodes' counters stores: one collector recorded its Ray node id (``collect --node``),
    the other the machine's host name, which every logical node of this cluster shares. The
    cluster state's counters name the first by its Ray node id, as the cluster's nodes are
    named; the ambiguous host name is kept as recorded and noted, never guessed."""
    import numpy as np

    from bayes_sched.backends.counters_feed import CountersFeed
    from bayes_sched.backends.real_cluster import RealCluster
    from counters import schema
    from counters.store import write_store

    launcher.cluster_spec()
    aliases = launcher.node_aliases()
    hostnames = {n["NodeManagerHostname"] for n in ray.nodes() if n["Alive"]}
    assert all(aliases[node] == node for node in launcher.node_ids)
    assert not hostnames & set(aliases)  # shared by three nodes: no alias
    node = launcher.node_ids[1]
    (host,) = hostnames
    seconds = time.time() - 5 + np.arange(6.0)
    for name, recorded in (("first", node), ("second", host)):
        write_store(schema.build(seconds, recorded, {"cpu_user": np.linspace(0, 1, 6)}),
                    tmp_path / "counters" / name)
    real = RealCluster(launcher, tmp_path / "jobs",
                       counters=CountersFeed(tmp_path / "counters", window_seconds=60))
    real.advance(0.0)
    counters = real.state.counters
    assert counters is not None
    assert counters[schema.NODE].values.tolist() == [node, host]
    assert real.counters is not None and f"node(s) {host} match no node" in \
        real.counters.problems[-1]
