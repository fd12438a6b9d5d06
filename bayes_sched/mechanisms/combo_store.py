"""The round mechanism's state per combination (a job alone, or a pair sharing GPUs), as rows of
arrays: time received and deficit per GPU type since the last reset, and the allocation in force
(:class:`~bayes_sched.mechanisms.rounds.Rounds` reads and updates it each round)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: A unit the mechanism schedules: one job, or two jobs sharing their GPUs (submission order).
Combo = tuple[str, ...]


class ComboStore:
    """The mechanism's state per combination (a job alone, or a pair), as rows of arrays so a
    round reads it for thousands of combinations at once (a packed run carries ~10^4 pairs in
    force; per-combination dicts of arrays cost O(pairs) Python work every round).

    Attributes:
        index: combination -> its row (rows of removed combinations are reused).
        time: ``(rows, T)`` seconds the combination ran on each type since the last reset
            (from half a round of credit).
        deficit: ``(rows, T)`` seconds owed minus received over earlier resets.
        fraction: ``(rows, T)`` the allocation in force (0 where it has none).
        allocated: ``(rows,)`` whether the combination is in the allocation in force.
    """

    def __init__(self, num_types: int) -> None:
        self.num_types = num_types
        self.index: dict[Combo, int] = {}
        self._members: dict[str, set[Combo]] = {}  # job name -> its combinations here
        self._free: list[int] = []
        self.time = np.zeros((0, num_types))
        self.deficit = np.zeros((0, num_types))
        self.fraction = np.zeros((0, num_types))
        self.allocated = np.zeros(0, dtype=bool)

    def __contains__(self, combo: object) -> bool:
        return combo in self.index

    def __len__(self) -> int:
        return len(self.index)

    def add(self, combo: Combo, half_round: float) -> int:
        """Admit ``combo`` with ``half_round`` seconds of credit on each type, no deficit and
        no allocation; its row."""
        return int(self.add_many([combo], half_round)[0])

    def add_many(self, combos: Sequence[Combo], half_round: float) -> np.ndarray:
        """Admit each of ``combos`` (none admitted yet, no repeats) as :meth:`add` does, in
        order, on the rows :meth:`add` one by one would give; their rows ``(len(combos),)``."""
        count = len(combos)
        if count > len(self._free):
            size = len(self.allocated)
            grown = max(2 * size, size + count - len(self._free), 64)
            extra = np.zeros((grown - size, self.num_types))
            self.time = np.concatenate([self.time, extra])
            self.deficit = np.concatenate([self.deficit, extra])
            self.fraction = np.concatenate([self.fraction, extra])
            self.allocated = np.concatenate([self.allocated, np.zeros(grown - size, bool)])
            # The new rows below the free ones: they are taken after them, lowest first.
            self._free = list(range(grown - 1, size - 1, -1)) + self._free
        taken = self._free[len(self._free) - count:][::-1]  # the rows pop() would give
        del self._free[len(self._free) - count:]
        rows = np.array(taken, dtype=np.int64)
        self.time[rows] = half_round
        self.deficit[rows] = 0.0
        self.fraction[rows] = 0.0
        self.allocated[rows] = False
        self.index.update(zip(combos, taken, strict=True))
        members = self._members
        for combo in combos:
            for name in combo:
                members.setdefault(name, set()).add(combo)
        return rows

    def remove_jobs(self, names: set[str]) -> list[Combo]:
        """Drop every combination with a member in ``names``; the combinations dropped."""
        gone: set[Combo] = set()
        for name in names:
            gone |= self._members.pop(name, set())
        for combo in gone:
            self._free.append(self.index.pop(combo))
            for name in combo:
                members = self._members.get(name)
                if members is not None:
                    members.discard(combo)
        return list(gone)

    def names(self) -> set[str]:
        """The jobs with a combination here."""
        return set(self._members)

    def rows(self, combos: Sequence[Combo]) -> np.ndarray:
        """The rows of ``combos`` ``(C,)``."""
        index = self.index
        return np.fromiter((index[c] for c in combos), dtype=np.int64, count=len(combos))

    def live_rows(self) -> np.ndarray:
        """Every admitted combination's row, ``(len(self),)``."""
        return np.fromiter(self.index.values(), dtype=np.int64, count=len(self.index))

    def in_force(self, combo: Combo) -> bool:
        """Whether ``combo`` is admitted and in the allocation in force."""
        row = self.index.get(combo)
        return row is not None and bool(self.allocated[row])

    def allocation(self) -> dict[Combo, np.ndarray]:
        """The allocation in force: each combination in it and its fractions ``(T,)``."""
        allocated, fraction = self.allocated, self.fraction
        return {combo: fraction[row] for combo, row in self.index.items() if allocated[row]}

    def set_allocation(self, combos: Sequence[Combo], fractions: np.ndarray) -> None:
        """Make ``fractions`` ``(len(combos), T)`` of ``combos`` (each admitted) the allocation
        in force: every other combination's fraction is 0."""
        self.fraction[:] = 0.0
        self.allocated[:] = False
        rows = self.rows(combos)
        self.fraction[rows] = fractions
        self.allocated[rows] = True


__all__ = ["Combo", "ComboStore"]
