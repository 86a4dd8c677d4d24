"""The ```python snippets of README.md and docs/*.md, for the tests that run them as written.

A snippet whose first line is `# needs a GPU` runs only on a GPU machine (tests/gpu/test_docs_gpu.py runs
the self-contained ones); every other snippet must run on a machine without one (tests/test_docs.py).
"""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_MARK = "# needs a GPU"
_FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def snippets(files=None) -> list:
    """pytest.param(code, id="FILE:LINE") for every snippet, in order."""
    found = []
    for path in files or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        for m in _FENCE.finditer(text):
            found.append(pytest.param(m.group(1), id=f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"))
    return found


def run(code: str) -> dict:
    """Execute a snippet in a namespace of its own; returns that namespace."""
    namespace = {"__name__": "__snippet__"}
    exec(compile(code, "<snippet>", "exec"), namespace)
    return namespace
