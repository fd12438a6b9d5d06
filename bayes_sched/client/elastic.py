"""The elastic training client: what a PyTorch script wraps its model, optimiser and data in.

::

    job = ElasticJob(model, optimizer, dataset, init_batch_size=64, target_epochs=3, seed=0)
    with job:
        for inputs, targets in job.micro_batches():
            job.step(loss_fn(job.model(inputs), targets))

:class:`ElasticJob` joins the job's process group (``torch.distributed`` from the launcher's
``env://`` variables: gloo on CPU, NCCL on GPU; rank 0's store listens on ``MASTER_ADDR`` only,
not on every interface, :func:`rendezvous_store`) and wraps the model in DDP when there is more than
one replica; restores the job's checkpoint if there is one (model, optimiser, data position,
progress); hands out each replica's micro-batches of the per-GPU batch the scheduler asks for in
``control.json``; and at every optimiser step boundary

* measures the step: the time of the synchronising micro-step (forward, backward with the
  all-reduce, optimiser step) and the part of it spent waiting for the all-reduce after the last
  gradient bucket was ready (``sync_time``), or with accumulation the compute of the other
  micro-steps; reported per (placement, GPU type, per-GPU batch, accumulation steps) as the
  median over each report interval, the first steps after a start or a batch change left out;
* estimates the gradient noise from two gradients of the step (one micro-batch of rank 0, and
  the all-reduced one; :func:`perfmodel.efficiency.gradient_noise_estimate`), smoothed by an
  exponential moving average (decay 0.9 per step, bias-corrected as Adam does);
* scales the learning rate by AdaScale's gain (Johnson et al. 2020; the gain is
  :func:`perfmodel.efficiency.scale_invariant_gain`, ``r = (var + sqr) / (var / S + sqr)`` at
  ``S`` times the initial batch): ``lr = r * lr_0``, and counts ``r`` steps at the initial batch
  of progress. The gain lies in ``[1, S]``: square-root and linear scaling are its noise-free and
  noise-dominated ends, and it needs no hand-set rule per batch size. Before the first estimate
  (one replica without accumulation measures none) the gain is 1;
* applies a new per-GPU batch and accumulation from ``control.json`` (rank 0 reads the file; one
  small all-reduce per step gives every rank the same decision);
* checkpoints when the scheduler raised ``checkpoint_request`` (acknowledged by a ``checkpoint``
  report) and on SIGTERM (then exits at once with status 0), so a reallocation loses at most the steps
  since the request.

Rank 0 writes the reports (:mod:`bayes_sched.client.protocol`); the ``start`` report carries
the model's trainable ``parameters`` and the ``gradient_bytes`` one all-reduce moves (what
:mod:`perfmodel.sync_prior` predicts synchronisation time from). Without a job directory (a plain
``python train.py``) the job trains alone and reports nothing.

Every replica also logs what it does, for the people reading its log (under the scheduler, the
log is ``jobs/NAME/logs/attempt-N.rank-R.log``): its start (replicas, placement, batch, and the
checkpoint it restored), its progress at every report interval (step, epochs, mean loss, batch,
learning-rate gain, examples per second), batch changes, checkpoints and its exit. The lines go
to the ``bayes_sched.client`` logger; where the script configured no logging, to stderr (one
handler on that logger alone).
"""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import Dataset, TensorDataset, default_collate

from bayes_sched.client import protocol
from perfmodel.efficiency import gradient_noise_estimate, scale_invariant_gain

#: Checkpoint file in the job's checkpoint directory.
CHECKPOINT_FILE = "state.pt"
#: Optimiser steps after a start or a batch change that are not measured (allocator warm-up).
WARMUP_STEPS = 2
#: Decay of the moving averages of the gradient statistics, per measured step.
GRADIENT_DECAY = 0.9
#: Most of the training time the gradient statistics may take: a step is measured while the
#: time spent on them so far is within this fraction of the time trained (every step where the
#: norms are cheap next to the step, every few steps of a tiny model).
GRADIENT_BUDGET = 0.01
#: Seconds between looks at ``control.json`` (rank 0).
CONTROL_POLL_SECONDS = 0.1

