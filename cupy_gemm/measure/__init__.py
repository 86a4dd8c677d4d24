"""Measurement: the shape corpus and the benchmark that times the default path against cuBLAS and PyTorch."""
