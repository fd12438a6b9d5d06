"""Error types of bayes_sched: one-line messages naming the file, row and field at fault."""

from __future__ import annotations

from pathlib import Path


class InputError(ValueError):
    """Input that does not meet bayes_sched's expectations (a workload, a cluster spec, an option).

    The message names the file, the row (1-based, the header is row 1) and the column where they are
    known, and says what was expected.
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
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class AllocationError(ValueError):
    """A policy's decision that the cluster cannot carry out (e.g. it oversubscribes a node).

    The scheduling loop rejects such a decision, logs this message and keeps the previous
    allocation.
    """