LOG = logging.getLogger("bayes_sched.client")


def _log_to_stderr() -> None:
    """Send the client's log lines to stderr, unless the script configured logging itself."""
    if LOG.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)
    LOG.propagate = False


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def rendezvous_store(rank: int, world_size: int) -> dist.TCPStore:
    """The job's rendezvous store at ``MASTER_ADDR:MASTER_PORT`` (the launcher's variables), as
    ``init_method="env://"`` makes it, except that rank 0 listens on ``MASTER_ADDR`` alone:
    torch's own store listens on every interface, and a local job's ``MASTER_ADDR`` is loopback
    (its rendezvous is then reachable from this machine only)."""
    address = os.environ["MASTER_ADDR"]
    port = int(os.environ["MASTER_PORT"])
    listen_fd = None
    if rank == 0:
        family, kind, proto, _, where = socket.getaddrinfo(
            address, port, type=socket.SOCK_STREAM)[0]
        listener = socket.socket(family, kind, proto)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(where)
        listener.listen(socket.SOMAXCONN)
        listen_fd = listener.detach()  # the store owns it from here
    return dist.TCPStore(address, port, world_size, rank == 0,
                         dist.constants.default_pg_timeout, multi_tenant=True,
                         master_listen_fd=listen_fd)


class ElasticJob:
    """A training job that the scheduler can resize, re-batch and move.

    Args:
        model: the model (moved to the replica's device; wrapped in DDP for several replicas).
        optimizer: its optimiser, built on ``model.parameters()``; its learning rates are those
            tuned for ``init_batch_size`` (AdaScale scales them from there).
        dataset: a map-style dataset of ``len(dataset)`` examples.
        init_batch_size: the total batch ``B0`` the learning rate was tuned for (examples); the
            scheduler's ``BAYES_SCHED_INIT_BATCH`` wins where set.
        target_epochs: epochs to train (the scheduler's ``BAYES_SCHED_TARGET_EPOCHS`` wins).
        seed: seeds the data order (one permutation per epoch) and the model's initialisation
            is the script's business.
        collate: turns a list of examples into a batch (default: torch's ``default_collate``).
        report_interval: seconds between report lines (rank 0).
        device: where the replica computes (default: its GPU where CUDA is available, else CPU).
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, dataset: Dataset[Any],
                 init_batch_size: int | None = None, target_epochs: float | None = None,
                 seed: int = 0, collate: Callable[[list[Any]], Any] | None = None,
                 report_interval: float = 2.0, device: torch.device | str | None = None) -> None:
        init = _env_int(protocol.ENV_INIT_BATCH) or init_batch_size
        if init is None or init < 1:
            raise ValueError(f"init_batch_size is {init!r}: expected the initial batch (>= 1), "
                             f"as an argument or in {protocol.ENV_INIT_BATCH}")
        target_text = os.environ.get(protocol.ENV_TARGET_EPOCHS)
        target = float(target_text) if target_text else target_epochs
        if target is None or not target > 0:
            raise ValueError(f"target_epochs is {target!r}: expected epochs > 0, as an argument "
                             f"or in {protocol.ENV_TARGET_EPOCHS}")
        self.init_batch_size = int(init)
        self.target_epochs = float(target)
        self.seed = seed
        self.dataset = dataset
        self.num_examples = len(dataset)  # type: ignore[arg-type]
        self.collate = collate or default_collate
        self.report_interval = report_interval
        self.optimizer = optimizer

        directory = os.environ.get(protocol.ENV_JOB_DIR)
        self.job_dir = Path(directory) if directory else None
        self.rank = _env_int("RANK") or 0
        self.world_size = _env_int("WORLD_SIZE") or 1
        self.attempt = _env_int(protocol.ENV_ATTEMPT) or 0
        self.placement = os.environ.get(protocol.ENV_PLACEMENT) or str(self.world_size)
        self.num_nodes = len(self.placement)
        self.gpu_type = os.environ.get(protocol.ENV_GPU_TYPE) or "default"
        if device is None:
            device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
        self.device = torch.device(device)
        if self.world_size > 1 and not dist.is_initialized():
            backend = "nccl" if self.device.type == "cuda" else "gloo"
            if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's store
                dist.init_process_group(backend, init_method="env://")
            else:
                dist.init_process_group(backend, store=rendezvous_store(self.rank,
                                                                        self.world_size),
                                        rank=self.rank, world_size=self.world_size)

        # Training state (what a checkpoint holds).
        self.epoch = 0
        self.position = 0          # examples of this epoch consumed by all replicas together
        self.steps = 0             # optimiser steps
        self.progress = 0.0        # steps at the initial batch (AdaScale's scale-invariant steps)
        self._base_lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self._sqr_avg = self._var_avg = self._avg_weight = 0.0
        self._acked_request = self._requested = 0
        self.local_bsz = max(1, math.ceil(self.init_batch_size / self.world_size))
        self.accum_steps = 0
        self.restored = False

        # Per micro-step bookkeeping and measurements.
        self._micro = 0
        self._stepped = True
        self._micro_start = 0.0
        self._small_sqr: float | None = None
        self._measure_gradient = False
        self._gradient_seconds = 0.0
        self._train_seconds = 0.0
        self._step_start = 0.0
        self._control_checked = 0.0
        self._warmup = WARMUP_STEPS
        self._step_times: list[float] = []
        self._sync_times: list[float] = []
        self._compute_times: list[float] = []
        self._last_report = time.monotonic()
        self._loss_total: torch.Tensor | float = 0.0
        self._losses = 0
        self._logged = (time.monotonic(), 0)  # when progress was last logged, at which step

        self._gain = 1.0
        model.to(self.device)
        self._module = model
        self._restore()
        self._refresh_gain()
        self._requested = self._acked_request
        self._control_stamp: tuple[int, int] | None = None
        self._read_control()

        self.model: nn.Module = model
        self._local_sqr_parts: list[torch.Tensor] = []
        self._last_hook_time = 0.0
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            ddp = DistributedDataParallel(model, device_ids=ids)
            ddp.register_comm_hook(None, self._comm_hook)
            self.model = ddp
        self._parameters = [p for p in model.parameters() if p.requires_grad]
        self._terminate = False
        self._finished = False
        if self.world_size > 1:
            self._agree()  # ranks may have read control.json on either side of a rewrite
            self._warmup = WARMUP_STEPS

        self._permutation_epoch = -1
        self._permutation = torch.empty(0, dtype=torch.int64)
        if self.job_dir is not None:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
        _log_to_stderr()
        LOG.info("rank %d of %d: attempt %d, placement %s on %s (%s), batch %s; %s", self.rank,
                 self.world_size, self.attempt, self.placement, self.gpu_type, self.device,
                 self._batch_text(), f"restored the checkpoint at step {self.steps} (epoch "
                 f"{self.epochs:.2f})" if self.restored else "from the start")
        self._report("start", attempt=self.attempt, world_size=self.world_size,
                     placement=self.placement, gpu_type=self.gpu_type, local_bsz=self.local_bsz,
                     accum_steps=self.accum_steps, restored=self.restored, step=self.steps,
                     progress=self.progress, epochs=self.epochs,
                     examples_per_epoch=self.num_examples, pid=os.getpid(),
                     parameters=sum(p.numel() for p in self._parameters),
                     gradient_bytes=sum(p.numel() * p.element_size() for p in self._parameters))

    # --- what the script reads -----------------------------------------------------------------

    @property
    def epochs(self) -> float:
        """Epochs done, with the fraction of the current one."""
        return self.epoch + self.position / self.num_examples

    @property
    def batch_size(self) -> int:
        """Total batch of an optimiser step (examples)."""
        return self.local_bsz * (self.accum_steps + 1) * self.world_size

    @property
    def done(self) -> bool:
        return self.epochs >= self.target_epochs - 1e-12

    # --- the training loop -------------------------------------------------------------------

    def micro_batches(self) -> Iterator[Any]:
        """This replica's micro-batches until the target epochs are done; call :meth:`step` with
        each micro-batch's loss. Epochs drop their last partial batch."""
        while not self.done:
            permutation = self._epoch_permutation()
            while self.position + self.batch_size <= self.num_examples and not self.done:
                if self.batch_size > self.num_examples:
                    raise ValueError(f"batch of {self.batch_size} examples exceeds the dataset's "
                                     f"{self.num_examples}")
                for micro in range(self.accum_steps + 1):
                    start = (self.position
                             + (micro * self.world_size + self.rank) * self.local_bsz)
                    batch = self._fetch(permutation[start:start + self.local_bsz])
                    self._micro = micro
                    self._stepped = False
                    self._micro_start = time.perf_counter()
                    if micro == 0:
                        self._start_step()
                    yield batch
                    if not self._stepped:
                        raise RuntimeError("ElasticJob: call step(loss) once per micro-batch")
            if self.position + self.batch_size > self.num_examples:
                self.epoch += 1
                self.position = 0

    def _batch_text(self) -> str:
        return (f"{self.local_bsz}x{self.accum_steps + 1}x{self.world_size} = "
                f"{self.batch_size}")

    def _start_step(self) -> None:
        self._step_start = self._micro_start
        self._measure_gradient = (
            self.rank == 0 and self.world_size * (self.accum_steps + 1) >= 2
            and self._gradient_seconds <= GRADIENT_BUDGET * self._train_seconds)

    def step(self, loss: torch.Tensor) -> None:
        """Backward pass of one micro-batch's loss; at the last micro-step of an optimiser step
        also the all-reduce, the optimiser step at the AdaScale learning rate, measurements,
        reports, the scheduler's control and checkpoints."""
        accum = self.accum_steps
        last = self._micro == accum
        self._loss_total = self._loss_total + loss.detach()
        self._losses += 1
        scaled = loss / (accum + 1) if accum else loss
        if not last and self.world_size > 1:
            with self.model.no_sync():  # type: ignore[operator]
                scaled.backward()
        else:
            self._local_sqr_parts.clear()
            scaled.backward()
        self._stepped = True
        if self._micro == 0 and accum > 0 and self._measure_gradient:
            # One micro-batch's gradient: the accumulator holds it divided by (accum + 1).
            start = time.perf_counter()
            self._small_sqr = self._grad_sqr_norm() * (accum + 1) ** 2
            self._gradient_seconds += time.perf_counter() - start
        backward_end = time.perf_counter()
        if not last:
            self._compute_times.append(backward_end - self._micro_start)
            return
        sync_time = 0.0
        if self.world_size > 1:
            sync_time = max(0.0, backward_end - self._last_hook_time)
            if accum == 0 and self._local_sqr_parts:
                self._small_sqr = float(torch.stack(self._local_sqr_parts).sum())
        if self._measure_gradient:
            start = time.perf_counter()
            self._update_gradient_stats()
            self._gradient_seconds += time.perf_counter() - start
        gain = self.gain
        for group, base in zip(self.optimizer.param_groups, self._base_lrs, strict=True):
            group["lr"] = base * gain
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        end = time.perf_counter()
        step_time = end - self._micro_start
        self._train_seconds += end - self._step_start
        self.progress += gain
        self.steps += 1
        self.position += self.batch_size
        if self._warmup > 0:
            self._warmup -= 1
            self._compute_times.clear()
        else:
            self._step_times.append(step_time)
            self._sync_times.append(sync_time)
        self._boundary()

    @property
    def gain(self) -> float:
        """AdaScale's gain at the current batch (1 before the first gradient estimate); kept
        from the last change of the batch or the gradient statistics (read every step)."""
        return self._gain

    def _refresh_gain(self) -> None:
        scale = self.batch_size / self.init_batch_size
        if self._avg_weight == 0.0 or scale == 1.0:
            self._gain = 1.0
            return
        sqr, var = self.gradient_stats()
        gain = scale_invariant_gain(max(sqr, 0.0), max(var, 0.0), scale)
        self._gain = min(max(gain, 1.0), max(scale, 1.0))

    def gradient_stats(self) -> tuple[float, float]:
        """Smoothed ``(grad_sqr, grad_var)`` at the initial batch (0s before the first)."""
        if self._avg_weight == 0.0:
            return 0.0, 0.0
        return self._sqr_avg / self._avg_weight, self._var_avg / self._avg_weight

    def finish(self) -> None:
        """Report the job done (rank 0) and leave the process group."""
        if self._finished:
            return
        self._finished = True
        self._flush_reports()
        LOG.info("%s at step %d, epoch %.2f of %g", "done" if self.done else "stopped",
                 self.steps, self.epochs, self.target_epochs)
        self._report("exit", status="done" if self.done else "stopped", step=self.steps,
                     progress=self.progress, epochs=self.epochs)
        if self.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()

    def __enter__(self) -> ElasticJob:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if error is None:
            self.finish()
        elif not isinstance(error, SystemExit | KeyboardInterrupt):
            self._finished = True
            message = "".join(traceback.format_exception_only(kind, error)).strip()
            self._report("exit", status="error", message=message[-2000:], step=self.steps,
                         progress=self.progress, epochs=self.epochs)

    # --- measurements ---------------------------------------------------------------------------

    def _comm_hook(self, state, bucket):
        # Unannotated: DDP checks the annotations against its classes, not against strings.
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        if self._measure_gradient:
            # The bucket holds this replica's own gradient until the all-reduce averages it.
            self._local_sqr_parts.append(bucket.buffer().detach().pow(2).sum())
        self._last_hook_time = time.perf_counter()
        return allreduce_hook(None, bucket)  # type: ignore[arg-type]

    def _grad_sqr_norm(self) -> float:
        grads = [p.grad for p in self._parameters if p.grad is not None]
        if not grads:
            return 0.0
        return float(torch.nn.utils.get_total_norm(grads)) ** 2

    def _update_gradient_stats(self) -> None:
        small, self._small_sqr = self._small_sqr, None
        count = self.world_size * (self.accum_steps + 1)
        if small is None or count < 2:
            return
        big = self._grad_sqr_norm()
        sqr, var = gradient_noise_estimate(small, self.local_bsz, big, self.batch_size,
                                           self.init_batch_size)
        if not (math.isfinite(sqr) and math.isfinite(var)):
            return
        self._sqr_avg = GRADIENT_DECAY * self._sqr_avg + (1 - GRADIENT_DECAY) * sqr
        self._var_avg = GRADIENT_DECAY * self._var_avg + (1 - GRADIENT_DECAY) * var
        self._avg_weight = GRADIENT_DECAY * self._avg_weight + (1 - GRADIENT_DECAY)
        self._refresh_gain()

    # --- step boundary: control, checkpoints, reports --------------------------------------------

    def _boundary(self) -> None:
        now = time.monotonic()
        if self.rank == 0 and now - self._control_checked >= CONTROL_POLL_SECONDS:
            self._control_checked = now
            self._read_control()
        if self.world_size > 1:
            self._agree()
        if self._requested > self._acked_request:
            self._acked_request = self._requested
            self._checkpoint()
            LOG.info("checkpoint at step %d, epoch %.2f (the scheduler asked)", self.steps,
                     self.epochs)
            self._report("checkpoint", request=self._requested, step=self.steps,
                         progress=self.progress, epochs=self.epochs)
        if self._terminate:
            self._checkpoint()
            self._flush_reports()
            LOG.info("stopped by the scheduler (SIGTERM) at step %d, epoch %.2f: checkpoint "
                     "saved", self.steps, self.epochs)
            self._report("exit", status="stopped", step=self.steps, progress=self.progress,
                         epochs=self.epochs)
            sys.stdout.flush()
            sys.stderr.flush()
            # At once: everything is on disk, and tearing down the interpreter with a live
            # gloo group took seconds, once past the launcher's grace.
            os._exit(0)
        if time.monotonic() - self._last_report >= self.report_interval:
            self._flush_reports()

    def _agree(self) -> None:
        """Give every rank rank 0's control and any rank's SIGTERM (one small all-reduce)."""
        decision = torch.tensor([self.local_bsz if self.rank == 0 else 0,
                                 self.accum_steps if self.rank == 0 else 0,
                                 self._requested if self.rank == 0 else 0,
                                 int(self._terminate)], dtype=torch.int64,
                                device=self.device if self.device.type == "cuda" else None)
        dist.all_reduce(decision, op=dist.ReduceOp.MAX)
        local, accum, requested, terminate = (int(v) for v in decision.tolist())
        self._apply_batch(local, accum)
        self._requested = requested
        self._terminate = bool(terminate)

    def _read_control(self) -> None:
        """Take up a new ``control.json`` (rank 0; re-read only when the file was replaced)."""
        if self.job_dir is None:
            return
        try:
            info = os.stat(self.job_dir / protocol.CONTROL_FILE)
        except FileNotFoundError:
            return
        stamp = (info.st_ino, info.st_mtime_ns)
        if stamp == self._control_stamp:
            return
        self._control_stamp = stamp
        control = protocol.read_control(self.job_dir)
        if control is None:
            return
        self._apply_batch(control.local_bsz, control.accum_steps)
        self._requested = control.checkpoint_request

    def _apply_batch(self, local_bsz: int, accum_steps: int) -> None:
        if (local_bsz, accum_steps) != (self.local_bsz, self.accum_steps):
            if self._step_times:  # the measurements so far belong to the old configuration
                self._flush_reports()
            before = self._batch_text()
            self.local_bsz, self.accum_steps = local_bsz, accum_steps
            self._warmup = WARMUP_STEPS
            self._refresh_gain()
            if self.steps:  # not the first control of a start
                LOG.info("batch %s -> %s (the scheduler's) at step %d", before,
                         self._batch_text(), self.steps)

    def _flush_reports(self) -> None:
        """Report the measurements since the last flush, the gradient statistics and progress
        (one write, one ``fsync``); log the progress."""
        self._last_report = time.monotonic()
        self._log_progress()
        if self.rank != 0 or self.job_dir is None:
            self._step_times.clear()
            self._sync_times.clear()
            self._compute_times.clear()
            return
        now = time.time()
        lines: list[dict[str, Any]] = []
        if self._step_times:
            times = sorted(self._step_times)
            step_time = statistics.median(times)
            if self._compute_times:
                sync_time = max(0.0, step_time - statistics.median(self._compute_times))
            else:
                sync_time = statistics.median(self._sync_times)
            lines.append({"kind": "step", "time": now, "placement": self.placement,
                          "gpu_type": self.gpu_type, "num_nodes": self.num_nodes,
                          "num_replicas": self.world_size, "local_bsz": self.local_bsz,
                          "accum_steps": self.accum_steps, "step_time": step_time,
                          "sync_time": min(sync_time, step_time),
                          "step_time_p10": times[int(0.1 * (len(times) - 1))],
                          "step_time_p90": times[int(math.ceil(0.9 * (len(times) - 1)))],
                          "count": len(times)})
        self._step_times.clear()
        self._sync_times.clear()
        self._compute_times.clear()
        sqr, var = self.gradient_stats()
        if sqr > 0 and var >= 0:
            lines.append({"kind": "gradient", "time": now, "grad_sqr": sqr, "grad_var": var,
                          "batch_size": self.batch_size})
        lines.append({"kind": "progress", "time": now, "step": self.steps,
                      "progress": self.progress, "epochs": self.epochs,
                      "examples_per_epoch": self.num_examples, "batch_size": self.batch_size,
                      "lr_gain": self.gain})
        # Not fsynced: superseded by the next; what must be durable (checkpoints, start and
        # exit reports) is written durably.
        protocol.append_reports(self.job_dir, lines, durable=False)

    def _log_progress(self) -> None:
        """One line of progress since the last: step, epochs, mean loss, batch, gain, speed."""
        now = time.monotonic()
        since, steps = self._logged
        if self.steps == steps:
            return
        loss = float(self._loss_total) / max(self._losses, 1)
        speed = (self.steps - steps) * self.batch_size / max(now - since, 1e-9)
        self._loss_total, self._losses, self._logged = 0.0, 0, (now, self.steps)
        LOG.info("step %d, epoch %.2f of %g, loss %.4g, batch %s, lr gain %.2f, %.0f examples/s",
                 self.steps, self.epochs, self.target_epochs, loss, self._batch_text(),
                 self.gain, speed)

    def _report(self, kind: str, **fields: Any) -> None:
        if self.rank == 0 and self.job_dir is not None:
            protocol.append_report(self.job_dir, kind, time=time.time(), **fields)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        self._terminate = True  # taken at the next step boundary (checkpoint, then exit 0)

    # --- checkpoints ------------------------------------------------------------------------------

    @property
    def checkpoint_path(self) -> Path | None:
        if self.job_dir is None:
            return None
        return self.job_dir / protocol.CHECKPOINT_DIR / CHECKPOINT_FILE

    def _checkpoint(self) -> None:
        path = self.checkpoint_path
        if path is None or self.rank != 0:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"model": self._module.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "epoch": self.epoch, "position": self.position, "steps": self.steps,
                 "progress": self.progress, "base_lrs": self._base_lrs,
                 "gradient": (self._sqr_avg, self._var_avg, self._avg_weight),
                 "acked_request": self._acked_request,
                 "batch": (self.local_bsz, self.accum_steps)}
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with tmp.open("wb") as stream:
            torch.save(state, stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, path)
        protocol._fsync_dir(path.parent)

    def _restore(self) -> None:
        path = self.checkpoint_path
        if path is None or not path.exists():
            return
        state = torch.load(path, map_location=self.device, weights_only=True)
        self._module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self.steps, self.progress = int(state["steps"]), float(state["progress"])
        self._base_lrs = [float(v) for v in state["base_lrs"]]
        self._sqr_avg, self._var_avg, self._avg_weight = (float(v) for v in state["gradient"])
        self._acked_request = int(state["acked_request"])
        self.local_bsz, self.accum_steps = (int(v) for v in state["batch"])
        self.restored = True

    def _epoch_permutation(self) -> torch.Tensor:
        if self._permutation_epoch != self.epoch:
            generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
            self._permutation = torch.randperm(self.num_examples, generator=generator)
            self._permutation_epoch = self.epoch
        return self._permutation

    def _fetch(self, indices: torch.Tensor) -> Any:
        if isinstance(self.dataset, TensorDataset) and self.collate is default_collate:
            batch: Any = tuple(tensor[indices] for tensor in self.dataset.tensors)
            return batch if self.device.type == "cpu" else _to_device(batch, self.device)
        positions: list[int] = indices.tolist()
        getitems = getattr(self.dataset, "__getitems__", None)
        items = getitems(positions) if getitems is not None else [
            self.dataset[i] for i in positions]
        batch = self.collate(items)
        if self.device.type != "cpu":
            batch = _to_device(batch, self.device)
        return batch


def _to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, list | tuple):
        return type(batch)(_to_device(item, device) for item in batch)
    if isinstance(batch, dict):
        return {key: _to_device(value, device) for key, value in batch.items()}
    return batch
