"""What every report writer of the simulator shares: files written atomically, line styles that
keep many series apart on one plot, and a document's sections written as Markdown and as HTML.

:mod:`bayes_sched.sim.report` (the run report) and :mod:`bayes_sched.sim.type_utilization` (per-GPU-
type utilisation) both write through these, so neither imports the other.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfmodel.markdown import markdown_cell, markdown_table

if TYPE_CHECKING:
    from types import ModuleType

#: A section: ``("h1" | "h2" | "p", text)``, ``("list", [items])``,
#: ``("table", (rows, columns))`` or ``("image", (file, alt))``.
Section = tuple[str, Any]


def pyplot() -> ModuleType:
    """``matplotlib.pyplot`` on the non-interactive Agg backend (files only, no display).

    Imported here, when a plot is drawn, not when a report module is: matplotlib costs most of a
    second of start-up, which a run that writes no plot (``simulate --json``) should not pay."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


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


def markdown_document(sections: Sequence[Section]) -> str:
    """``sections`` as one Markdown document."""
    parts = []
    for kind, body in sections:
        if kind == "h1":
            parts.append(f"# {body}")
        elif kind == "h2":
            parts.append(f"## {body}")
        elif kind == "p":
            parts.append(body)
        elif kind == "list":
            parts.append("\n".join(f"- **{item}**" for item in body))
        elif kind == "image":
            parts.append(f"![{body[1]}]({body[0]})")
        else:
            rows, columns = body
            parts.append(markdown_table(rows, columns))
    return "\n\n".join(parts) + "\n"


def html_document(sections: Sequence[Section], title: str = "Simulation report") -> str:
    """Plain HTML of the same sections (no scripts, no external files but the PNGs beside it)."""
    e = html.escape
    parts = []
    for kind, body in sections:
        if kind in ("h1", "h2"):
            parts.append(f"<{kind}>{e(body)}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{e(body)}</p>")
        elif kind == "list":
            parts.append("<ul>" + "".join(f"<li><strong>{e(i)}</strong></li>" for i in body)
                         + "</ul>")
        elif kind == "image":
            parts.append(f'<p><img src="{e(body[0])}" alt="{e(body[1])}"></p>')
        else:
            rows, columns = body
            head = "".join(f"<th>{e(c)}</th>" for c in columns)
            cells = ["<tr>" + "".join(f"<td>{e(markdown_cell(row[c]))}</td>" for c in columns) + "</tr>"
                     for row in rows]
            parts.append(f"<table>\n<tr>{head}</tr>\n" + "\n".join(cells) + "\n</table>")
    style = ("body{font-family:sans-serif;max-width:75em;margin:auto}"
             "table{border-collapse:collapse;font-size:85%}"
             "td,th{border:1px solid #bbb;padding:2px 6px;text-align:right}")
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head><meta charset=\"utf-8\">"
            f"<title>{e(title)}</title><style>{style}</style></head>\n<body>\n"
            + "\n".join(parts) + "\n</body>\n</html>\n")


__all__ = ["Section", "atomic_write", "html_document", "markdown_document", "series_styles"]
