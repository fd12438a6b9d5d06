"""GPU types a cluster file declares (``[[gpu_types]]``): the spec reads them beside the built-in
ones, a cluster of a declared type runs the typed Pollux world on that type's measured profile
and a Gavel-family policy on the table made from it, and a bad declaration is one line naming the
file and the field (exit 2).

The declared type's profile is synthesised here, into ``tmp_path``, from the shipped ncf T4
profile (:mod:`bayes_sched.sim.synthetic_profiles`: compute scaled by the ratio of the T4's peak
FP32 rate to the one the file declares; sync as on the T4s). No other project's profiles are
used."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from bayes_sched.cluster_spec import ClusterSpec, NodeSpec, default_topology, load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.gpu_types import GPU_TYPES
from bayes_sched.jobs import JobSpec
from bayes_sched.policies import make_policy
from bayes_sched.sim import Workload
from bayes_sched.sim.profile_table import profile_throughputs, run_profile_table
from bayes_sched.sim.synthetic_profiles import synthesise_type_profiles, type_factor
from bayes_sched.sim.typed_profiles import TypeProfiles
from tests.cli_inprocess import run_cli

DECLARED = """\
[[gpu_types]]
name = "mi250x"
memory_gib = 64
peak_tflops = 47.9
interconnect = "pcie"
link_gbytes_per_s = 31.5
"""
NODES = """\
[[nodes]]
gpu_type = "mi250x"
gpus = 4
[[nodes]]
gpu_type = "k80"
gpus = 4
"""


@pytest.fixture(scope="module")
def cluster_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("declared") / "cluster.toml"
    path.write_text(DECLARED + NODES)
    return path


@pytest.fixture(scope="module")
def profiles(cluster_file: Path) -> Path:
    root = cluster_file.parent / "profiles"
    catalog = load_cluster_spec(cluster_file).catalog
    synthesise_type_profiles(root, ["mi250x"], ["ncf"], seed=3, layout="by-model",
                             catalog=catalog)
    return root


def test_a_declared_type_is_a_type_of_the_cluster(cluster_file: Path) -> None:
    spec = load_cluster_spec(cluster_file)
    assert spec.types == ("mi250x", "k80") and spec.gpus_of_type("mi250x") == 4
    gpu = spec.gpu_type_of("mi250x")
    assert (gpu.peak_flops, gpu.memory_bytes, gpu.interconnect, gpu.link_bandwidth) == (
        pytest.approx(47.9e12), 64 * 2**30, "pcie", pytest.approx(31.5e9))
    assert "mi250x" in spec.catalog and "mi250x" not in GPU_TYPES
    # Its links are the declared peer link and the node's NIC (the sync prior's input).
    links = gpu.links(spec.nodes[0].topology.nic_capacity, 4)
    assert (links.within, links.across) == (pytest.approx(31.5e9), 6.25e9)
    # It survives a trip to a worker process, and short strings may name it too.
    assert pickle.loads(pickle.dumps(spec)) == spec
    short = cluster_file.with_name("short.toml")
    short.write_text('nodes = "mi250x:2x8,v100:4"\n' + DECLARED)
    assert load_cluster_spec(short).describe() == "2x8:mi250x,1x4:v100"
    # The synthesiser reads the declared rate: compute scales by the T4's peak over it.
    assert type_factor("ncf", "mi250x", 64, spec.catalog) == pytest.approx(8.1 / 47.9)
    # Without the declaration the name is unknown, wherever a spec is built.
    with pytest.raises(InputError, match=r"nodes\[0\]\.gpu_type.*'mi250x'"):
        ClusterSpec((NodeSpec("mi250x", 4, default_topology(4)),))


def test_simulate_runs_a_declared_type_on_its_measured_profile(cluster_file: Path,
                                                               profiles: Path,
                                                               tmp_path: Path) -> None:
    workload = tmp_path / "one.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\nncf-0,0,ncf,1,32768\n")
    out = tmp_path / "sim"
    done = run_cli("simulate", "--workload", str(workload), "--cluster", str(cluster_file),
                   "--type-profiles", str(profiles), "--policy", "pollux", "--out", str(out),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    (row,) = summary if isinstance(summary, list) else [summary]
    assert row["profiles"] == "mi250x: measured; k80: derived"
    assert row["finished"] == 1 and row["cluster"] == "1x4:mi250x,1x4:k80"
    assert "| ncf | mi250x | measured |" in (out / "report.md").read_text()
    # Without a measured profile the declared type is refused, naming the file and the type.
    refused = run_cli("simulate", "--workload", str(workload), "--cluster", str(cluster_file),
                      "--policy", "pollux", "--no-progress")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert str(cluster_file) in refused.stderr and "mi250x" in refused.stderr


def test_a_gavel_policy_runs_on_the_table_of_a_declared_type(cluster_file: Path,
                                                             profiles: Path) -> None:
    spec = load_cluster_spec(cluster_file)
    typed = TypeProfiles.read(profiles)
    table = profile_throughputs(["ncf"], spec.types, typed)
    ((key, rates),) = [(k, r) for k, r in table.solo.items() if k[1] == 1]
    b0 = int(key[0].split("batch size ")[1][:-1])
    step, _ = typed.step_time("ncf", ("mi250x",), (1,), b0)
    assert rates["mi250x"] == pytest.approx(1.0 / step) and rates["mi250x"] > rates["k80"]
    jobs = tuple(JobSpec(f"ncf-{i}", 60.0 * i, "ncf", 1, 32768) for i in range(10))
    result = run_profile_table(Workload("declared", jobs), make_policy("max_min_fairness_perf"),
                               spec, typed)
    assert result.summary["finished"] == len(jobs)
    assert result.setting["profiles"] == "mi250x: measured; k80: derived"
    assert result.summary["utilization_mi250x"] > 0


@pytest.mark.parametrize(("table", "field"), [
    ('[[gpu_types]]\nname = "mi250x"\nmemory_gib = 64\npeak_tflops = -4\n',
     "gpu_types[0].peak_tflops"),
    ('[[gpu_types]]\nname = "mi250x"\nmemory_gib = 64\ninterconnect = "infiniband"\n',
     "gpu_types[0].interconnect"),
    ('[[gpu_types]]\nname = "v100"\nmemory_gib = 16\n', "gpu_types[0].name"),
    ('[[gpu_types]]\nname = "mi250x"\nmemory_gib = 64\nfp64_tflops = 47.9\n',
     "gpu_types[0].fp64_tflops"),
    ('[[gpu_types]]\nname = "mi250x"\n', "gpu_types[0].memory_gib"),
    (DECLARED + DECLARED, "gpu_types[1].name"),
    ('gpu_types = "mi250x"\n', "gpu_types"),
    ('[[gpu_types]]\nname = "mi300x"\nmemory_gib = 192\n', "nodes[0].gpu_type"),
])
def test_a_bad_declaration_is_one_line_naming_file_and_field(tmp_path: Path, table: str,
                                                             field: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(table + NODES)
    done = run_cli("simulate", "--workload", "workload-1", "--max-jobs", "1", "--cluster",
                   str(path), "--policy", "pollux", "--no-progress")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and f"'{field}'" in lines[0], lines
