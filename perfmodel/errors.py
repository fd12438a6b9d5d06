"""The one error type perfmodel raises for bad input: a message naming file, row and field."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Input that does not meet perfmodel's expectations.

    The message names the file, the row (1-based, counting the header as row 1) and the column where
    they are known, and says what was expected.
    """

    def __init__(
        self,
        message: str,
        path: str | Path | None = None,
        row: int | None = None,
        column: str | None = None,
    ) -> None:
        where = []
        if path is not None:
            where.append(str(path))
        if row is not None:
            where.append(f"row {row}")
        if column is not None:
            where.append(f"column '{column}'")
        self.path, self.row, self.column = path, row, column
        super().__init__(one_line(f"{', '.join(where)}: {message}" if where else message))


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters escaped (``\\n``), so that a message
    quoting a cell, a column name or a file name stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
