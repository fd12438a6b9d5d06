"""The deployment files of deploy/: each is parsed and checked against the real command line, and
every metric and label the Grafana dashboard queries is one a real collector serves.

The collector runs as a subprocess with the DaemonSet's arguments (on a loopback port) against
the stand-in libnvidia-ml of tests/nvml_standin.py, and is scraped over HTTP.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bayes_sched.cli import build_parser
from collectors import DEFAULT_PROMETHEUS_PORT
from tests.nvml_standin import FIXTURES, compile_standin, standin_environment

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "bayes-sched-dashboard.json"

#: Metric name -> label names, from one scrape.
Scrape = dict[str, set[str]]


def collect_args(args: list[str]) -> object:
    """``bayes-sched collect ARGS`` parsed by the real parser (exits 2 on a bad flag or value)."""
    return build_parser(["collect"]).parse_args(["collect", *args])


def kubernetes_documents() -> dict[str, dict]:
    with open(DEPLOY / "kubernetes" / "daemonset.yaml") as handle:
        return {doc["kind"]: doc for doc in yaml.safe_load_all(handle)}


def daemonset_args() -> list[str]:
    (container,) = kubernetes_documents()["DaemonSet"]["spec"]["template"]["spec"]["containers"]
    return [str(a) for a in container["args"]]


@pytest.fixture(scope="module")
def scrape(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scrape]:
    """Metric names and label names served by a collector run with the DaemonSet's arguments."""
    standin = compile_standin(FIXTURES / "standin_nvml.c", tmp_path_factory.mktemp("nvml"))
    args = [a.replace("$(NODE_NAME)", "gpu-node-1") for a in daemonset_args()]
    args[args.index("--prometheus") + 1] = "0"
    args[args.index("--bind") + 1] = "127.0.0.1"
    args[args.index("--interval") + 1] = "0.2s"
    process = subprocess.Popen([sys.executable, "-m", "bayes_sched", "collect", *args],
                               stderr=subprocess.PIPE, text=True, env=standin_environment(standin))
    assert process.stderr is not None
    port, lines = None, []
    for line in process.stderr:
        lines.append(line)
        if "serving Prometheus metrics on" in line:
            port = int(line.rsplit(":", 1)[1].split("/")[0])
            break
    try:
        assert port is not None, "".join(lines)
        served: Scrape = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not {
                "bayes_sched_gpu_energy_joules_total", "bayes_sched_collector_samples_total",
                "bayes_sched_cpu_seconds_total", "bayes_sched_gpu_process_memory_used_bytes",
        } <= set(served):
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
            served = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    served.setdefault(sample.name, set()).update(sample.labels)
            time.sleep(0.1)
        yield served
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert process.returncode == 0


