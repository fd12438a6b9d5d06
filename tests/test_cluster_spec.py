"""The cluster as data: specs from strings and files, what policies and the simulator read from
them, registries with typed options, and bad input as one line with exit status 2."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.cluster import ClusterState
from bayes_sched.cluster_spec import (
    DEFAULT_TOPOLOGY,
    ClusterSpec,
    load_cluster_spec,
    parse_cluster_spec,
    read_cluster_spec,
)
from bayes_sched.errors import InputError
from bayes_sched.gpu_types import gpu_type_of_device
from bayes_sched.jobs import JobSpec
from bayes_sched.loop import run_loop
from bayes_sched.policies import FifoPolicy, PolluxPolicy, make_policy
from bayes_sched.policies.pollux import GAConfig
from bayes_sched.registry import Registry
from bayes_sched.sim.laws import make_hidden
from bayes_sched.sim.laws.contention import ContentionLaw
from bayes_sched.sim.laws.gavel_pairs import GavelLaw
from bayes_sched.sim.simulator import SimConfig, SimulatedCluster
from bayes_sched.sim.workload import Workload
from bayes_sched.topology import NodeTopology
from tests.agents import decide as decide_round
from tests.agents import job_view, measured_agent

ROOT = Path(__file__).resolve().parents[1]


def test_gavel_cluster_string_forms_nodes_of_four() -> None:
    spec = parse_cluster_spec("v100:36,p100:36,k80:36")
    assert spec.num_nodes == 27 and spec.total_gpus == 108
    assert spec.types == ("v100", "p100", "k80")
    assert [spec.gpus_of_type(t) for t in spec.types] == [36, 36, 36]
    assert spec.gpu_types[:9] == ("v100",) * 9 and spec.gpu_types[9] == "p100"
    assert list(spec.nodes_of_type("k80")) == list(range(18, 27))
    assert spec.describe() == "9x4:v100,9x4:p100,9x4:k80"
    assert parse_cluster_spec(spec.describe()) == spec


def test_shapes_either_way_round_and_homogeneous_is_the_one_type_case() -> None:
    spec = parse_cluster_spec("16x4:t4")
    assert spec == parse_cluster_spec("t4:16x4") == ClusterSpec.homogeneous(16, 4)
    assert spec.gpus_per_node == 4 and spec.topology == DEFAULT_TOPOLOGY
    assert spec.restart_delay == 30.0 and spec.round_interval == 60.0
    state = ClusterState(16, 4, 5.0)
    assert state.spec == spec and state.total_gpus == 64 and list(state.capacity()) == [4] * 16
    mixed = ClusterState(spec=parse_cluster_spec("1x8:a100,2x4:t4"), now=0.0)
    assert list(mixed.capacity()) == [8, 4, 4] and mixed.total_gpus == 16
    with pytest.raises(InputError, match="8 GPUs"):
        _ = mixed.gpus_per_node  # code that needs equal nodes is told, not misled


@pytest.mark.parametrize(("device", "expected"), [
    ("Tesla V100-SXM2-16GB", "v100"), ("NVIDIA A100 80GB PCIe", "a100"), ("Tesla T4", "t4"),
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA A10G", "a10g"), ("NVIDIA L4", "l4"),
    ("A100-80G", "a100"), ("V100", "v100"), ("Tesla-X", None), ("NVIDIA L40S", None),
    ("NVIDIA GeForce RTX 4090", None)])
def test_device_names_from_nvidia_smi_and_ray_map_onto_one_gpu_type(device: str,
                                                                     expected: str | None) -> None:
    assert gpu_type_of_device(device) == expected


def test_device_name_aliases_are_case_insensitive_and_must_name_a_known_type() -> None:
    assert gpu_type_of_device("Tesla-X", {"tesla-x": "h100"}) == "h100"
    assert gpu_type_of_device("tesla-x", {"Tesla-X": "h100"}) == "h100"
    assert gpu_type_of_device("Tesla-X", {"tesla-x": "x100"}) is None


def test_spec_is_read_only_and_travels_to_worker_processes() -> None:
    spec = ClusterSpec(parse_cluster_spec("2x4:t4").nodes, restart_delays={"bert": 250.0})
    with pytest.raises(TypeError):
        spec.restart_delays["bert"] = 1.0  # type: ignore[index]
    with pytest.raises(AttributeError):
        spec.restart_delay = 1.0  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert spec.restart_delay_of("bert") == 250.0 and spec.restart_delay_of("ncf") == 30.0


def test_toml_and_json_files(tmp_path: Path) -> None:
    toml = tmp_path / "c.toml"
    toml.write_text(
        'restart_delay = 40\nround_interval = 120\n'
        '[[nodes]]\ngpu_type = "v100"\ncount = 2\ngpus = 8\n'
        '[nodes.topology]\ngpus_per_switch = [4, 4]\nswitch_numa = [0, 1]\n'
        'pcie_switch_capacity = 24e9\n'
        '[[nodes]]\ngpu_type = "k80"\ngpus = 4\n'
        '[restart_delays]\nimagenet = 250\n')
    spec = read_cluster_spec(toml)
    assert spec.gpu_types == ("v100", "v100", "k80") and list(spec.capacity()) == [8, 8, 4]
    assert spec.nodes[0].topology.gpus_per_switch == (4, 4)
    assert spec.nodes[0].topology.pcie_switch_capacity == 24e9
    assert spec.nodes[0].topology.dram_capacity == DEFAULT_TOPOLOGY.dram_capacity
    assert spec.nodes[2].topology == DEFAULT_TOPOLOGY
    assert spec.restart_delay_of("imagenet") == 250.0 and spec.restart_delay_of("bert") == 40.0
    assert spec.round_interval == 120.0
    js = tmp_path / "c.json"
    js.write_text(json.dumps({"nodes": "v100:8", "restart_delay": 25}))
    assert load_cluster_spec(str(js)) == ClusterSpec(parse_cluster_spec("2x4:v100").nodes,
                                                     restart_delay=25.0)


@pytest.mark.parametrize(("text", "field"), [
    ("x100:4", "unknown GPU type 'x100'"),
    ("v100:0", "0 GPUs"),
    ("v100:-4", "expected TYPE:GPUS"),
    ("0x4:v100", "0 nodes"),
    ("v100:6", "multiple of 4"),
    ("16x4", "expected TYPE:GPUS"),
])
def test_bad_strings_name_the_entry(text: str, field: str) -> None:
    with pytest.raises(InputError, match=field) as error:
        parse_cluster_spec(text)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("body", "field"), [
    ('[[nodes]]\ngpu_type = "x100"\ngpus = 4\n', "nodes[0].gpu_type"),
    ('[[nodes]]\ngpu_type = "v100"\ngpus = 0\n', "nodes[0].gpus"),
    ('[[nodes]]\ngpu_type = "v100"\ngpus = -2\n', "nodes[0].gpus"),
    ('[[nodes]]\ngpu_type = "v100"\ngpus = 4\ncount = 0\n', "nodes[0].count"),
    ('[[nodes]]\ngpu_type = "v100"\ngpus = 4\n[nodes.topology]\ngpus_per_switch = [4, 4]\n',
     "nodes[0].topology.gpus_per_switch"),
    ('[[nodes]]\ngpu_type = "v100"\ngpus = 4\n[nodes.topology]\nnic_capacity = -1\n',
     "nodes[0].topology.nic_capacity"),
    ('nodes = "v100:4"\nrestart_delay = -5\n', "restart_delay"),
    ('nodes = "v100:4"\nspeed = 3\n', "speed"),
    ('restart_delay = 5\n', "nodes"),
])
def test_bad_files_name_file_and_field(tmp_path: Path, body: str, field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(InputError) as error:
        read_cluster_spec(path)
    message = str(error.value)
    assert str(path) in message and f"'{field}'" in message and "\n" not in message


# --- the simulator takes the spec ---------------------------------------------------------------

def test_simulator_refuses_what_its_physics_cannot_simulate() -> None:
    # T4 measured, K80/P100/V100 derived (bayes_sched.sim.typed_profiles); nothing else.
    SimConfig(cluster=parse_cluster_spec("v100:8,k80:8"))
    with pytest.raises(InputError, match="no profile on GPU type 'a100'"):
        SimConfig(cluster=parse_cluster_spec("4x4:a100"))
    with pytest.raises(InputError, match="no profile on GPU type 'h100'"):
        SimConfig(cluster=parse_cluster_spec("t4:8,h100:8"))
    # The law's 4-GPU topology on 8-GPU nodes used to compute on truncated slots, silently.
    with pytest.raises(InputError, match="topology"):
        SimConfig(gpus_per_node=8, hidden=ContentionLaw())
    law = make_hidden("contention", cluster=parse_cluster_spec("2x8:t4"))
    assert isinstance(law, ContentionLaw) and law.topology.num_gpus == 8
    SimConfig(cluster=parse_cluster_spec("2x8:t4"), hidden=law)
    SimConfig(gpus_per_node=8, hidden=GavelLaw())  # node-level law: any node


def test_restart_delay_per_application_reaches_the_simulated_jobs() -> None:
    specs = (JobSpec("a", 0.0, "cifar10", 4, 512), JobSpec("b", 0.0, "cifar10", 4, 512))
    base = ClusterSpec.homogeneous(2, 4)
    finish = {}
    for delay in (30.0, 330.0):
        spec = ClusterSpec(base.nodes, restart_delays={"cifar10": delay})
        config = SimConfig(cluster=spec)
        cluster = SimulatedCluster(Workload("t", specs), config)
        run_loop(cluster, FifoPolicy(), config.interval)
        finish[delay] = [cluster.jobs[n].completion_time for n in ("a", "b")]
        assert cluster.state.restart_delay_of("cifar10") == delay
    for before, after in zip(finish[30.0], finish[330.0], strict=True):
        assert after - before == pytest.approx(300.0, abs=2.0)


def test_pollux_penalty_uses_the_cluster_restart_delay() -> None:
    def decide(delay: float) -> np.ndarray:
        spec = ClusterSpec(ClusterSpec.homogeneous(4, 4).nodes, restart_delay=delay)
        cluster = ClusterState(spec=spec, now=600.0)
        job = job_view(measured_agent("a"), "cifar10", cluster.now, [1, 0, 0, 0], num_restarts=1)
        policy = PolluxPolicy(ga=GAConfig(population=16, generations=10))
        return decide_round(policy, cluster, [job]).get("a", np.zeros(4))

    # Restarts cost nothing: the lone job grows; they cost more than its age: it stays put.
    assert decide(0.0).sum() > 1
    assert list(decide(1e6)) == [1, 0, 0, 0]


# --- registries with typed options -------------------------------------------------------------

def test_policy_options_are_typed_from_the_constructor() -> None:
    policy = make_policy("pollux", p=-0.5, ga={"population": 12})
    assert isinstance(policy, PolluxPolicy) and policy.p == -0.5
    assert policy.ga.population == 12 and policy.ga.generations == GAConfig().generations
    assert make_policy("tiresias", thresholds=[3600, 7200]).thresholds == (3600.0, 7200.0)
    with pytest.raises(InputError, match="no option 'q'"):
        make_policy("pollux", q=1)
    with pytest.raises(InputError, match="option p is 'x': expected float"):
        make_policy("pollux", p="x")
    with pytest.raises(InputError, match="option avoid_interference is 1: expected bool"):
        make_policy("pollux", avoid_interference=1)
    with pytest.raises(InputError, match="option ga.population is 'a': expected int"):
        make_policy("pollux", ga={"population": "a"})
    with pytest.raises(InputError, match="search"):
        make_policy("pollux", ga={"search": "annealing"})
    with pytest.raises(InputError, match="unknown policy 'nope'"):
        make_policy("nope")


@dataclass(frozen=True)
class Knobs:
    level: float = 0.5


class Toy:
    """A component with the kinds of options policies have."""

    def __init__(self, risk: float = 0.0, knobs: Knobs = Knobs(),
                 topology: NodeTopology | None = None) -> None:
        self.risk, self.knobs, self.topology = risk, knobs, topology


def test_a_new_constructor_argument_is_a_new_option() -> None:
    registry: Registry[Toy] = Registry("toy")
    registry.register("toy", Toy)
    assert list(registry.options("toy")) == ["risk", "knobs", "topology"]
    options = registry.parse("toy", ["risk=0.1", "knobs.level=2", "topology=none"])
    toy = registry.make("toy", context={"topology": DEFAULT_TOPOLOGY}, **options)
    assert toy.risk == 0.1 and toy.knobs == Knobs(2.0) and toy.topology is None
    assert registry.make("toy", context={"topology": DEFAULT_TOPOLOGY}).topology == DEFAULT_TOPOLOGY
    with pytest.raises(InputError, match="option risk is 'high': expected float"):
        registry.parse("toy", ["risk=high"])
    with pytest.raises(InputError, match="expected key=value"):
        registry.parse("toy", ["risk"])


# --- the command line ----------------------------------------------------------------------------

def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize(("args", "expected"), [
    (["--cluster", "x100:8"], "unknown GPU type 'x100'"),
    (["--cluster", "BAD_TOPOLOGY"], "nodes[0].topology.gpus_per_switch"),
    (["--policy-opt", "q=1"], "policy 'pollux' has no option 'q'"),
    (["--policy", "tiresias", "--policy-opt", "tiresias:thresholds=1"],
     "option thresholds is 1: expected sequence"),
    (["--policy-opt", "tiresias:thresholds=[1]"], "policy 'tiresias' is not in this run"),
    (["--hidden", "contention", "--hidden-opt", "seed=1.5"], "option seed is 1.5: expected int"),
    (["--config", "BAD_CONFIG"], "[policy.nope]"),
])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: list[str],
                                              expected: str) -> None:
    topology = tmp_path / "cluster.toml"
    topology.write_text('[[nodes]]\ngpu_type = "t4"\ngpus = 4\n'
                        '[nodes.topology]\ngpus_per_switch = [2, 2, 2]\n')
    config = tmp_path / "config.toml"
    config.write_text("[policy.nope]\np = 1\n")
    args = [str(topology) if a == "BAD_TOPOLOGY" else str(config) if a == "BAD_CONFIG" else a
            for a in args]
    done = _cli("simulate", "--workload", "workload-1", "--max-jobs", "2", "--no-progress", *args)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert expected in done.stderr


def test_cli_cluster_file_and_config_options_drive_the_run(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\n"
                        "a,0,cifar10,2,256\nb,0,cifar10,2,256\nc,0,cifar10,4,256\n")
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('nodes = "1x4:t4"\n[restart_delays]\ncifar10 = 90\n')
    config = tmp_path / "config.toml"
    # One queue with a threshold at 1 GPU-second: a job demoted after its first round.
    config.write_text("[policy.tiresias]\nthresholds = [1.0]\n")
    rows = {}
    for name, extra in (("plain", ()), ("configured", ("--config", str(config)))):
        done = _cli("simulate", "--workload", str(workload), "--policy", "tiresias",
                    "--cluster", str(cluster), "--json", "--no-progress", *extra)
        assert done.returncode == 0, done.stderr
        rows[name] = json.loads(done.stdout)[0]
    assert rows["plain"]["finished"] == rows["configured"]["finished"] == 3
    # Demotion after one round makes c (4 GPUs) and a/b take turns: more restarts.
    assert rows["configured"]["restarts_per_job"] > rows["plain"]["restarts_per_job"]


def test_cli_lists_policies_with_their_options() -> None:
    done = _cli("list", "policies", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    pollux = [row for row in rows if row["option"] == "p"]
    assert pollux and pollux[0]["type"] == "float" and pollux[0]["default"] == "-1.0"
    assert {row["name"] for row in rows} >= {"pollux", "tiresias", "optimus", "fifo", "bo"}
