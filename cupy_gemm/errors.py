"""Every exception cupy-gemm raises on purpose, each subclassing the built-in that fits.

Messages name the argument, what it got, what was expected and the way out.
"""
from __future__ import annotations

import difflib


class CupyGemmError(Exception):
    """Base class of every cupy-gemm error."""

    def __reduce__(self):
        # pickled with its message and attributes, not re-run through __init__ (whose arguments the
        # subclasses change): errors cross process pools and Dask workers intact
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls, args, state):
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigError(CupyGemmError, ValueError):
    """A template parameter (or a catalogue entry) breaks a constraint of its family."""

    def __init__(self, param: str, value, expected: str, *, where: str = ""):
        self.param, self.value, self.expected = param, value, expected
        prefix = f"{where}: " if where else ""
        super().__init__(f"{prefix}parameter {param}={value!r} is invalid: {expected}")


class CatalogueError(CupyGemmError, ValueError):
    """A file in kernels/ is malformed."""


class UnknownVariantError(CupyGemmError, KeyError):
    """No variant (or family) of that name."""

    def __init__(self, name: str, known, *, kind: str = "variant"):
        self.name = name
        close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
        if not close:  # long seed names: match on the parts people remember
            close = [k for k in known if name and name in k][:3]
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        self.message = f"unknown {kind} {name!r}{hint} (`cupy-gemm list` shows them all)"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class InputError(CupyGemmError, ValueError):
    """Operands that cannot be multiplied as given: shapes, out, c, sizes."""


class DTypeError(CupyGemmError, TypeError):
    """Operand dtypes that the chosen variant does not take, or non-CuPy operands."""


class DeviceError(CupyGemmError, RuntimeError):
    """No CUDA GPU where one is needed, operands on different devices, or a variant that needs a newer GPU."""


class CompilerNotFoundError(CupyGemmError, RuntimeError):
    """NVRTC or a header set matching it could not be found."""


class CompileError(CupyGemmError, RuntimeError):
    """NVRTC rejected a rendered kernel."""


class ModuleLoadError(CompileError):
    """The driver refused a compiled image, and refused it again after it was evicted and recompiled."""


class UsageError(CupyGemmError, ValueError):
    """A command-line value or environment variable that cannot be used as given."""
