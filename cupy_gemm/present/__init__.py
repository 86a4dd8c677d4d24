"""The presentation layer: rich tables, the seed-style benchmark text, matplotlib figures and the notebook's
views, over records of cupy_gemm.measure. Shared by the CLI, bench.py and the notebook; it never measures
and never parses arguments."""
