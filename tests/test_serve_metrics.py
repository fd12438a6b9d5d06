"""The scheduler's Prometheus endpoint, scraped over loopback HTTP: the values it serves for
given job records on a cluster of two GPU types, and every metric and label the scheduler's
Grafana dashboard (deploy/grafana/bayes-sched-serve-dashboard.json) queries is one it serves.
(tests/test_serve_events.py scrapes a real ``serve`` running a real job.)"""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bayes_sched.backends.real_cluster import JobRecord
from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.loop import LoopStats
from bayes_sched.service.events import Event
from bayes_sched.service.metrics import ServeMetrics, metrics_endpoint
from tests.state_files import spec

DASHBOARD = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / \
    "bayes-sched-serve-dashboard.json"
#: Labels Prometheus adds to every scraped series (not served by the endpoint).
TARGET_LABELS = {"instance", "job"}

#: name -> {label values as a sorted tuple of pairs -> value}
Scrape = dict[str, dict[tuple[tuple[str, str], ...], float]]


def _records() -> list[dict[str, object]]:
    running = JobRecord(spec("a"), 0.0, status="running", allocation=[2, 1], local_bsz=32,
                        accum_steps=1, num_restarts=2, failures=1, epochs=0.5).to_dict()
    waiting = JobRecord(spec("b"), 1.0, status="backoff", allocation=[0, 0],
                        failures=1).to_dict()
    done = JobRecord(spec("c"), 2.0, status="done", epochs=2.0, num_restarts=1).to_dict()
    return [running, waiting, done]


@pytest.fixture(scope="module")
def scrape() -> Iterator[Scrape]:
    cluster = parse_cluster_spec("1x4:a100,1x2:t4")
    metrics = ServeMetrics(rounds=5)
    stats = LoopStats(decision_seconds=[0.02, 0.3], estimate_seconds=[0.01, 0.2])
    metrics.round_done(stats, {"a": {"goodput": 812.5, "throughput": 900.0}})
    metrics.update(_records(), cluster, [Event(0.0, "a", "grown", "1 -> 3 GPUs"),
                                         Event(0.0, "b", "retrying", "exited"),
                                         Event(0.0, "b", "retrying", "exited")], True)
    endpoint = metrics_endpoint(metrics, 0)
    try:
        url = f"http://127.0.0.1:{endpoint.port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        endpoint.close()
    served: Scrape = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            served.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = \
                sample.value
    yield served


def test_the_endpoint_serves_the_schedulers_state(scrape: Scrape) -> None:
    def value(name: str, **labels: str) -> float:
        return scrape[f"bayes_sched_serve_{name}"][tuple(sorted(labels.items()))]

    assert value("rounds_total") == 6  # five before this service, one here
    assert value("decision_seconds_count") == 2 and value("decision_seconds_sum") == 0.32
    assert value("estimate_seconds_count") == 2
    assert value("decision_seconds_bucket", le="0.05") == 1
    assert {state: value("jobs", state=state) for state in (
        "pending", "running", "backoff", "done", "failed", "cancelled")} == {
        "pending": 0, "running": 1, "backoff": 1, "done": 1, "failed": 0, "cancelled": 0}
    assert value("gpus", gpu_type="a100") == 4 and value("gpus", gpu_type="t4") == 2
    assert value("gpus_allocated", gpu_type="a100") == 2
    assert value("gpus_allocated", gpu_type="t4") == 1
    assert scrape["bayes_sched_serve_job_gpus"] == {
        (("gpu_type", "a100"), ("job_name", "a")): 2, (("gpu_type", "t4"), ("job_name", "a")): 1}
    assert scrape["bayes_sched_serve_job_goodput"] == {(("job_name", "a"),): 812.5}
    assert scrape["bayes_sched_serve_job_throughput"] == {(("job_name", "a"),): 900.0}
    assert scrape["bayes_sched_serve_job_epochs"] == {(("job_name", "a"),): 0.5,
                                                      (("job_name", "b"),): 0.0}
    assert value("restarts_total") == 3 and value("failures_total") == 2
    assert scrape["bayes_sched_serve_events_total"] == {(("kind", "grown"),): 1,
                                                        (("kind", "retrying"),): 2}
    assert value("last_round_timestamp_seconds") > 0


def test_the_dashboard_queries_only_served_metrics_and_labels(scrape: Scrape) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    queries += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(dashboard["panels"]) >= 8
    labels_served = {name for series in scrape.values() for key in series for name, _ in key}
    used = set()
    for expr in queries:
        metrics = set(re.findall(r"\bbayes_sched_\w+", expr))
        assert metrics, expr
        for metric in metrics:
            assert metric in scrape, f"{metric} (in {expr!r}) is not served"
            used.add(re.sub(r"_(bucket|count|sum)$", "", metric))
        labels = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
        for group in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
            labels |= {label.strip() for label in group.split(",") if label.strip()}
        legend_labels = set()
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                if target["expr"] == expr:
                    legend_labels |= set(re.findall(r"\{\{(\w+)\}\}", target["legendFormat"]))
        known = labels_served | TARGET_LABELS | {"le"}
        assert labels | legend_labels <= known, (expr, sorted(labels - known))
    served = {re.sub(r"_(bucket|count|sum|total|created)$", "", name) for name in scrape}
    assert {re.sub(r"_total$", "", name) for name in used} >= served - {
        "bayes_sched_serve_job_throughput"}  # every series has a panel, bar throughput
