"""Benchmarks: ``dflow bench``."""
