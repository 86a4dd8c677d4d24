"""What a terminal shows while a sweep runs, fed by its events (see cupy_gemm.measure.sweep.measure): progress
bars with the best points so far, or the benchmark's seed-style blocks as each shape completes."""
from __future__ import annotations

from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from ..measure import results
from ..measure.space import Point
from .seed import seed_block
from .tables import top_tables


def device_line(data: dict) -> Text:
    return Text(f"GPU {data['device']} worker {data['state']}: ", style="yellow").append(str(data["message"]),
                                                                                        style="")


class SweepDisplay:
    """Progress bars and the live top-N table(s); `writer` (a results.ResultWriter) gets every record."""

    def __init__(self, console: Console, top: int, swept: list[str], writer=None):
        self.console, self.top, self.swept, self.writer = console, top, swept, writer
        self.records: list[results.Record] = []
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description:<9}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        self.compile_task = self.progress.add_task("compile", total=None)
        self.measure_task = self.progress.add_task("measure", total=None)
        self.totals = {"compiles": 0, "measurements": 0}

    def __rich__(self):
        return Group(self.progress, *top_tables(self.records, self.top, self.swept, "best so far"))

    def __call__(self, kind: str, data) -> None:
        if kind == "start":  # once per GPU model on a cluster: the totals add up
            for key in self.totals:
                self.totals[key] += data[key]
            self.progress.update(self.compile_task, total=self.totals["compiles"])
            self.progress.update(self.measure_task, total=self.totals["measurements"] or None)
            if data["resumed"]:
                self.console.print(f"resuming: {data['resumed']} measurements kept from the results file",
                                   markup=False)
        elif kind == "compiled":
            self.progress.advance(self.compile_task)
        elif kind in ("record", "baseline"):
            if kind == "record":
                self.records.append(data)
                if data.status != "invalid":
                    self.progress.advance(self.measure_task)
            if self.writer is not None:
                self.writer.add(data)
        elif kind == "device" and data["state"] != "ready":
            self.console.print(device_line(data))


class BenchPrinter:
    """Prints a shape's block, seed-style, as soon as every variant of its dtype has a record there."""

    def __init__(self, console: Console, pts: list[Point], shapes: dict):
        self.console = console
        self.progress = Progress(SpinnerColumn(), TextColumn("bench"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task = self.progress.add_task("bench", total=None)
        self.by_dtype = {d: [p for p in pts if p.dtype == d] for d in shapes}
        self.shapes = shapes
        self.records: dict[tuple, list] = {}
        self.baselines: dict[tuple, list] = {}
        self.width = max([len(p.name) for p in pts] + [20]) + 2

    def __call__(self, kind: str, data) -> None:
        if kind == "start":
            self.progress.update(self.task, total=sum(len(self.shapes[d]) * len(ps) for d, ps in self.by_dtype.items()))
        elif kind == "baseline":
            self.baselines.setdefault((data.dtype, data.shape, data.device_name), []).append(data)
        elif kind == "record":
            self.progress.advance(self.task)
            key = (data.dtype, data.shape, data.device_name)
            got = self.records.setdefault(key, [])
            got.append(data)
            if len(got) == len(self.by_dtype[data.dtype]):
                block = seed_block(data.dtype, data.shape, got, self.baselines.get(key, []),
                                   self.by_dtype[data.dtype], self.width)
                self.console.print(block, highlight=False, markup=False, soft_wrap=True)
        elif kind == "device" and data["state"] != "ready":
            self.console.print(device_line(data))
