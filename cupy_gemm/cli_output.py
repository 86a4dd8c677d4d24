"""How the command line reports what went wrong: one plain-text line on stderr and an exit code."""
from __future__ import annotations

import sys


def fail(message: str, code: int) -> int:
    """Print `error: {message}` to stderr as plain text (never rich markup, so brackets and quotes in
    names, paths and install hints survive) and return `code`: 2 for usage and input errors, 1 for
    failures of the work."""
    print(f"error: {message}", file=sys.stderr)
    return code
