"""The one error type :mod:`counters` raises for bad input: one line naming store and variable."""

from __future__ import annotations


class CountersError(ValueError):
    """A counters dataset or store that does not meet the schema, or a bad request about one.

    The message is one line that names the store or variable at fault and says what was expected;
    command-line front ends print it as it is, without a traceback.
    """
