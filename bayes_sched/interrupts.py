"""Ctrl-C that always stops the command line, wherever it lands.

Python raises ``KeyboardInterrupt`` wherever the main thread is when it handles the signal.
Raised in a weak-reference callback or a finaliser (``__del__``), it is "unraisable": Python
prints it as ``Exception ignored in`` with a traceback, drops it, and the command runs on to its
end (and exits 0). :func:`keep_interrupts` delivers such an interrupt again, so that it is
raised at the main thread's next step, where the command line's own handling (exit 130, no
traceback) takes it. Standard library only: ``python -m bayes_sched`` uses it while importing.
"""

from __future__ import annotations

import _thread
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: Seconds before an unraisable Ctrl-C is delivered again: long enough for the main thread to
#: leave the callback it landed in (a new one it lands in is delivered again in turn).
REDELIVERY_DELAY_S = 0.05


@contextmanager
def keep_interrupts() -> Iterator[None]:
    """Within the block, an unraisable ``KeyboardInterrupt`` is raised again in the main thread
    (:func:`_thread.interrupt_main`, :data:`REDELIVERY_DELAY_S` later) and not printed; other
    unraisable exceptions go to the hook that was in place (``sys.unraisablehook``), which is
    restored on leaving."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            # From another thread, a moment later: the main thread handles a pending signal at
            # its next step, which, set from here, would be in this hook (unraisable again).
            threading.Timer(REDELIVERY_DELAY_S, _thread.interrupt_main).start()
        else:
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
