"""What every `cupy-gemm` command shares: how it reports an error, one line on stderr, `error: …`, as plain
text (never rich markup, so brackets in names and install hints survive), and an exit code: 2 for usage and
input errors, 1 for failures of the work; and the other spellings of the dtypes it takes."""
from __future__ import annotations

import sys

USAGE = 2  # the command line or an input file is wrong
FAILED = 1  # the work could not be done (no GPU, a scheduler out of reach, …)
# the names people also call the dtypes; the catalogue's own names are numpy's
DTYPE_ALIASES = {"fp32": "float32", "float": "float32", "fp16": "float16", "half": "float16", "bf16": "bfloat16"}


def dtype_name(text: str) -> str:
    """A --dtype as the catalogue names it: an alias's dtype, else the text in lower case."""
    return DTYPE_ALIASES.get(text.lower(), text.lower())


def fail(message: str, code: int) -> int:
    """Print `error: {message}` to stderr and return `code` (the command's exit status)."""
    print(f"error: {message}", file=sys.stderr)
    return code
