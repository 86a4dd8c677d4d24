"""Execute a Jupyter notebook's code cells without Jupyter and write their outputs back into it.

    python examples/run_notebook.py examples/tile_explorer.ipynb              # in place
    python examples/run_notebook.py NOTEBOOK.ipynb --out executed.ipynb

For machines with Python and matplotlib but no Jupyter kernel. The code cells run top to bottom in one
namespace, in the notebook's folder (as Jupyter runs them). Each cell gets, in order: its stdout and
stderr as stream outputs; what it passes to `display(obj)` and every matplotlib figure it leaves open or
shows (Agg backend, PNG) as display data; the value of a trailing expression as its result (text/plain,
and text/html for objects with _repr_html_; a trailing `;` suppresses it, as in IPython). A cell that
raises gets an error output with its traceback, the later cells are cleared, the notebook is written and
the exit status is 1. The file written is nbformat 4.5 JSON, as Jupyter writes it, made with the standard
library alone; matplotlib, when installed, draws the figures.
"""
from __future__ import annotations

import argparse
import ast
import base64
import importlib.util
import io
import json
import linecache
import os
import sys
import traceback
import uuid
from pathlib import Path

NBFORMAT_MINOR = 5  # 4.5: cells carry an "id"


def _lines(text: str) -> list[str]:
    """Multi-line strings as nbformat stores them: a list of lines, each but the last ending in '\\n'."""
    return text.splitlines(keepends=True)


