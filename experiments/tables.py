"""Printing a benchmark's tables: rows of dicts as right-aligned text columns, or one JSON line
per table (``--json``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any


def format_cell(value: Any) -> str:
    """A cell as printed: floats to four significant digits, anything else as ``str``."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def print_rows(title: str, rows: Sequence[dict[str, Any]], as_json: bool) -> None:
    """Print ``rows`` (dicts with the same keys, in column order) under ``title``: one JSON object
    ``{"table": title, "rows": rows}`` where ``as_json``, else a text table whose columns are as
    wide as their widest cell or header (at least 10 characters)."""
    if as_json:
        print(json.dumps({"table": title, "rows": list(rows)}, default=float))
        return
    print(f"\n{title}")
    if not rows:
        return
    columns = list(rows[0])
    cells = [[format_cell(row.get(c, "")) for c in columns] for row in rows]
    widths = [max(10, len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for line in cells:
        print("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True)))
