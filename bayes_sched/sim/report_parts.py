"""What every report writer of the simulator shares: files written atomically, and line styles that
keep many series apart on one plot.

:mod:`bayes_sched.sim.report` (the run report) and :mod:`bayes_sched.sim.type_utilization` (per-GPU-
type utilisation) both write through these, so neither imports the other.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


def series_styles(count: int) -> list[dict[str, Any]]:
    """Matplotlib line styles for ``count`` series: colour, dash and marker all change, so lines
    stay distinguishable beyond the 10 colours of ``tab10``; widths shrink and draw order rises
    with the index, so a line drawn over another leaves the wider one visible at its edges."""
    from matplotlib import colormaps

    palette = colormaps["tab10"]
    dashes = ("-", "--", "-.", ":")
    markers = ("o", "s", "^", "D", "v", "x", "P", "*", "<", ">", "h")
    return [{"color": palette(i % 10), "linestyle": dashes[i % len(dashes)],
             "marker": markers[i % len(markers)], "markevery": 0.1 + 0.013 * (i % 7),
             "markersize": 3.5, "linewidth": 0.8 + 1.6 * (count - 1 - i) / max(count - 1, 1),
             "zorder": 2 + i}
            for i in range(count)]


def atomic_write(path: Path, write: Callable[[Path], object]) -> None:
    """Call ``write`` on a temporary name beside ``path``, then rename it to ``path``, so an
    interrupted writer leaves the previous file or none, never half a file."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


__all__ = ["atomic_write", "series_styles"]