def _text(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value or "")


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr for a cell: appends to the cell's outputs, merging consecutive writes to the
    same stream into one output as Jupyter does."""

    def __init__(self, cell: "_CellRun", name: str):
        self.cell, self.name = cell, name

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text:
            self.cell.stream(self.name, text)
        return len(text)

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return "utf-8"


class _CellRun:
    def __init__(self, count: int):
        self.count = count
        self.outputs: list[dict] = []

    def stream(self, name: str, text: str) -> None:
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == name:
            last["text"] += text
        else:
            self.outputs.append({"output_type": "stream", "name": name, "text": text})

    def display(self, data: dict, metadata: dict | None = None) -> None:
        self.outputs.append({"output_type": "display_data", "data": data, "metadata": metadata or {}})

    def result(self, data: dict) -> None:
        self.outputs.append({"output_type": "execute_result", "execution_count": self.count, "data": data,
                             "metadata": {}})

    def error(self, exc: BaseException, tb_lines: list[str]) -> None:
        self.outputs.append({"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc),
                             "traceback": tb_lines})

    def finished(self) -> list[dict]:
        for out in self.outputs:  # nbformat stores multi-line text as lists of lines
            if out["output_type"] == "stream":
                out["text"] = _lines(out["text"])
            for mime, value in out.get("data", {}).items():
                if mime.startswith("text/") and isinstance(value, str):
                    out["data"][mime] = _lines(value)
        return self.outputs


def mime_bundle(obj) -> dict:
    """text/plain always; text/html, text/markdown, image/png, image/svg+xml where the object has the
    matching IPython _repr_*_ method."""
    data = {"text/plain": repr(obj)}
    for mime, method in (("text/html", "_repr_html_"), ("text/markdown", "_repr_markdown_"),
                         ("image/png", "_repr_png_"), ("image/svg+xml", "_repr_svg_")):
        fn = getattr(obj, method, None)
        if callable(fn) and not isinstance(obj, type):
            value = fn()
            if value is None:
                continue
            if isinstance(value, bytes):
                value = base64.b64encode(value).decode("ascii")
            data[mime] = value
    return data


class _Figures:
    """Collects matplotlib figures, as IPython's inline backend does: those open at the end of a cell,
    or at a plt.show() inside it, become PNG display data and are closed. Without matplotlib: nothing."""

    def __init__(self):
        self.cell: _CellRun | None = None
        self.plt = None
        if importlib.util.find_spec("matplotlib") is None:
            return
        os.environ["MPLBACKEND"] = "Agg"  # before pyplot is first imported, by us or by a cell
        import matplotlib
        matplotlib.use("Agg", force=True)
        import matplotlib.pyplot as plt
        plt.switch_backend("Agg")  # resolved now, not lazily at the first figure of some cell
        self.plt, self._pyplot_show = plt, plt.show

        def show(*args, **kwargs):  # a plain function: pyplot sets attributes on its own
            self.flush()
        plt.show = show

    def close(self) -> None:
        if self.plt is not None:
            self.plt.close("all")
            self.plt.show = self._pyplot_show

    def is_figure(self, obj) -> bool:
        return self.plt is not None and isinstance(obj, self.plt.Figure)

    def show(self, fig) -> None:
        buf = io.BytesIO()
        # "tight", as the inline backend saves, so labels and legends outside the axes are kept
        fig.savefig(buf, format="png", bbox_inches="tight")
        width, height = fig.get_size_inches() * fig.dpi
        self.cell.display({"image/png": base64.b64encode(buf.getvalue()).decode("ascii"),
                           "text/plain": f"<Figure size {width:g}x{height:g} with {len(fig.axes)} Axes>"})
        self.plt.close(fig)

    def flush(self) -> None:
        if self.plt is None or self.cell is None:
            return
        for num in self.plt.get_fignums():
            self.show(self.plt.figure(num))


def _cell_code(source: str, count: int):
    """(body, trailing expression or None) compiled under a file name that tracebacks can show."""
    filename = f"<cell {count}>"
    linecache.cache[filename] = (len(source), None, _lines(source + "\n"), filename)
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as e:
        line = (e.text or "").lstrip()
        if line.startswith(("%", "!")):  # IPython magics and shell escapes
            raise SyntaxError(f"{line.strip()!r} is IPython syntax, which only Jupyter runs: write it in "
                              f"Python", (filename, e.lineno, e.offset, e.text)) from None
        raise
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not source.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec")
    return body, (compile(last, filename, "eval") if last is not None else None)


def execute(nb: dict, cwd: Path) -> tuple[bool, str]:
    """Run the code cells of a notebook dict in place. Returns (every cell succeeded, traceback text)."""
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    old_cwd, old_path, old_backend = os.getcwd(), list(sys.path), os.environ.get("MPLBACKEND")
    figures = _Figures()

    def display(*objs, **_):
        for obj in objs:
            if figures.is_figure(obj):
                figures.show(obj)
            else:
                figures.cell.display(mime_bundle(obj))
    namespace["display"] = display

    old_out, old_err = sys.stdout, sys.stderr
    os.chdir(cwd)
    sys.path.insert(0, str(cwd))  # `import helpers` beside the notebook, as in Jupyter
    count = 0
    ok, failure = True, ""
    try:
        cells = [c for c in nb["cells"] if c.get("cell_type") == "code"]
        for i, cell in enumerate(cells):
            count += 1
            run = _CellRun(count)
            figures.cell = run
            sys.stdout, sys.stderr = _Stream(run, "stdout"), _Stream(run, "stderr")
            try:
                source = _text(cell.get("source"))
                body, last = _cell_code(source, count)
                exec(body, namespace)
                value = eval(last, namespace) if last is not None else None
                if figures.is_figure(value) and value.number not in figures.plt.get_fignums():
                    figures.show(value)  # a closed figure as the trailing expression: show it once
                    value = None
                figures.flush()  # an open one is among these, shown once as the inline backend does
                if value is not None and not figures.is_figure(value):
                    namespace["_"] = value
                    run.result(mime_bundle(value))
            except BaseException as e:  # KeyboardInterrupt and SystemExit too: the cell failed
                try:
                    figures.flush()  # what the cell drew before it failed
                except Exception:
                    pass
                frames = traceback.extract_tb(e.__traceback__)
                # from the cell's own frame on: the runner's frames are noise (none for a SyntaxError)
                first = next((k for k, f in enumerate(frames) if f.filename.startswith("<cell ")), len(frames))
                tb = traceback.format_list(frames[first:])
                lines = (["Traceback (most recent call last):\n"] + tb if tb else []) \
                    + traceback.format_exception_only(type(e), e)
                run.error(e, "".join(lines).rstrip("\n").split("\n"))
                ok, failure = False, "".join(lines)
            finally:
                sys.stdout, sys.stderr = old_out, old_err
                cell["outputs"] = run.finished()
                cell["execution_count"] = count
            if not ok:
                for later in cells[i + 1:]:  # not run: no stale outputs from an earlier run
                    later["outputs"], later["execution_count"] = [], None
                break
    finally:
        sys.stdout, sys.stderr = old_out, old_err
        os.chdir(old_cwd)
        sys.path[:] = old_path
        figures.close()
        if old_backend is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = old_backend
    return ok, failure


def normalise(nb: dict) -> dict:
    """nbformat 4.5 essentials: version fields, cell ids, sources as line lists, metadata dicts."""
    nb["nbformat"], nb["nbformat_minor"] = 4, max(NBFORMAT_MINOR, int(nb.get("nbformat_minor", 0)))
    nb.setdefault("metadata", {})
    seen = set()
    for cell in nb.get("cells", []):
        cid = cell.get("id")
        if not cid or cid in seen:
            cell["id"] = cid = uuid.uuid4().hex[:8]
        seen.add(cid)
        cell.setdefault("metadata", {})
        cell["source"] = _lines(_text(cell.get("source")))
        if cell.get("cell_type") == "code":
            cell.setdefault("outputs", [])
            cell.setdefault("execution_count", None)
    return nb


def read(path: Path) -> dict:
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    if nb.get("nbformat") != 4:
        raise ValueError(f"{path}: nbformat {nb.get('nbformat')!r}; this runner reads version 4 notebooks")
    return nb


def write(nb: dict, path: Path) -> None:
    """As nbformat writes: indent 1, sorted keys, UTF-8, a final newline; replaced atomically."""
    path = Path(path)
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--out", type=Path, help="write the executed notebook here (default: in place)")
    args = parser.parse_args(argv)
    nb = normalise(read(args.notebook))
    ok, failure = execute(nb, args.notebook.resolve().parent)
    out = args.out or args.notebook
    write(nb, out)
    if not ok:
        print(failure, file=sys.stderr, end="")
        print(f"{args.notebook}: a cell raised; executed notebook (with the error) written to {out}",
              file=sys.stderr)
        return 1
    print(f"executed {args.notebook} -> {out}")
    return 0


if __name__ == "__main__":  # the guard also keeps multiprocessing's spawned workers from running it again
    sys.exit(main())
