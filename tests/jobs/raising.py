"""A job script that fails at once (the service's back-off and failure path)."""

raise RuntimeError("tiny job exploded on purpose")