def test_dashboard_queries_name_metrics_and_labels_a_real_scrape_returns(scrape: Scrape) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries: list[tuple[str, str]] = [
        (target["expr"], target.get("legendFormat", ""))
        for panel in dashboard["panels"] for target in panel.get("targets", [])]
    assert len(queries) >= 10
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            metric_query, label = re.fullmatch(r"label_values\((.*),\s*(\w+)\)",
                                               variable["definition"]).groups()
            queries.append((metric_query, "{{" + label + "}}"))
    for expr, legend in queries:
        metrics = set(re.findall(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{\[])", expr))
        metrics |= set(re.findall(r"\bbayes_sched_\w+", expr))
        assert metrics, expr
        for metric in metrics:
            assert metric in scrape, f"{metric} (in {expr!r}) is not served"
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            labels |= {label.strip() for label in group.split(",") if label.strip()}
        labels |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", legend))
        known = set.union(*(scrape[m] for m in metrics))
        assert labels <= known, f"labels {sorted(labels - known)} of {expr!r} are not served"
    # The labels operators rely on are there.
    assert {"hostname", "gpu", "uuid", "model_name"} <= scrape["bayes_sched_gpu_power_watts"]
    assert {"pid", "pod_uid", "container_id"} <= scrape["bayes_sched_gpu_process_memory_used_bytes"]
    assert not any(name.startswith(("node_", "DCGM_")) for name in scrape)


def catalog_prometheus_names() -> set[str]:
    """The Prometheus names ``bayes-sched counters catalog --json`` lists (labels cut off)."""
    result = subprocess.run([sys.executable, "-m", "bayes_sched", "counters", "catalog", "--json"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    return {row["prometheus"].split("{")[0] for row in json.loads(result.stdout)
            if row["prometheus"]}


def dashboard_metrics(path: Path) -> set[str]:
    """Every bayes_sched_* metric name a Grafana dashboard's queries and variables name."""
    return set(re.findall(r"\bbayes_sched_\w+", path.read_text()))


def test_the_catalog_lists_every_series_a_real_collector_serves_and_the_dashboard_queries(
        scrape: Scrape) -> None:
    listed = catalog_prometheus_names()
    served = set(scrape)
    assert served - listed == set(), "served but not in `counters catalog`"
    # The series the issue named, among them the collector's own health and build info.
    assert {"bayes_sched_collector_samples_total", "bayes_sched_gpu_info",
            "bayes_sched_gpu_clock_event_reason_active", "bayes_sched_build_info",
            "bayes_sched_collector_source_up"} <= served
    queried = dashboard_metrics(DASHBOARD)
    assert len(queried) >= 10
    assert queried - listed == set(), "the collector dashboard queries names not in the catalog"


def test_kubernetes_daemonset_service_and_servicemonitor_fit_together() -> None:
    docs = kubernetes_documents()
    assert set(docs) == {"Namespace", "DaemonSet", "Service", "ServiceMonitor"}
    namespace = docs["Namespace"]["metadata"]["name"]
    assert all(doc["metadata"].get("namespace", namespace) == namespace for doc in docs.values())
    daemonset, service, monitor = docs["DaemonSet"], docs["Service"], docs["ServiceMonitor"]
    pod = daemonset["spec"]["template"]
    pod_labels = pod["metadata"]["labels"].items()
    assert daemonset["spec"]["selector"]["matchLabels"].items() <= pod_labels
    assert service["spec"]["selector"].items() <= pod_labels
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert namespace in monitor["spec"]["namespaceSelector"]["matchNames"]
    assert pod["spec"]["hostPID"] is True  # /proc/<pid>/cgroup of GPU processes names their pods
    (container,) = pod["spec"]["containers"]
    (port,) = container["ports"]
    assert port["containerPort"] == DEFAULT_PROMETHEUS_PORT
    (service_port,) = service["spec"]["ports"]
    assert service_port["targetPort"] == port["name"] == container["readinessProbe"]["httpGet"]["port"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [service_port["name"]]
    assert monitor["spec"]["endpoints"][0]["path"] == container["readinessProbe"]["httpGet"]["path"]
    env = {item["name"] for item in container["env"]}
    args = daemonset_args()
    assert all(name in env for name in re.findall(r"\$\((\w+)\)", " ".join(args)))
    parsed = collect_args([a.replace("$(NODE_NAME)", "node-a") for a in args])
    assert parsed.prometheus == DEFAULT_PROMETHEUS_PORT and parsed.bind == "0.0.0.0"
    assert container["image"] == collector_image()


def collector_image() -> str:
    """``bayes-sched-collector:<pyproject version>``: the one name and tag the Containerfile
    builds and every deploy file pulls."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return f"bayes-sched-collector:{version}"


def test_one_image_name_and_tag_everywhere() -> None:
    image = collector_image()
    tagged: dict[str, set[str]] = {}
    for path in sorted(DEPLOY.rglob("*")):
        if path.is_file():
            found = set(re.findall(r"bayes-sched-collector:[\w.$-]+", path.read_text()))
            if found:
                tagged[str(path.relative_to(DEPLOY))] = found
    assert {"Containerfile", "kubernetes/daemonset.yaml"} <= set(tagged)
    assert all(found == {image} for found in tagged.values()), tagged
    containerfile = (DEPLOY / "Containerfile").read_text()
    assert f"-t {image} ." in containerfile and f"-p 10451:10451 {image}" in containerfile


def test_the_container_recipe_installs_the_collector_extra_and_runs_a_valid_command() -> None:
    lines = [line.strip() for line in (DEPLOY / "Containerfile").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    instructions: dict[str, list[str]] = {}
    for line in lines:
        keyword, _, rest = line.partition(" ")
        instructions.setdefault(keyword, []).append(rest)
    assert instructions["FROM"][0].startswith("python:3.1")
    copied = {part for rest in instructions["COPY"] for part in shlex.split(rest)[:-1]}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in project["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert packages | {"pyproject.toml", "README.md", "LICENSE", "NOTICE"} <= copied
    assert any('".[collector]"' in rest and "pip install" in rest for rest in instructions["RUN"])
    assert instructions["EXPOSE"] == [str(DEFAULT_PROMETHEUS_PORT)]
    entrypoint = json.loads(instructions["ENTRYPOINT"][0])
    command = json.loads(instructions["CMD"][0])
    assert entrypoint == ["bayes-sched", "collect"]
    assert project["project"]["scripts"]["bayes-sched"] == "bayes_sched.cli:main"
    parsed = collect_args(command)
    assert parsed.prometheus == DEFAULT_PROMETHEUS_PORT and parsed.bind == "0.0.0.0"


def test_the_systemd_unit_verifies_and_runs_a_valid_command(tmp_path: Path) -> None:
    unit_file = DEPLOY / "systemd" / "bayes-sched-collector.service"
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(unit_file)
    assert {"Unit", "Service", "Install"} <= set(unit.sections())
    program, command, *args = shlex.split(unit["Service"]["ExecStart"])
    assert Path(program).name == "bayes-sched" and command == "collect"
    parsed = collect_args(args)
    assert parsed.prometheus == DEFAULT_PROMETHEUS_PORT
    state = Path("/var/lib") / unit["Service"]["StateDirectory"]
    assert parsed.out.is_relative_to(state)  # the only writable place under ProtectSystem=strict
    assert unit["Service"]["KillSignal"] == "SIGTERM"  # the collector flushes on SIGTERM
    # The real program with the unit's arguments parses them (exit 0 from --help, not 2).
    wrapper = tmp_path / "bayes-sched"
    wrapper.write_text(f"#!/bin/sh\nPYTHONPATH={shlex.quote(str(ROOT))} exec "
                       f"{shlex.quote(sys.executable)} -m bayes_sched \"$@\"\n")
    wrapper.chmod(0o755)
    result = subprocess.run([str(wrapper), command, *args, "--help"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0 and "--prometheus" in result.stdout, result.stderr
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return  # parsed above; systemd's own check where systemd is installed
    local = tmp_path / unit_file.name
    local.write_text(unit_file.read_text().replace(program, str(wrapper)))
    result = subprocess.run([analyze, "verify", str(local)], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})
    problems = [line for line in result.stderr.splitlines() if local.name in line]
    assert result.returncode == 0 and not problems, result.stderr


def test_the_prometheus_scrape_config_targets_the_collector_port() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus" / "scrape-config.yml").read_text())
    (job,) = config["scrape_configs"]
    assert job["metrics_path"] == "/metrics"
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    assert targets and all(t.rsplit(":", 1)[1] == str(DEFAULT_PROMETHEUS_PORT) for t in targets)


#: What the collector image must not carry (issue 35): counters stores' and the models' packages.
NOT_IN_COLLECTOR = {"pandas", "dask", "h5py", "h5netcdf", "xarray", "zarr", "torch", "pyro-ppl",
                    "botorch", "gpytorch", "scipy", "matplotlib"}


def _closure(requirements: list[str]) -> set[str]:
    """Every distribution ``requirements`` pull in, transitively, read from the installed
    distributions' metadata (extras of dependencies not followed, as pip does without them)."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        try:
            todo += [Requirement(r) for r in requires(name) or []]
        except PackageNotFoundError:
            pass  # not installed here (a platform-only dependency): nothing more to follow
    return seen


def test_the_collector_extra_pulls_in_no_store_or_model_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    collector = _closure([*project["dependencies"], *project["optional-dependencies"]["collector"]])
    assert {"numpy", "prometheus-client", "nvidia-ml-py"} <= collector
    assert collector & NOT_IN_COLLECTOR == set()
    store = _closure(project["optional-dependencies"]["store"])
    assert {"pandas", "dask", "h5py", "h5netcdf", "xarray", "zarr"} <= store


def _without_store(*args: str) -> subprocess.CompletedProcess[str]:
    """``bayes-sched ARGS`` in a Python where the store extra's modules cannot be imported."""
    code = ("import sys\n"
            "for name in sys.argv[1].split(','):\n"
            "    sys.modules[name] = None  # import fails, find_spec answers None\n"
            "from bayes_sched.cli import main\n"
            "sys.exit(main(sys.argv[2:]))\n")
    blocked = ",".join(sorted(NOT_IN_COLLECTOR - {"pyro-ppl"} | {"pyro"}))
    return subprocess.run([sys.executable, "-c", code, blocked, *args], capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_the_collector_serves_without_the_store_extra_and_out_names_it(tmp_path: Path) -> None:
    served = _without_store("collect", "--sources", "procfs,perf", "--prometheus", "0",
                            "--samples", "3", "--interval", "0.05s")
    assert served.returncode == 0, served.stderr
    assert "3 samples taken" in served.stderr
    store = tmp_path / "store"
    refused = _without_store("collect", "--sources", "procfs", "--out", str(store),
                             "--samples", "3")
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert 'pip install "bayes-sched[collector,store]"' in line and "xarray" in line, line
    assert not store.exists()
    info = _without_store("counters", "info", str(store))
    assert info.returncode == 2 and "counters info reads or writes a counters store" in info.stderr
