"""Recorded demonstrations and rollouts: the in-memory episode and its on-disk store."""
