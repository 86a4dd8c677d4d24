"""The measurement layer: timing, baselines, search spaces, runners (local and Dask), results and tuning.

It imports the core (registry, render, compile, launch, api) and nothing above it; cupy_gemm.present and
the CLI build on it. See docs/ARCHITECTURE.md for one line per module.
"""
