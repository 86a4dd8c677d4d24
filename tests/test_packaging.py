"""pyproject.toml ships every file the package reads at run time, with the metadata an index needs."""
import re
from fnmatch import fnmatch
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

import cupy_gemm

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]


def test_every_template_and_catalogue_file_is_in_the_wheel():
    """An installed wheel renders from its own templates/ (shared headers in common/ included) and kernels/."""
    for package, folder in SETUPTOOLS["package-dir"].items():
        for path in sorted((ROOT / folder).rglob("*")):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            subpackage = ".".join([package, *path.parent.relative_to(ROOT / folder).parts])
            assert subpackage in SETUPTOOLS["packages"], f"{path.relative_to(ROOT)}: {subpackage} is not packaged"
            patterns = SETUPTOOLS["package-data"].get(subpackage, [])
            assert any(fnmatch(path.name, p) for p in patterns), f"{path.relative_to(ROOT)} is not package data"


def test_license_and_version():
    project = PYPROJECT["project"]
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    # one version, in the package: the wheel's metadata and `cupy-gemm --version` both read it
    assert "version" in project["dynamic"] and "version" not in project
    assert SETUPTOOLS["dynamic"]["version"] == {"attr": "cupy_gemm.version.__version__"}  # static: no import at build time
    assert re.fullmatch(r"\d+\.\d+\.\d+", cupy_gemm.__version__)


def test_test_extra_brings_what_the_cpu_tests_use():
    assert any(req.startswith("matplotlib") for req in PYPROJECT["project"]["optional-dependencies"]["test"])
