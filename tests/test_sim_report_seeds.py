"""The comparison report over seeds: headline first, the bar chart with error bars, per-seed values
in strict JSON, and an HTML page beside the Markdown that embeds the plots by relative path."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bayes_sched.jobs import JobSpec
from bayes_sched.sim import SimConfig, Workload, run_simulation, write_report
from bayes_sched.sim.laws import make_hidden

TINY = Workload("tiny", (JobSpec("a", 0.0, "ncf", 1, 1024), JobSpec("b", 30.0, "bert", 2, 48),
                         JobSpec("c", 60.0, "ncf", 2, 1024)))


def _config(seed: int) -> SimConfig:
    return SimConfig(num_nodes=1, gpus_per_node=4, max_time=6 * 3600.0, seed=seed,
                     hidden=make_hidden("contention", seed=seed))


@pytest.fixture(scope="module")
def results() -> list:
    return [run_simulation(TINY, policy, _config(seed))
            for policy in ("tiresias", "fifo") for seed in (3, 4)]


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.sources.append(dict(attrs)["src"] or "")


def test_report_over_seeds(results: list, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    report = write_report(results, out, baseline="fifo")
    text = report.read_text()
    lines = text.splitlines()
    assert lines[0] == "# Simulation report"
    assert re.fullmatch(r"- \*\*tiresias: [+-]\d+\.\d% avg JCT vs fifo \[90% t-interval over 2 "
                        r"seeds: [+-]\d+\.\d% to [+-]\d+\.\d%\]\*\*", lines[2]), lines[2]
    assert "![Mean avg JCT per policy and workload](avg_jct.png)" in text
    seeds = _strict((out / "seeds.json").read_text())
    assert isinstance(seeds, dict) and seeds["interval"].startswith("90% Student-t")
    by_policy = {row["policy"]: row for row in seeds["rows"]}
    for policy in ("tiresias", "fifo"):
        row = by_policy[policy]
        runs = [r for r in results if r.policy == policy]
        assert row["per_seed"]["seed"] == [3, 4]
        assert row["per_seed"]["avg_jct"] == [r.summary["avg_jct"] for r in runs]
        assert row["avg_jct_lower_90"] <= row["avg_jct"] <= row["avg_jct_upper_90"]
    assert seeds["headlines"][0]["baseline"] == "fifo"
    assert (out / "avg_jct.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # One timeline per run, the seed in its name.
    assert {p.name for p in (out / "timelines").iterdir()} == {
        f"{p}__tiny__seed{s}.nc" for p in ("tiresias", "fifo") for s in (3, 4)}
    page = (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and "tiresias: " in page
    images = _Images()
    images.feed(page)
    assert images.sources == ["avg_jct.png", "jct_cdf.png", "utilization.png"]
    assert all((out / source).is_file() for source in images.sources)
    summary = _strict((out / "summary.json").read_text())
    assert isinstance(summary, list)
    assert {(r["seed"], r["cluster"], r["hidden"]) for r in summary} == {
        (3, "1x4:t4", "contention"), (4, "1x4:t4", "contention")}
