"""The scheduling round's timing defaults, one per concept for every command and world.

``serve`` restarts real jobs and the simulator models those restarts, so both read these: a
simulated run and a served one charge a restart the same time and decide at the same pace unless
told otherwise (``--restart-delay``, ``--interval``). Only the standard library here: ``serve
--help`` and ``simulate --help`` read them without loading numpy.
"""

from __future__ import annotations

#: Seconds a job loses to checkpoint and restart where nothing else is known (the Pollux
#: artifact's figure; the simulator's fidelity is measured with it).
DEFAULT_RESTART_DELAY = 30.0

#: Seconds per scheduling round (the Pollux artifact's).
DEFAULT_ROUND_INTERVAL = 60.0
