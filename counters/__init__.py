"""Counter definitions, the counters dataset schema, rates, alignment and storage.

Depends on nothing else in bayes-sched.
"""
