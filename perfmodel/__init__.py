"""Uncertainty-aware performance models of deep-learning training jobs.

Throughput (Pollux's step-time model, point and Bayesian fits), statistical efficiency from the
gradient noise scale, goodput and batch-size tuning, and fit reports. Depends on nothing else in
bayes-sched.
"""
