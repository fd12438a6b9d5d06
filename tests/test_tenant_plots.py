"""Per-tenant metrics plotted and reported (:mod:`bayes_sched.sim.tenant_plots`): ``simulate
--plot`` and ``--out`` on a cluster with ``[[tenants]]``, and ``compare`` on traces (its tenant
report), write the per-tenant PNGs, the plotted numbers and a "Tenants" section, from real runs
of the command line."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tests.cli_inprocess import run_cli

PNG = b"\x89PNG\r\n\x1a\n"
LINE = "ResNet-18 (batch size 16)\tcmd\tdir\t--n\t0\t20000\t{g}\t1\t-1\t{t}\t{tenant}\n"


def _inputs(tmp_path: Path) -> tuple[Path, Path]:
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('nodes = "v100:2x4"\n[[tenants]]\nname = "a"\nquota = 4\n'
                       '[[tenants]]\nname = "b"\nquota = 4\n[[tenants]]\nname = "idle"\n'
                       'weight = 1\n')
    trace = tmp_path / "t.trace"
    trace.write_text("".join(LINE.format(g=g, t=t, tenant=n) for g, t, n in (
        (4, 0, "a"), (4, 0, "a"), (4, 0, "a"), (1, 60, "b"), (1, 60, "b"), (2, 90, "b"))))
    return cluster, trace


def test_simulate_plots_each_tenant_and_reports_them(tmp_path: Path) -> None:
    cluster, trace = _inputs(tmp_path)
    plots, out = tmp_path / "plots", tmp_path / "out"
    done = run_cli("simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy",
                   "astraea", "--no-progress", "--plot", str(plots), "--out", str(out))
    assert done.returncode == 0, done.stderr
    png = plots / "tenants_astraea_t_seed0.png"
    assert png.read_bytes().startswith(PNG)
    timeline = pd.read_csv(plots / "tenants_astraea_t_seed0.csv")
    assert set(timeline["tenant"]) == {"a", "b", "idle"}
    assert {"time", "share", "quota_fraction", "ltgf", "quota_satisfaction"} <= set(timeline)
    last = timeline.groupby("tenant").last()
    assert abs(last["share"].sum() - 1.0) < 1e-9  # shares of GPU-time received sum to 1
    table = pd.read_csv(plots / "tenants_astraea_t_seed0_tenants.csv").set_index("tenant")
    assert table.loc["a", "jobs"] == 3 and table.loc["idle", "jobs"] == 0
    assert table.loc["b", "finished"] == 3 and table.loc["a", "slowdown"] >= 1.0
    report = (out / "report.md").read_text()
    assert "## Tenants" in report and "tenants/astraea__t.png" in report
    assert (out / "tenants" / "astraea__t.png").read_bytes().startswith(PNG)
    rows = [line for line in report.splitlines() if line.startswith("| astraea | t |")]
    assert len(rows) >= 3  # one row per tenant in the tenant table


def test_compare_reports_every_policys_tenants(tmp_path: Path) -> None:
    cluster, trace = _inputs(tmp_path)
    out = tmp_path / "cmp"
    done = run_cli("compare", "--policies", "astraea", "gavel_fifo", "--workloads", "none",
                   "--traces", str(trace), "--cluster", str(cluster), "--no-progress",
                   "--out", str(out), "--processes", "1")
    assert done.returncode == 0, done.stderr
    assert f"tenants: {out / 'tenants' / 'report.md'}" in done.stdout
    report = (out / "tenants" / "report.md").read_text()
    assert report.startswith("# Tenants")
    for policy in ("astraea", "gavel_fifo"):
        assert (out / "tenants" / f"{policy}__t.png").read_bytes().startswith(PNG)
        assert f"]({policy}__t.png)" in report
        assert f"| {policy} | t | 0 | a |" in report
        # --plot's default folder gets them too, beside the per-type utilisation
        assert (out / "type_utilization" / f"tenants_{policy}_t_seed0.png").is_file()
    html = (out / "tenants" / "report.html").read_text()
    assert "<title>Tenants</title>" in html and 'src="gavel_fifo__t.png"' in html
