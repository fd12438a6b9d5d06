"""The training client with real processes: a tiny seeded PyTorch job (gloo on the CPU) started by
the local launcher, driven through its job directory as the scheduler drives it."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bayes_sched.backends.launcher import LaunchSpec
from bayes_sched.backends.local import LocalLauncher, LocalProcesses
from bayes_sched.client.protocol import (
    ENV_INIT_BATCH,
    ENV_TARGET_EPOCHS,
    Control,
    read_reports,
    write_control,
)
from perfmodel.efficiency import gradient_noise_estimate

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_tiny.py"
EXAMPLES_PER_EPOCH = 2048
INIT_BATCH = 32


def _start(launcher: LocalLauncher, job_dir: Path, gpus: int, attempt: int,
           step_sleep: float = 0.004) -> LocalProcesses:
    argv = (sys.executable, str(EXAMPLE), "--examples", str(EXAMPLES_PER_EPOCH),
            "--step-sleep", str(step_sleep), "--report-interval", "0.3")
    env = {"PYTHONPATH": str(ROOT), ENV_INIT_BATCH: str(INIT_BATCH), ENV_TARGET_EPOCHS: "2"}
    return launcher.start(LaunchSpec("tiny", argv, (gpus,), str(job_dir), attempt, env))


def _wait_for(job_dir: Path, processes: LocalProcesses, found: Any, timeout: float = 90.0
              ) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reports = read_reports(job_dir)[0]
        if found(reports):
            return reports
        status = processes.poll()
        assert status is None, f"job ended early: {status}"
        time.sleep(0.05)
    raise AssertionError(f"timed out; reports: {read_reports(job_dir)[0][-5:]}")


def test_gradient_noise_estimate_recovers_known_statistics() -> None:
    # Per-example gradients g_i = G + noise with tr(Sigma) known; the two-batch estimator,
    # averaged over many steps, recovers |G|^2 and tr(Sigma) / B0.
    rng = np.random.default_rng(0)
    dim, small, big, init = 50, 8, 64, 16
    true = rng.normal(size=dim) * 0.3
    sigma = 2.0                                     # per-coordinate std of one example
    estimates = []
    for _ in range(4000):
        examples = true + sigma * rng.normal(size=(big, dim))
        small_grad = examples[:small].mean(axis=0)
        big_grad = examples.mean(axis=0)
        estimates.append(gradient_noise_estimate(float(small_grad @ small_grad), small,
                                                 float(big_grad @ big_grad), big, init))
    sqr, var = np.mean(estimates, axis=0)
    assert sqr == pytest.approx(true @ true, rel=0.05)
    assert var == pytest.approx(dim * sigma**2 / init, rel=0.05)
    with pytest.raises(ValueError, match="expected 0 < small < big"):
        gradient_noise_estimate(1.0, 8, 1.0, 8, 8)


def test_client_measures_applies_batch_checkpoints_and_restores(tmp_path: Path) -> None:
    launcher = LocalLauncher(4)
    job_dir = tmp_path / "tiny"
    write_control(job_dir, Control(local_bsz=16, accum_steps=0, version=1))
    processes = _start(launcher, job_dir, gpus=2, attempt=0)
    try:
        # Two replicas over gloo: step times per configuration, gradient statistics, progress.
        reports = _wait_for(job_dir, processes, lambda rs: any(
            r["kind"] == "gradient" for r in rs) and any(r["kind"] == "step" for r in rs))
        step = next(r for r in reports if r["kind"] == "step")
        assert (step["num_replicas"], step["local_bsz"], step["accum_steps"]) == (2, 16, 0)
        assert step["gpu_type"] == "cpu" and step["placement"] == "2"
        assert 0 <= step["sync_time"] <= step["step_time"] and step["count"] >= 1
        gradient = next(r for r in reports if r["kind"] == "gradient")
        assert gradient["grad_sqr"] > 0 and gradient["grad_var"] > 0
        # The start report says what an all-reduce moves: train_tiny's default MLP is
        # Linear(32, 64) and Linear(64, 4), float32.
        start = next(r for r in reports if r["kind"] == "start")
        parameters = 32 * 64 + 64 + 64 * 4 + 4
        assert (start["parameters"], start["gradient_bytes"]) == (parameters, 4 * parameters)

        # The scheduler tunes the batch and asks for a checkpoint in one control.
        write_control(job_dir, Control(local_bsz=32, accum_steps=1, checkpoint_request=1,
                                       version=2))
        reports = _wait_for(job_dir, processes, lambda rs: any(
            r["kind"] == "step" and r["local_bsz"] == 32 for r in rs) and any(
            r["kind"] == "checkpoint" for r in rs))
        tuned = [r for r in reports if r["kind"] == "step" and r["local_bsz"] == 32]
        assert all(r["accum_steps"] == 1 for r in tuned)
        progress = [r for r in reports if r["kind"] == "progress" and r["batch_size"] == 128]
        # AdaScale: a batch of 4 x B0 makes more than one step of progress per step, < 4.
        assert progress and 1.0 < progress[-1]["lr_gain"] < 4.0, reports[-6:]
        ack = next(r for r in reports if r["kind"] == "checkpoint")
        assert ack["request"] == 1

        # Killed without warning: the restart resumes at the acknowledged checkpoint exactly.
        os.killpg(processes.pgid, 9)
        assert processes.stop(5.0).returncode == -9
        write_control(job_dir, Control(local_bsz=64, accum_steps=1, checkpoint_request=1,
                                       version=3))
        # Slow steps: the job must still be training when the SIGTERM below reaches it (one that
        # has finished and is tearing down dies of the signal, as any process does).
        processes = _start(launcher, job_dir, gpus=1, attempt=1, step_sleep=0.2)
        reports = _wait_for(job_dir, processes, lambda rs: sum(
            r["kind"] == "start" for r in rs) == 2 and rs[-1]["kind"] != "start")
        restart = [r for r in reports if r["kind"] == "start"][1]
        assert restart["restored"] and restart["world_size"] == 1
        assert (restart["step"], restart["progress"], restart["epochs"]) == (
            ack["step"], ack["progress"], ack["epochs"])

        # SIGTERM: the client checkpoints at the next step boundary and exits 0; nothing lost.
        status = processes.stop(30.0)
        assert status.returncode == 0
        reports = read_reports(job_dir)[0]
        stopped = reports[-1]
        assert stopped["kind"] == "exit" and stopped["status"] == "stopped"
        processes = _start(launcher, job_dir, gpus=1, attempt=2, step_sleep=0.0)
        deadline = time.monotonic() + 90
        while processes.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes.poll() == processes.poll() and processes.poll().returncode == 0
        reports = read_reports(job_dir)[0]
        last_start = [r for r in reports if r["kind"] == "start"][-1]
        assert (last_start["step"], last_start["progress"]) == (stopped["step"],
                                                                stopped["progress"])
        assert reports[-1]["kind"] == "exit" and reports[-1]["status"] == "done"
        assert reports[-1]["epochs"] == 2.0
    finally:
        launcher.close()
