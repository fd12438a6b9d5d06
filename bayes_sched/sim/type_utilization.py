"""Per-GPU-type utilisation over time, in every world: the series, its summary means, and a plot.

A run's series is the fraction of each GPU type's GPUs held in every round, shape ``(rounds,
types)``, with the rounds its summary averages over (``counted``): the rounds with submitted,
unfinished jobs (:func:`~bayes_sched.sim.metrics.utilization_summary`).
:func:`write_type_utilization` writes the plot (PNG) and the plotted numbers (CSV) side by side,
so a reader can check one against the other and against the summary's ``utilization_<type>``.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from bayes_sched.sim.result import RunResult


@dataclass(frozen=True)
class TypeUtilization:
    """Fraction of each GPU type's GPUs held per round.

    Attributes:
        time_s: end of each round, seconds, ``(R,)``.
        gpu_types: the types, ``(T,)``.
        fraction: GPUs held over the type's GPUs, ``(R, T)``.
        counted: the rounds the run's summary averages over, ``(R,)`` bool.
    """

    time_s: np.ndarray
    gpu_types: tuple[str, ...]
    fraction: np.ndarray
    counted: np.ndarray

    def means(self) -> dict[str, float]:
        """``utilization_<type>``: the mean over the counted rounds (0 with none), as the run's
        summary states it."""
        out = {}
        for i, gpu in enumerate(self.gpu_types):
            values = self.fraction[self.counted, i]
            out[f"utilization_{gpu}"] = float(values.mean()) if values.size else 0.0
        return out


def utilization_series(result: RunResult) -> TypeUtilization:
    """The series of a run, in any world (its timeline's ``type_utilization``; counted: the
    rounds with submitted, unfinished jobs)."""
    timeline = result.timeline
    return TypeUtilization(
        time_s=np.asarray(timeline["time"].values, dtype=float),
        gpu_types=tuple(str(t) for t in timeline["gpu_type"].values),
        fraction=np.asarray(timeline["type_utilization"].values, dtype=float),
        counted=np.asarray(timeline["active_jobs"].values) > 0)


def series_csv(series: TypeUtilization) -> str:
    """The plotted numbers: ``time_s, counted`` and one column per type, one row per round."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["time_s", "counted", *series.gpu_types])
    for r in range(len(series.time_s)):
        writer.writerow([repr(float(series.time_s[r])), int(series.counted[r]),
                         *(repr(float(v)) for v in series.fraction[r])])
    return buffer.getvalue()


def read_series_csv(path: str | Path) -> TypeUtilization:
    """A series back from :func:`series_csv`'s file."""
    with open(path, newline="") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], rows[1:]
    data = np.array([[float(c) for c in row] for row in body], dtype=float).reshape(
        len(body), len(header))
    return TypeUtilization(time_s=data[:, 0], gpu_types=tuple(header[2:]),
                           fraction=data[:, 2:], counted=data[:, 1] > 0)


def write_type_utilization(series: TypeUtilization, out_dir: str | Path, stem: str,
                           title: str = "") -> tuple[Path, Path]:
    """Write ``<stem>.png`` (one line per GPU type over time, hours) and ``<stem>.csv``
    (:func:`series_csv`) into ``out_dir`` (created), each atomically; returns both paths."""
    from bayes_sched.sim.report_parts import atomic_write, pyplot, series_styles

    plt = pyplot()

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, png_path = out / f"{stem}.csv", out / f"{stem}.png"
    atomic_write(csv_path, lambda p: p.write_text(series_csv(series)))

    def plot(path: Path) -> None:
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
        hours = series.time_s / 3600.0
        styles = series_styles(len(series.gpu_types))
        for i, gpu in enumerate(series.gpu_types):
            mean = series.means()[f"utilization_{gpu}"]
            ax.step(hours, series.fraction[:, i], where="post", label=f"{gpu} (mean {mean:.2f})",
                    **styles[i])
        ax.set_xlabel("time (h)")
        ax.set_ylabel("GPUs held (fraction of type)")
        ax.set_ylim(0, 1.05)
        if title:
            ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(path, format="png", dpi=110)
        plt.close(fig)

    atomic_write(png_path, plot)
    return png_path, csv_path


__all__ = ["TypeUtilization", "read_series_csv", "series_csv", "utilization_series",
           "write_type_utilization"]
