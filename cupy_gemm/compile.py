"""Rendered source → NVRTC → cubin, with no GPU needed, cached in memory and on disk (cache.py).

CuPy's low-level NVRTC binding compiles without touching a device, so the same path serves the CPU
compile check (`cupy-gemm compile`, CI) and the GPU: launch.py loads the cubin this module produces.
ptxas's verbose report gives registers, shared and local bytes without a GPU as well.
"""
from __future__ import annotations

import hashlib
import re
import struct
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import cache, config, cubin, registry, toolkit
from .errors import CompileError, CompilerNotFoundError, ConfigError, CupyGemmError, DeviceError
from .fsutil import write_atomic
from .registry import Variant
from .render import render

_ERROR_LINE = re.compile(r"\((\d+)\): (?:error|catastrophic error)")


@dataclass(frozen=True)
class Resources:
    """ptxas's report for the kernel."""
    registers: int
    static_smem: int  # bytes of __shared__ arrays (dynamic shared memory comes on top)
    local: int  # stack frame bytes: register arrays that went to local memory
    spill_stores: int
    spill_loads: int

    @classmethod
    def parse(cls, log: str) -> "Resources":
        def grab(pattern):
            m = re.search(pattern, log)
            return int(m.group(1)) if m else 0
        return cls(registers=grab(r"Used (\d+) registers"), static_smem=grab(r"(\d+) bytes smem"),
                   local=grab(r"(\d+) bytes stack frame"), spill_stores=grab(r"(\d+) bytes spill stores"),
                   spill_loads=grab(r"(\d+) bytes spill loads"))


@dataclass(frozen=True)
class Compiled:
    variant: str
    arch: str  # "sm_90a", or "compute_XX" when the image is PTX for the driver to finish
    options: tuple[str, ...]
    image: bytes
    log: str
    key: str

    @property
    def is_ptx(self) -> bool:
        return self.arch.startswith("compute_")

    @property
    def resources(self) -> Resources:
        parsed = Resources.parse(self.log)
        if parsed.registers or self.is_ptx:
            return parsed
        from_image = cubin.resources(self.image, self.arch)  # a log NVRTC left empty
        return Resources(**from_image, spill_stores=0, spill_loads=0) if from_image else parsed

    def __repr__(self) -> str:  # the image is tens of kilobytes: name it, do not print it
        res = self.resources
        return (f"<Compiled {self.variant} for {self.arch}: {'PTX' if self.is_ptx else 'cubin'} of "
                f"{len(self.image)} bytes, {res.registers} registers, {res.static_smem} B static smem, "
                f"{res.local} B local>")


def arch_for(variant: Variant, cc: int) -> str:
    """The NVRTC target for a device of compute capability cc (e.g. 90)."""
    fam = variant.family
    need = fam.min_cc(variant.params, variant.dtype, variant.acc)
    if cc < need:
        raise DeviceError(f"variant {variant.name!r} needs compute capability {need // 10}.{need % 10} or newer; "
                          f"this GPU is {cc // 10}.{cc % 10}")
    if fam.needs_sm90a:
        if cc != 90:
            raise DeviceError(f"variant {variant.name!r} uses Hopper-only instructions (sm_90a) and runs only on "
                              f"compute capability 9.0; this GPU is {cc // 10}.{cc % 10}")
        return "sm_90a"
    supported = toolkit.supported_archs()
    if cc in supported:
        return f"sm_{cc}"
    # a GPU newer than this NVRTC: ship PTX for the newest target it knows; the driver finishes it
    return f"compute_{max(a for a in supported if a <= cc)}"


def check_arch(variant: Variant, arch: str) -> None:
    """Refuse a target the variant cannot run on (used by the GPU-free compile)."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(a?)", arch)
    if not m:
        raise ConfigError("arch", arch, "like sm_80, sm_90 or sm_90a")
    cc = int(m.group(2))
    fam = variant.family
    need = fam.min_cc(variant.params, variant.dtype, variant.acc)
    if cc < need:
        raise DeviceError(f"variant {variant.name!r} needs sm_{need} or newer, not {arch}")
    if fam.needs_sm90a and arch != "sm_90a":
        raise DeviceError(f"variant {variant.name!r} needs sm_90a (Hopper-only instructions), not {arch}")


def options_for(variant: Variant, arch: str) -> tuple[str, ...]:
    return _options(arch, variant.family.needs_mma_headers)


def _options(arch: str, mma_headers: bool) -> tuple[str, ...]:
    headers = toolkit.header_set(mma_headers)
    return (f"-arch={arch}", "-std=c++17", "-lineinfo", "-Xptxas=-v",
            *(f"-I{d}" for d in headers.dirs))


_memory: dict[str, Compiled] = {}


def compile_variant(variant: Variant, arch: str, source: str | None = None) -> Compiled:
    """Compile a variant for `arch` (no GPU needed). Cached by everything the binary depends on."""
    check_arch(variant, arch)
    params = ", ".join(f"{k}={v}" for k, v in variant.params.items())
    return compile_source(variant.name, render(variant) if source is None else source, arch,
                          variant.family.needs_mma_headers,
                          f"variant {variant.name!r} (family {variant.family.name}, {variant.dtype}/{variant.acc}, {params})")


def compile_named(job: tuple[str, str]) -> tuple[Resources | None, str | None, float]:
    """(resources, error message, seconds) of compiling the catalogue variant `name` for `arch`, job = (name,
    arch): a process pool's task, whose worker fills the disk cache. A missing toolkit is not this variant's
    failure: it propagates and ends the whole run."""
    name, arch = job
    start = time.perf_counter()
    try:
        return compile_variant(registry.lookup(name), arch).resources, None, time.perf_counter() - start
    except CompilerNotFoundError:
        raise
    except CupyGemmError as e:
        return None, str(e), time.perf_counter() - start


def _compile_made(job: tuple) -> None:
    family, name, dtype, params, acc, arch = job
    compile_variant(registry.make_variant(registry.family(family), name, dtype, params, acc), arch)


def precompile(variants, arch: str, jobs: int = 16) -> None:
    """Compile variants (catalogue entries or made ones) into the disk cache in a process pool, before timing
    them one by one: NVRTC takes seconds a kernel. A family does not pickle, so each worker makes the variant
    again from its family's name and its parameters."""
    unique = {v.name: v for v in variants}.values()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(_compile_made, [(v.family.name, v.name, v.dtype, v.params, v.acc, arch) for v in unique]))


