"""Error types of bayes_sched: one-line messages naming the file, row and field at fault."""

from __future__ import annotations

from perfmodel.errors import InputError as _PerfmodelInputError


class InputError(_PerfmodelInputError):
    """Input that does not meet bayes_sched's expectations (a workload, a cluster spec, an option).

    Same message layout as perfmodel's: the file, the row (1-based, the header is row 1) and the
    column where they are known, then what was expected.
    """


class AllocationError(ValueError):
    """A policy's decision that the cluster cannot carry out (e.g. it oversubscribes a node).

    The scheduling loop rejects such a decision, logs this message and keeps the previous
    allocation.
    """
