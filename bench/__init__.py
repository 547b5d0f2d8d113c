"""Benchmarks and accuracy reports for kvcap (``make bench``, ``make accuracy``)."""