def compile_source(name: str, source: str, arch: str, mma_headers: bool = False, what: str | None = None) -> Compiled:
    """Compile any rendered source through the same caches: a variant's, or a helper kernel's (the fused
    epilogue alone, for K = 0). `name` labels the cache entry; `what` describes it in a CompileError."""
    options = _options(arch, mma_headers)
    headers = toolkit.header_set(mma_headers)
    key = hashlib.sha256("\0".join([source, *options, str(toolkit.nvrtc_version()), str(headers.version)])
                         .encode()).hexdigest()[:32]
    if key in _memory:
        return _memory[key]
    compiled = _read_disk(name, arch, options, key) or _nvrtc(name, what or repr(name), arch, options, source, key)
    _memory[key] = compiled
    return compiled


def _read_disk(name, arch, options, key) -> Compiled | None:
    if not config.disk_cache_enabled():
        return None
    entry = cache.read(key, arch)  # verified: a damaged entry is deleted and reads as a miss
    return Compiled(name, arch, options, entry.image, entry.log, key) if entry else None


def image_file(compiled: Compiled) -> Path:
    """A file holding the compiled image (CuPy loads modules from files): the disk cache's copy, checked
    against the image and rewritten if damaged, or a private temporary one when the disk cache is off."""
    return cache.image_file(compiled.key, compiled.variant, compiled.arch, compiled.image, compiled.log)


def evict(compiled: Compiled) -> None:
    """Forget a compiled image in memory and on disk, so the next compile_variant runs NVRTC afresh."""
    _memory.pop(compiled.key, None)
    try:
        cache.remove(compiled.key)
    except OSError:  # a read-only cache folder: the recompile still replaces the image in memory
        pass


def _nvrtc(name: str, what: str, arch: str, options, source: str, key: str) -> Compiled:
    lib = toolkit.nvrtc()
    prog = lib.createProgram(source, f"{name}.cu", (), ())
    try:
        try:
            lib.compileProgram(prog, list(options))
        except lib.NVRTCError:
            raise _compile_error(name, what, arch, source, lib.getProgramLog(prog)) from None
        log = lib.getProgramLog(prog)
        image = lib.getPTX(prog) if arch.startswith("compute_") else _whole_elf(lib.getCUBIN(prog))
    finally:
        lib.destroyProgram(prog)
    compiled = Compiled(name, arch, tuple(options), image, log, key)
    if config.disk_cache_enabled():
        try:
            cache.write(key, name, arch, image, log)
        except OSError:
            pass  # a read-only cache folder costs a recompile, nothing more
    return compiled


def _whole_elf(image: bytes) -> bytes:
    """CuPy's getCUBIN can drop a trailing zero byte of the ELF image: the driver does not mind, but
    cuobjdump and nvdisasm reject the file. Restore the length the ELF headers describe."""
    if image[:4] != b"\x7fELF" or image[4] != 2:  # 64-bit ELF only
        return image
    e_shoff, = struct.unpack_from("<Q", image, 0x28)
    e_shentsize, e_shnum = struct.unpack_from("<HH", image, 0x3A)
    end = e_shoff + e_shentsize * e_shnum
    for i in range(e_shnum):  # sections may lie after the section header table
        base = e_shoff + i * e_shentsize
        if base + 0x28 > len(image):
            break
        sh_type, = struct.unpack_from("<I", image, base + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", image, base + 0x18)
        if sh_type != 8:  # SHT_NOBITS occupies no file space
            end = max(end, sh_offset + sh_size)
    return image + b"\0" * (end - len(image)) if end > len(image) else image


def _compile_error(name: str, what: str, arch: str, source: str, log: str) -> CompileError:
    lines = source.splitlines()
    quoted = []
    for n in sorted({int(m.group(1)) for m in _ERROR_LINE.finditer(log)})[:5]:
        for i in range(max(1, n - 2), min(len(lines), n + 2) + 1):
            quoted.append(f"{'>' if i == n else ' '}{i:5d} | {lines[i - 1]}")
        quoted.append("")
    saved = "(could not save it)"
    try:
        path = cache.failed_folder() / f"{name}-{arch}.cu"
        write_atomic(path, source.encode())
        saved = str(path)
    except OSError:
        pass
    return CompileError(f"NVRTC failed to compile {what} for {arch}:\n{log.strip()}\n\n"
                        + "\n".join(quoted) + f"full rendered source: {saved}")


