"""The package's shape: no import cycle, no module importing a layer above its own, no oversized module.

Layers, bottom to top: the core (every module directly in cupy_gemm/ but the CLI's, and families/) <
measure/ < present/ < the CLI (cli.py, cli_*.py). Every import counts, function-level ones included. The
package facade (cupy_gemm/__init__.py) re-exports from the layers and is imported by none of them.
"""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "cupy_gemm"
LAYERS = ("core", "measure", "present", "cli")
MAX_LINES = 350


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) > 1 and parts[1] in ("measure", "present"):
        return parts[1]
    if len(parts) == 2 and (parts[1] == "cli" or parts[1].startswith("cli_")):
        return "cli"
    return "core"


def imports(module: str) -> set[str]:
    """The package's modules that `module` imports, anywhere in its body."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from pkg import name`: the submodule pkg.name when there is one, else pkg itself
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


GRAPH = {m: imports(m) for m in MODULES}


def test_no_module_imports_the_package_facade():
    offenders = [m for m, deps in GRAPH.items() if "cupy_gemm" in deps]
    assert not offenders, f"import from the defining module instead of the cupy_gemm facade: {offenders}"


def test_no_import_cycle():
    graph = {m: deps - {"cupy_gemm"} for m, deps in GRAPH.items() if m != "cupy_gemm"}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m, path):
        state[m] = 1
        for dep in sorted(graph.get(m, ())):
            if state.get(dep) == 1:
                cycle = path[path.index(dep):] + [dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                visit(dep, path + [dep])
        state[m] = 2
    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_layers_import_only_downward():
    upward = [f"{m} ({layer(m)}) imports {d} ({layer(d)})" for m, deps in sorted(GRAPH.items()) if m != "cupy_gemm"
              for d in sorted(deps) if d != "cupy_gemm" and LAYERS.index(layer(d)) > LAYERS.index(layer(m))]
    assert not upward, "\n".join(upward)


def test_the_checker_sees_function_level_and_relative_imports():
    assert "cupy_gemm.tuning" in GRAPH["cupy_gemm.api"]
    assert "cupy_gemm.measure.tasks" in GRAPH["cupy_gemm.measure.pool"]  # imported inside the worker function
    assert layer("cupy_gemm.measure.sweep") == "measure" and layer("cupy_gemm.cli_output") == "cli"
    assert layer("cupy_gemm.families.mma") == "core" and layer("cupy_gemm.present.tables") == "present"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_modules_stay_small(module):
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{MODULES[module]} has {lines} lines: split it by job (at most {MAX_LINES})"
