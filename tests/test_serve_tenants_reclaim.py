"""Quotas on a real cluster: a real ``serve`` (a subprocess of the command line, the local backend
on 2 logical GPUs, FIFO behind the quota stage) serves two tenants of one GPU each
(examples/tenants.toml). Tenant vision's two real tiny PyTorch jobs run, one on nlp's idle GPU;
nlp submits a job; vision's borrower is checkpointed and stopped, nlp's starts, and vision's
resumes from its checkpoint once nlp's is done. Read back from ``events --json``, ``status
--json`` and ``status --tenant``, serve's log and its Prometheus endpoint while it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bayes_sched.service.state import StateStore
from tests.cli_inprocess import run_cli
from tests.real_jobs import check_moved_jobs
from tests.test_serve_events import Seen, serve_and_scrape
from tests.test_service import EXAMPLE, _job_file

ROOT = Path(__file__).resolve().parents[1]
TENANTS = ROOT / "examples" / "tenants.toml"
#: serve's options as docs/guide/serve.md shows them (the test adds --state and --prometheus).
SERVE = ("--gpus", "2", "--interval", "1", "--policy", "fifo", "--tenants", str(TENANTS),
         "--exit-when-idle")


def _jobs(tmp_path: Path) -> dict[str, Path]:
    """Job files: vision's two jobs long enough to be running when nlp's arrives (a fixed batch,
    a sleep per step), nlp's short one."""
    def job(name: str, examples: int, sleep: float) -> Path:
        return _job_file(tmp_path, name, EXAMPLE, max_batch_size=32, args=[
            "--examples", str(examples), "--step-sleep", str(sleep), "--report-interval", "0.3"])
    return {"a1": job("a1", 4096, 0.03), "a2": job("a2", 4096, 0.03), "b1": job("b1", 2048, 0.005)}


def _value(seen: Seen, name: str, **labels: str) -> float:
    return seen.get((f"bayes_sched_serve_{name}", tuple(sorted(labels.items()))), -1.0)


def test_borrowed_gpu_is_reclaimed_for_its_owner_through_checkpoint_stop_restart(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    files = _jobs(tmp_path)
    for name in ("a1", "a2"):
        submitted = run_cli("submit", str(files[name]), "--tenant", "vision", "--state",
                            str(state))
        assert submitted.returncode == 0, submitted.stderr
        assert submitted.stdout == f"submitted {name} for tenant vision\n"
    store = StateStore(state, create=False)
    while_borrowing: dict[str, Any] = {}

    def submit_once_a2_trains() -> None:
        """Once a2 runs on nlp's idle GPU and has trained (so that it has a checkpoint to
        take), read status and submit nlp's job."""
        if while_borrowing:
            return
        jobs = {job["name"]: job for job in store.jobs()}
        record = jobs["a2"]["record"] or {}
        if record.get("status") != "running" or record.get("epochs", 0.0) < 0.1:
            return
        shown = run_cli("status", "--state", str(state), "--json")
        while_borrowing.update(json.loads(shown.stdout))
        late = run_cli("submit", str(files["b1"]), "--tenant", "nlp", "--state", str(state))
        assert late.returncode == 0, late.stderr

    status, lines, seen = serve_and_scrape(state, SERVE, during=submit_once_a2_trains)
    assert status == 0, "\n".join(lines[-40:])
    assert while_borrowing, "a2 never trained on the borrowed GPU"

    # While a2 borrowed: vision held both GPUs, one beyond its quota.
    tenants = {t["name"]: t for t in while_borrowing["tenants"]}
    assert tenants["vision"] == {"name": "vision", "gpus": 2, "quota": 1.0, "borrowed": 1.0,
                                 "jobs": {"running": 2}}
    assert tenants["nlp"] == {"name": "nlp", "gpus": 0, "quota": 1.0, "borrowed": 0.0,
                              "jobs": {}}

    # The events: a2 checkpointed, then reclaimed for nlp, then b1 started; a2 resumed once a GPU
    # was its tenant's to use again: b1 done (nlp's GPU idle, lent again) or a1 done (vision's own).
    shown = run_cli("events", "--state", str(state), "--json")
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)
    order = [(e["job"], e["kind"]) for e in events]
    reclaimed = order.index(("a2", "reclaimed"))
    assert ("a2", "checkpoint") in order[:reclaimed]
    assert order.index(("b1", "submitted")) < reclaimed < order.index(("b1", "started"))
    assert min(order.index(("b1", "finished")), order.index(("a1", "finished"))) < order.index(
        ("a2", "restarted"))
    assert not {("a1", "reclaimed"), ("a1", "preempted"), ("a2", "preempted")} & set(order)
    by_key = {(e["job"], e["kind"]): e for e in events}
    reclaim = by_key[("a2", "reclaimed")]
    assert reclaim["detail"] == {"reason": "reclaimed for tenant nlp", "for_tenants": ["nlp"],
                                 "tenant": "vision"}
    restarted = by_key[("a2", "restarted")]
    assert restarted["message"].endswith("; after: reclaimed for tenant nlp")
    assert {e["detail"]["tenant"] for e in events if e["job"] == "b1"} == {"nlp"}
    started = by_key[(None, "serve-started")]["message"]
    assert "policy fifo+quota" in started and started.endswith("tenants vision, nlp")
    # ... each one a line of serve's log, naming the tenant.
    assert any(line.endswith(f"job a2 (tenant vision) reclaimed: {reclaim['message']}")
               for line in lines), lines
    # Every job resumed from its last checkpoint and finished; nothing ran twice.
    jobs = {job["name"]: job for job in store.jobs()}
    assert check_moved_jobs(state, jobs, 2.0) >= 1

    # One tenant's events, and its line and jobs in status.
    nlp_events = json.loads(run_cli("events", "--tenant", "nlp", "--state", str(state),
                                    "--json").stdout)
    assert {e["job"] for e in nlp_events} == {"b1"}
    vision = run_cli("status", "--tenant", "vision", "--state", str(state))
    assert vision.returncode == 0, vision.stderr
    assert "tenant vision: 0 GPUs held of quota 1; 0 running, 0 pending" in vision.stdout
    assert "tenant nlp" not in vision.stdout and "b1" not in vision.stdout
    assert "a1" in vision.stdout and "a2" in vision.stdout
    final = json.loads(run_cli("status", "--state", str(state), "--json").stdout)
    assert [(t["name"], t["jobs"]) for t in final["tenants"]] == [
        ("vision", {"done": 2}), ("nlp", {"done": 1})]

    # The Prometheus series, as served while it ran.
    assert _value(seen, "tenant_quota_gpus", tenant="vision") == 1
    assert _value(seen, "tenant_quota_gpus", tenant="nlp") == 1
    assert _value(seen, "tenant_gpus", tenant="vision") == 2
    assert _value(seen, "tenant_borrowed_gpus", tenant="vision") == 1
    assert _value(seen, "tenant_gpus", tenant="nlp") == 1
    assert _value(seen, "tenant_borrowed_gpus", tenant="nlp") == 0
    assert _value(seen, "tenant_jobs", tenant="nlp", state="running") == 1
    assert _value(seen, "tenant_jobs", tenant="vision", state="pending") >= 1
    assert _value(seen, "events_total", kind="reclaimed") == 1
