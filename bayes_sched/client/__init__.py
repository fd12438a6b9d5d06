"""What a PyTorch training script imports to run under bayes-sched (see :mod:`.protocol` for the
job directory it shares with the scheduler's backend)."""
