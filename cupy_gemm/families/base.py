"""What a kernel family (one template) declares: its parameters, constraints and launch shape.

A family is the only place that knows its template's rules. Each constraint is written once here,
raising ConfigError with the parameter, its value and what would be valid; the template repeats it
as a static_assert with the same words. Sweeps call `check` to prune grids and record the reason.
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Iterator, Mapping

from ..errors import ConfigError

# dtype name -> (CUDA type, bytes). A template never receives text from a user: only these names.
CUDA_TYPES = {"float32": ("float", 4), "float16": ("half", 2), "bfloat16": ("__nv_bfloat16", 2)}
# accumulate/compute names; "tf32" means fp32 operands rounded to tf32 on the tensor cores, "3xtf32" fp32
# operands split into two tf32 parts each, three tensor-core products summed in fp32.
# what a family with `convert` may store C as, whatever its inputs
OUT_DTYPES = tuple(CUDA_TYPES)
ACC_TYPES = {"float32": "float", "float16": "half", "tf32": "float", "3xtf32": "float"}
# the largest opt-in dynamic shared memory of any supported GPU (sm_90); the launcher checks the device's own
MAX_DYNAMIC_SMEM = 227 * 1024
FILL_RESIDENT = "resident"  # Family.split_k_fill: aim for as many blocks per SM as one SM holds


@dataclass(frozen=True)
class Param:
    """One integer template parameter."""
    name: str
    default: int
    doc: str
    choices: tuple[int, ...] | None = None
    lo: int | None = None
    hi: int | None = None

    def check(self, value) -> None:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):  # numpy integers are integers
            raise ConfigError(self.name, value, f"an integer ({self.doc})")
        if self.choices is not None and value not in self.choices:
            raise ConfigError(self.name, value, f"one of {list(self.choices)} ({self.doc})")
        if self.lo is not None and value < self.lo:
            raise ConfigError(self.name, value, f">= {self.lo} ({self.doc})")
        if self.hi is not None and value > self.hi:
            raise ConfigError(self.name, value, f"<= {self.hi} ({self.doc})")


def flag(name: str, doc: str, default: int = 0) -> Param:
    return Param(name, default, doc, choices=(0, 1))


def block_swizzle_param(default: int = 0) -> Param:
    """BLOCK_SWIZZLE: the order of blocks over C (templates/common/tile_index.cuh), the same in every family.
    Not the layout of shared memory (the mma family's SMEM_SWIZZLE). A family declaring it takes the old
    name too: `renamed=RENAMED_BLOCK_SWIZZLE`."""
    return Param("BLOCK_SWIZZLE", default, "block-swizzle stride in columns of C, 0 = off", lo=0, hi=1 << 16)


# old parameter name -> new, for a family with block_swizzle_param (see Family.renamed)
RENAMED_BLOCK_SWIZZLE = MappingProxyType({"SWIZZLE": "BLOCK_SWIZZLE"})


def split_k_param(default: int = 0) -> Param:
    """SPLIT_K of a family with split_k=True: how many blocks share a C tile along K."""
    return Param("SPLIT_K", default, "blocks sharing one C tile along K (fp32 partials, fixed summation order); "
                 "0 = chosen per shape to fill the GPU", lo=0, hi=64)


def stream_k_param() -> Param:
    return Param("STREAM_K", 0, "stream-K (templates/common/stream_k.cuh), the shared tiles summed as split-K sums "
                 "them; needs SPLIT_K = 0. 1: every block an equal share of the last one to two waves' K blocks; "
                 "2: whole waves, then each tile of the last one cut into equal shares along K", choices=(0, 1, 2))


def stream_k_rule(p, dtype, acc):
    """STREAM_K's needs, of the parameters the family has (wgmma_tf32_swap has no clusters or ping-pong, sgemm_simt
    only SPLIT_K)."""
    if not p["STREAM_K"]:
        return
    for name, want in (("SPLIT_K", 0), ("CLUSTER", 1), ("KCLUSTER", 1), ("PINGPONG", 0)):
        if name in p and p[name] != want:
            yield ConfigError(name, p[name], f"{want} with STREAM_K = {p['STREAM_K']} (the blocks sharing a tile sum it "
                              "through the split-K workspace; each block walks its own units)")


def few_rows_param() -> Param:
    """FEW_ROWS of a general family (its max_rows): an entry that serves only products whose smaller side is
    at most FEW_ROWS, which the API puts in M, so its tile of few rows serves few columns too (A @ x)."""
    return Param("FEW_ROWS", 0, "0: any product; n: only products whose smaller side is at most n, put in M "
                 "(Cᵀ = Bᵀ·Aᵀ where N is smaller): the same kernel, oriented as a few-rows one", lo=0, hi=256)


@dataclass(frozen=True)
class Family:
    """A kernel family: a template plus the rules that make a parameter set valid.

    layout      "row": A (M×K), B (K×N), C (M×N) row-major with leading dimensions;
                "col": the same matrices column-major (BLAS convention).
    b_layout    B's layout where it differs from `layout` (a "row" family reading B K-major says "col").
    abi         "pointers": gemm_kernel(A, B, C, M, N, K, lda, ldb, ldc, alpha, beta);
                "tma": the Hopper ABI (tensor maps for A and B; see families/wgmma.py).
    dtypes      {input dtype: allowed accumulate names}; C has the input dtype unless the family converts.
    rules       callables (params, dtype, acc) -> iterator of ConfigError, beyond the per-Param checks.
    threads     params -> threads per block (block = (threads, 1, 1)).
    smem_bytes  (params, dtype, acc) -> dynamic shared memory bytes (0 for static smem only).
    tile        params -> (rows of C, cols of C) one block computes.
    align       (params, dtype) -> elements that K, the vector dimension of C and every leading dimension
                must be a multiple of, with base pointers aligned to as many elements; the API pads
                (exactly, with zeros) when a problem does not meet it, so 1 means "any shape".
    persistent  a persistent kernel: the grid is at most `persistent` blocks per SM (0: one block per tile).
    make_args   for abi != "pointers": (variant, A, B, C, M, N, K, lda, ldb, ldc, alpha, beta) -> the
                kernel's argument tuple, given CuPy arrays already resolved to the family's layout
                and alignment (A, B, C are the operands the kernel sees, as the pointer ABI would).
    split_k     the kernel splits K over several blocks per C tile (templates/common/split_k.cuh): it takes
                `int splits, void* workspace` after its other arguments, the launcher picks `splits`
                (the SPLIT_K parameter, or per shape when it is 0) and owns the workspace; blocks that
                are not persistent find their split in blockIdx.y.
    split_k_args_optional  SPLIT_K = 1 renders the plain kernel, without the split-K arguments as well as its
                steps: the family's entries from before split-K keep their source, ABI and compiled images
                (`takes_split_k_args` says which variants take them).
    atomic_sum  the template sums split-K partials through split_k_combine, which a variant rendered
                with_extras(split_atomic=True) turns into fp32 atomic adds into one slot a tile (the API's
                deterministic=False): faster where the ordered sum's chain of L2 round trips shows, and
                not bitwise repeatable.
    split_k_fill   params -> for a kernel bound by its loads' latency: blocks per SM the automatic split
                (SPLIT_K = 0) aims for, to keep enough loads in flight, or FILL_RESIDENT: as many as one SM
                holds (split_policy.resident_blocks, from the compiled kernel's registers), so the splits
                run in one wave (None: split_policy.k_splits' cost model decides).
    split_k_min_k  params -> the least K a split should sum (None: split_policy.MIN_K_PER_SPLIT); a kernel
                whose partial tile is small next to its slice of the operands, or whose K blocks are slow to
                load, may split finer.
    max_rows    params -> the most rows of C the kernel serves (None: any M; a family whose entries may serve
                any or few, FEW_ROWS, returns None for the former). The API puts the smaller
                side of the product in M (swapping A and B: Cᵀ = Bᵀ·Aᵀ) and refuses a problem whose
                M and N both exceed it, before anything launches. A dispatcher asks it which problems a
                variant can serve: min(M, N) <= max_rows(params).
    batched     the template runs a batch of products in one launch when rendered with BATCHED
                (templates/common/batch.cuh): it takes a BatchArgs after its other arguments and before the
                split-K ones, and finds its member in blockIdx.z (a loop over it when the batch is larger than
                the grid) or, persistent, in its work units. TMA families get the batch in make_args'
                `batch` too (their maps address it).
    epilogue    the template applies a fused epilogue (cupy_gemm/epilogue.py) when rendered with one:
                `apply_epilogue(x, i, j, epi)` on alpha·acc + beta·C of every element, once (after the
                split-K reduction), where i, j are the element's row and column in the kernel's C; it
                takes an EpilogueParams after the BatchArgs (if any) and before the split-K arguments.
    convert     the template stores C as T_OUT, any of OUT_DTYPES whatever the inputs (a variant rendered
                with_extras(out_dtype=...)): the fp32 results (after alpha·acc + beta·C, the split-K sum and
                the epilogue) are converted once, in the store, and beta·C reads C as T_OUT. The API then
                aligns C's leading dimension and base to align(params, dtype) × sizeof(input) bytes, in
                C's own elements (arrange.c_align).
    cluster     params -> CTAs per thread-block cluster (1: no clusters). A persistent family's grid is then
                a whole number of clusters, at most as many as the GPU runs at once (driver.max_active_clusters).
    cluster_splits_k  params -> whether a cluster's CTAs share one C tile along K (each a K slice, summed
                on chip) rather than take vertically adjacent tiles.
    k_block     params -> the K one pipeline stage (and a split's least share) holds: BK where the family
                has it (1 for those without stages), or the family's constant.
    stream_k    params -> the stream-K partition a split-K kernel walks on a grid of as many blocks as the
                SMs hold (0: none; 1, 2: the modes of templates/common/stream_k.cuh, whole tiles first, then
                shares of the rest's K blocks); the launcher sizes the grid (split_policy.resident_blocks
                an SM) and the workspace by cupy_gemm/stream_k.py, which mirrors those partitions.
    ragged_n    a row family reading B K-major that takes any N: rows of n past N arrive as zeros (TMA) or
                repeat row N - 1, and C is stored in groups of at most `align` input elements' bytes that
                start inside N. N then need not meet `align` (K and the leading dimensions still do): the
                API writes C into a buffer of its own, whose aligned leading dimension holds such a group's
                columns past N, and copies it back, rather than pad B.
    scalar_c    C is stored element by element with guards, at its own row and column strides (make_args
                passes both): its layout, leading dimension, base address and N need not meet anything, so
                C is written where it lies (a swapped product's column-major Cᵀ too).
    unaligned_c the template stores C at any leading dimension and base address, N any, when rendered with
                with_extras(unaligned_c=True) (UNALIGNED_C: no TMA store; pairs of columns where aligned and
                inside N, else single elements): the API then writes such a C in place, not through a buffer
                of its own copied back (arrange's Arrangement.unaligned_c says when).
    pdl         the template calls pdl_wait() (templates/common/prelude.cuh) before its first access to global
                memory, so the launcher may start it while the previous kernel on the stream still runs
                (programmatic dependent launch, sm_90 and later: cupy_gemm/driver.py).
    renamed     {old parameter name: its name now}: sweep grids, tuning entries, `--set` and `render(...)`
                written with an old name still work (`canonical` maps them; giving both names is an error).
    """
    name: str
    template: str
    doc: str
    params: tuple[Param, ...]
    dtypes: Mapping[str, tuple[str, ...]]
    threads: Callable[[Mapping[str, int]], int]
    tile: Callable[[Mapping[str, int]], tuple[int, int]]
    smem_bytes: Callable[[Mapping[str, int], str, str], int] = lambda p, dtype, acc: 0
    align: Callable[[Mapping[str, int], str], int] = lambda p, dtype: 1
    rules: tuple[Callable[[Mapping[str, int], str, str], Iterator[ConfigError]], ...] = ()
    layout: str = "row"
    b_layout: str | None = None
    abi: str = "pointers"
    min_cc: Callable[[Mapping[str, int], str, str], int] = lambda p, dtype, acc: 70
    needs_sm90a: bool = False
    needs_mma_headers: bool = False  # the template includes <mma.h> (WMMA): needs crt/mma.h
    persistent: int = 0
    make_args: Callable | None = None
    split_k: bool = False
    split_k_args_optional: bool = False
    atomic_sum: bool = False
    split_k_fill: Callable[[Mapping[str, int]], int | str | None] | None = None
    split_k_min_k: Callable[[Mapping[str, int]], int | None] | None = None
    max_rows: Callable[[Mapping[str, int]], int] | None = None
    renamed: Mapping[str, str] = field(default_factory=dict)
    batched: bool = False
    epilogue: bool = False
    convert: bool = False
    ragged_n: bool = False
    scalar_c: bool = False
    unaligned_c: bool = False
    pdl: bool = False
    cluster: Callable[[Mapping[str, int]], int] = lambda p: 1
    cluster_splits_k: Callable[[Mapping[str, int]], bool] = lambda p: False
    stream_k: Callable[[Mapping[str, int]], int] = lambda p: 0
    k_block: Callable[[Mapping[str, int]], int] = lambda p: p.get("BK", 1)
    param_index: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "param_index", {p.name: p for p in self.params})
        for old, new in self.renamed.items():
            if new not in self.param_index or old in self.param_index:
                raise ValueError(f"family {self.name!r}: renamed {old} -> {new} must map an old name to a parameter")

    def cluster_rows(self, params: Mapping[str, int]) -> int:
        """Rows of C one cluster takes: its blocks' vertically adjacent tiles, or one tile split along K."""
        bm = self.tile(params)[0]
        return bm if self.cluster_splits_k(params) else bm * self.cluster(params)

    def takes_split_k_args(self, params: Mapping[str, int]) -> bool:
        """Whether a kernel of these (completed) parameters takes `int splits, void* workspace` last, so
        that the launcher passes them and owns a workspace for it."""
        return self.split_k and not (self.split_k_args_optional and params["SPLIT_K"] == 1)

    def canonical(self, params: Mapping[str, object], *, where: str = "") -> dict[str, object]:
        """`params` with every old parameter name (`renamed`) replaced by its name now, order kept; values
        (numbers, or a grid's lists) pass through. Both names of one parameter raise ConfigError."""
        out = {}
        for name, value in params.items():
            new = self.renamed.get(name)
            if new is not None and new in params:
                raise ConfigError(name, value, f"left out: it is the old name of {new}, which is given too "
                                  f"({new}={params[new]!r})", where=where)
            out[new or name] = value
        return out

    def complete(self, params: Mapping[str, int], *, where: str = "") -> dict[str, int]:
        """Fill defaults (old names mapped first) and reject names the family does not have."""
        params = self.canonical(params, where=where)
        unknown = sorted(set(params) - set(self.param_index))
        if unknown:
            raise ConfigError(unknown[0], params[unknown[0]],
                              f"a parameter of family {self.name!r}: {sorted(self.param_index)}",
                              where=where)
        return {p.name: params.get(p.name, p.default) for p in self.params}

    def check(self, params: Mapping[str, int], dtype: str, acc: str, *, where: str = "") -> dict[str, int]:
        """The one place a parameter set is validated. Returns the completed parameters."""
        full = self.complete(params, where=where)
        if dtype not in self.dtypes:
            raise ConfigError("dtype", dtype, f"one of {sorted(self.dtypes)} for family {self.name!r}", where=where)
        if acc not in self.dtypes[dtype]:
            raise ConfigError("acc", acc, f"one of {list(self.dtypes[dtype])} for {dtype} inputs", where=where)
        for p in self.params:
            try:
                p.check(full[p.name])
            except ConfigError as e:
                raise ConfigError(e.param, e.value, e.expected, where=where) from None
        full = {k: int(v) for k, v in full.items()}  # numpy integers: no fixed-width overflow in the rules below
        smem = self.smem_bytes(full, dtype, acc)
        if smem > MAX_DYNAMIC_SMEM:
            raise ConfigError("smem", smem, f"at most {MAX_DYNAMIC_SMEM} bytes of shared memory per block "
                              "(Hopper's opt-in limit); shrink the tile or STAGES", where=where)
        # family rules first: a tile that does not divide should be named, not the thread count it implies
        for rule in self.rules:
            for err in rule(full, dtype, acc):
                raise ConfigError(err.param, err.value, err.expected, where=where)
        threads = self.threads(full)
        if not 32 <= threads <= 1024 or threads % 32:
            raise ConfigError("threads", threads, "a multiple of 32 between 32 and 1024 threads per block "
                              "(derived from the tile parameters)", where=where)
        return full


def divides(small: str, big: str, why: str = ""):
    """Rule: params[big] % params[small] == 0."""
    def rule(p, dtype, acc):
        if p[big] % p[small]:
            yield ConfigError(big, p[big], f"a multiple of {small}={p[small]}" + (f" ({why})" if why else ""))
    return rule
