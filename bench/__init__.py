"""Benchmarks (``make bench``): ratios measured side by side, never timed unit tests."""
