"""Files that readers may open at any moment: written whole or not at all."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, or bytes) to `path` through a temporary file in the same folder and an
    atomic rename: a reader, a resumed sweep or another process sees the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
