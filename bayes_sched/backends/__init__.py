"""Real-cluster backends for the scheduling loop: one machine (subprocesses) and Ray; they differ
only in their :class:`~bayes_sched.backends.launcher.Launcher`."""
