"""Per-GPU-type measured profiles in the typed world: a cluster of three types, V100 and A100
measured, K80 derived, runs Pollux, sia_adaptive and a Gavel-family policy, and the results name
each type's profile source.

The measured profiles are synthesised here, into ``tmp_path``, from the shipped T4 profiles
(:mod:`bayes_sched.sim.synthetic_profiles`: the V100's compute is the derivation rule's truth,
the A100's the T4's scaled by peak FP32, each row's compute and sync times log-normal noise of SD
0.05); the V100 ones are laid out by type and the A100 ones by model, so both layouts are read.
No other project's profiles are used."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.jobs import JobSpec
from bayes_sched.policies import make_policy
from bayes_sched.policies.sia_adaptive import SiaAdaptivePolicy
from bayes_sched.sim import SimConfig, Workload, run_simulation
from bayes_sched.sim.profile_table import profile_throughputs, run_profile_table
from bayes_sched.sim.synthetic_profiles import synthesise_type_profiles
from bayes_sched.sim.typed_profiles import TypeProfiles, derivation_table, typed_step_time
from bayes_sched.worlds import WORLDS
from perfmodel.profiles import read_placements_csv
from tests.cli_inprocess import run_cli

APPS = ("bert", "ncf", "cifar10")
CLUSTER = "v100:4,a100:4,k80:4"
SOURCES = "v100: measured; a100: measured; k80: derived"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("type-profiles")
    synthesise_type_profiles(root, ["v100"], APPS, noise=0.05, seed=1, layout="by-type")
    synthesise_type_profiles(root, ["a100"], APPS, noise=0.05, seed=2, layout="by-model")
    return root


def _workload(apps: tuple[str, ...], gap: float = 300.0) -> Workload:
    batch = {"bert": 12, "ncf": 32768, "cifar10": 128}
    return Workload("typed", tuple(JobSpec(f"{a}-{i}", i * gap, a, 1, batch[a])
                                   for i, a in enumerate(apps)))


def test_measured_step_times_are_used_where_present_and_derived_elsewhere(folder: Path) -> None:
    profiles = TypeProfiles.read(folder)
    assert {t for _, t in profiles.measured} == {"v100", "a100"}
    assert [profiles.source("bert", t) for t in ("t4", "v100", "a100", "k80", "p100")] == [
        "measured", "measured", "measured", "derived", "derived"]
    # A measured placement row is what the world runs at.
    rows = read_placements_csv(folder / "bert" / "placements-a100.csv", "bert")
    i = int(np.flatnonzero(rows.placement == "1")[0])
    step, sync = profiles.step_time("bert", ("a100",), (1,), int(rows.local_bsz[i]))
    assert (step, sync) == pytest.approx((rows.step_time[i], rows.sync_time[i]))
    # On the V100 the measurement replaces the rule (they differ by the measurement noise).
    measured = profiles.step_time("bert", ("v100",), (4,), 3)
    derived = typed_step_time("bert", ("v100",), (4,), 3)
    assert measured != derived and measured[0] == pytest.approx(derived[0], rel=0.3)
    # Across types the slowest paces the job; the K80 stays derived.
    assert profiles.step_time("bert", ("v100", "k80"), (2, 2), 3) == \
        typed_step_time("bert", ("k80",), (2, 2), 3)
    table = derivation_table(("v100", "a100", "k80"), APPS, profiles)
    assert {(r["gpu_type"], r["profile"]) for r in table} == {
        ("v100", "measured"), ("a100", "measured"), ("k80", "derived")}
    assert all(float(r["factor_init_bsz"]) < 1 for r in table  # type: ignore[arg-type]
               if r["gpu_type"] != "k80")
    # Without the measurements the A100 cannot be simulated, nor an application not measured.
    with pytest.raises(InputError, match="no profile on GPU type 'a100'"):
        SimConfig(cluster=parse_cluster_spec(CLUSTER))
    with pytest.raises(InputError, match="no profile of 'imagenet' on GPU type 'a100'"):
        profiles.check(("a100",), ("imagenet",))


def test_pollux_sia_and_a_gavel_policy_run_and_name_the_profile_source(folder: Path) -> None:
    profiles = TypeProfiles.read(folder)
    spec = parse_cluster_spec(CLUSTER)
    workload = _workload(APPS)
    config = SimConfig(cluster=spec, profiles=profiles)
    results = [WORLDS["typed_pollux"].run(workload.jobs, make_policy(name), name="typed",
                                          config=config)
               for name in ("pollux", "sia_adaptive")]
    results.append(run_profile_table(workload, make_policy("max_min_fairness_perf"), spec,
                                     profiles))
    for result in results:
        assert result.summary["finished"] == len(APPS), result.policy
        assert result.setting["profiles"] == SOURCES
    # The Gavel-family table runs at the measured (or derived) step times: one GPU, B0.
    rates = profile_throughputs(APPS, spec.types, profiles)
    for application in APPS:
        (key,) = [k for k in rates.solo if k[0].startswith(application) and k[1] == 1]
        b0 = int(key[0].split("batch size ")[1][:-1])
        for gpu_type in spec.types:
            step, _ = profiles.step_time(application, (gpu_type,), (1,), b0)
            assert rates.solo[key][gpu_type] == pytest.approx(1.0 / step)


def test_sia_skips_profiling_where_the_ratio_is_sure(folder: Path) -> None:
    profiles = TypeProfiles.read(folder)
    config = SimConfig(cluster=parse_cluster_spec(CLUSTER), profiles=profiles)
    workload = _workload(("bert",) * 7, gap=900.0)
    runs = {}
    for within in (0.0, 0.5):
        policy = SiaAdaptivePolicy(skip_profiling_within=within)
        result = run_simulation(workload, policy, config)
        assert result.summary["finished"] == 7
        runs[within] = policy
    assert runs[0.0].profiling_skipped == 0
    assert runs[0.5].profiling_skipped > 0
    assert runs[0.5].profiling_gpu_seconds < runs[0.0].profiling_gpu_seconds
    assert runs[0.5].stats()["profiling_skipped"] == runs[0.5].profiling_skipped
    with pytest.raises(InputError, match="skip_profiling_within"):
        SiaAdaptivePolicy(skip_profiling_within=1.5)


def test_command_line_takes_per_type_profiles(folder: Path, tmp_path: Path) -> None:
    workload = tmp_path / "typed.csv"
    workload.write_text("name,time,application,num_replicas,batch_size\n"
                        "bert-0,0,bert,1,12\nncf-1,60,ncf,1,32768\n")
    out = tmp_path / "sim"
    done = run_cli("simulate", "--workload", str(workload), "--cluster", CLUSTER,
                   "--type-profiles", str(folder), "--policy", "sia_adaptive", "--out", str(out),
                   "--no-progress")
    assert done.returncode == 0, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    rows = summary if isinstance(summary, list) else [summary]
    assert any(row.get("profiles") == SOURCES for row in rows)
    report = (out / "report.md").read_text()
    assert "| bert | a100 | measured |" in report and "| bert | k80 | derived |" in report
    # Without them the A100 is refused in one line.
    refused = run_cli("simulate", "--workload", str(workload), "--cluster", CLUSTER,
                      "--policy", "pollux", "--no-progress")
    assert refused.returncode == 2 and "a100" in refused.stderr
    assert "Traceback" not in refused.stderr
    # fit: one point fit per model and type, or one type's.
    fits = run_cli("fit", "throughput", str(folder), "--method", "point", "--json")
    assert fits.returncode == 0, fits.stderr
    documents = json.loads(fits.stdout)
    assert {(d["model"], d["gpu_type"]) for d in documents} == {
        (a, t) for a in APPS for t in ("v100", "a100")}
    one = run_cli("fit", "throughput", str(folder), "--method", "point", "--gpu-type", "a100",
                  "--json")
    assert {d["gpu_type"] for d in json.loads(one.stdout)} == {"a100"}
    bad = run_cli("fit", "throughput", str(folder), "--gpu-type", "h100")
    assert bad.returncode == 2 and "expected one of a100, v100" in bad.stderr


def test_report_fits_per_model_and_type(folder: Path) -> None:
    from bayes_sched.cli.report import resolve_sources

    sources = resolve_sources([str(folder)])
    assert sorted(p.model for p, _ in sources) == sorted(
        f"{a}-{t}" for a in APPS for t in ("v100", "a100"))
    assert all(traces is not None for _, traces in sources)   # shipped models' gradients


def test_clusters_page_type_profile_commands_run_as_written(tmp_path: Path) -> None:
    # The section's bash block (a python line writing the folder, then bayes-sched commands) and
    # its Python example, in order, from one fresh folder.
    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "guide" / "clusters.md").read_text()
    section = page.split("## Profiles measured per GPU type")[1].split("\n## ")[0]
    (bash,) = re.findall(r"```bash\n(.*?)```", section, flags=re.S)
    (python,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    env = {**os.environ, "PYTHONPATH": str(root)}
    for line in bash.strip().splitlines():
        argv = shlex.split(line, comments=True)
        assert argv[0] in ("python", "bayes-sched"), line
        command = ([sys.executable, *argv[1:]] if argv[0] == "python"
                   else [sys.executable, "-m", "bayes_sched", *argv[1:]])
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path,
                              timeout=600)
        assert done.returncode == 0, (line, done.stderr[-2000:])
    summary = json.loads((tmp_path / "typed-sim" / "summary.json").read_text())
    rows = summary if isinstance(summary, list) else [summary]
    assert rows[0]["profiles"] == "v100: measured; a100: measured; k80: derived"
    done = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "v100: measured; a100: measured; k80: derived" in done.stdout
