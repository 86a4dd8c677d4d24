"""Every example script imports against the package as it is (their names move with the layers), without
running: the scripts keep their work under `if __name__ == "__main__"`."""
import importlib.util
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_imports(path):
    spec = importlib.util.spec_from_file_location(f"example_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    try:
        spec.loader.exec_module(module)
    except ModuleNotFoundError as e:
        if e.name == "torch":  # the PyTorch comparisons need PyTorch, which the package does not
            pytest.skip("needs PyTorch")
        raise
    finally:
        sys.modules.pop(spec.name, None)
