"""perfmodel's error types and its warning category.

:class:`InputError`: bad input, with a message naming file, row and field. :class:`FitError`: an
iterative fit that diverged or did not converge. :class:`UnreliableFitWarning`: a fit whose
results are usable but whose intervals are not to be trusted. Each message is one line.
"""

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


class FitError(ValueError):
    """An iterative fit that must not be used: its loss or parameters went non-finite, or (where
    the caller asks for convergence) it did not converge. The one-line message names the fit,
    the step and what to try (:mod:`perfmodel.convergence`)."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


class UnreliableFitWarning(UserWarning):
    """A fit whose intervals may be wrong (a poor importance proposal, a chain that did not mix,
    an optimisation that did not converge). Issued by the library where it finds it; the message
    is one line naming the model and what to try."""


def one_line(text: str) -> str:
    """``text`` with newlines and other control characters escaped (``\\n``), so that a message
    quoting a cell, a column name or a file name stays one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
