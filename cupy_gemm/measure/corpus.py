"""The shapes people run, as data: the projections of public model families at the token counts of
decoding (M = 1 … 64) and of prefill and training (M = 128 … 8192), plus non-multiples and skinny K.

A projection multiplies activations X (M × K) by a weight W (K × N): M is the number of tokens (for an
expert of a mixture, the tokens routed to it), K the input width, N the output width. Every shape is named
`model.layer.M<m>` (`group.layer` outside the model grid). A shape that two entries share is kept once,
under the first name, with the others in `also`: a duplicate would weigh twice in a geometric mean.

    shapes("llm")         the whole corpus
    shapes("llm-small")   about 25 of them, for a quick run
    shapes("unseen")      other model families at other token counts: no dispatch table was timed on them,
                          so they show how the default path does on shapes its tables only neighbour
    shapes("llm-dense")   the llm corpus's families at the token counts between its own (32, 256, 1024),
                          for dispatch tables whose entries must not be 4× apart in M
"""
from __future__ import annotations

from dataclasses import dataclass, field

TOKENS = (1, 8, 16, 64, 128, 512, 2048, 8192)
DENSE_TOKENS = (32, 256, 1024)  # llm-dense: between TOKENS, where a table entry 2× away in M does not carry over


@dataclass(frozen=True)
class Shape:
    name: str
    model: str
    layer: str
    m: int
    n: int
    k: int
    also: tuple[str, ...] = field(default=(), compare=False)

    @property
    def mnk(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    @property
    def label(self) -> str:
        return "×".join(map(str, self.mnk))


@dataclass(frozen=True)
class Transformer:
    """A decoder layer with grouped-query attention and a gated MLP (Llama, Mistral, Mixtral's experts)."""
    name: str
    hidden: int
    intermediate: int
    heads: int
    head_dim: int
    kv_heads: int
    mlp_prefix: str = ""  # "expert." for a mixture's experts

    def projections(self) -> list[tuple[str, int, int]]:
        """(layer, N, K) of every weight a token passes through, the fused q|k|v weight included."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        mlp = self.mlp_prefix
        return [("q_proj", q, self.hidden), ("k_proj", kv, self.hidden), ("v_proj", kv, self.hidden),
                ("o_proj", self.hidden, q), ("qkv_proj", q + 2 * kv, self.hidden),
                (f"{mlp}gate_proj", self.intermediate, self.hidden), (f"{mlp}up_proj", self.intermediate, self.hidden),
                (f"{mlp}down_proj", self.hidden, self.intermediate)]


LLAMA3_8B = Transformer("llama3-8b", hidden=4096, intermediate=14336, heads=32, head_dim=128, kv_heads=8)
LLAMA3_70B = Transformer("llama3-70b", hidden=8192, intermediate=28672, heads=64, head_dim=128, kv_heads=8)
# Mixtral 8x7B: Llama-3 8B's attention, and eight 4096 -> 14336 experts of which two serve each token
MIXTRAL_8X7B = Transformer("mixtral-8x7b", hidden=4096, intermediate=14336, heads=32, head_dim=128, kv_heads=8,
                           mlp_prefix="expert.")

# DeepSeek-V3: 256 small routed experts (7168 -> 2048, eight per token) and multi-head latent attention,
# whose projections pass through low-rank latents (q: 1536, kv: 512 plus a 64-wide rotary part) across
# 128 heads of 128 (+64 rotary) dimensions.
DEEPSEEK_V3 = ("deepseek-v3", [
    ("q_a_proj", 1536, 7168), ("q_b_proj", 128 * (128 + 64), 1536), ("kv_a_proj", 512 + 64, 7168),
    ("kv_b_proj", 128 * (128 + 128), 512), ("o_proj", 7168, 128 * 128),
    ("expert.gate_proj", 2048, 7168), ("expert.up_proj", 2048, 7168), ("expert.down_proj", 7168, 2048)])

# The `unseen` corpus: families whose widths the llm corpus lacks, at token counts between its own. The
# dispatch tables are timed on the llm corpus; these shapes are answered by a table's neighbour or the
# heuristic, as a user's own model would be.
UNSEEN_TOKENS = (1, 4, 32, 256, 1000, 3000)
UNSEEN_MODELS = [
    Transformer("qwen2.5-7b", hidden=3584, intermediate=18944, heads=28, head_dim=128, kv_heads=4),
    Transformer("gemma2-9b", hidden=3584, intermediate=14336, heads=16, head_dim=256, kv_heads=8),
    Transformer("mistral-nemo-12b", hidden=5120, intermediate=14336, heads=32, head_dim=128, kv_heads=8),
    Transformer("phi3-mini", hidden=3072, intermediate=8192, heads=32, head_dim=96, kv_heads=32),
    # Qwen3-30B-A3B: 128 narrow experts (2048 -> 768), eight per token
    Transformer("qwen3-30b-a3b", hidden=2048, intermediate=768, heads=32, head_dim=128, kv_heads=4,
                mlp_prefix="expert."),
]

# Shapes outside the model grid, (model, layer, M, N, K). Attention itself: scores Q·Kᵀ per head are
# seq × seq × head_dim (skinny K), the weighted sum P·V is seq × head_dim × seq (narrow N). Groups that are
# not models (GROUPS) are named `group.layer`, without the token count.
EXTRAS = [
    ("llama2-7b", "down_proj", 128, 4096, 11008),
    ("llama2-7b", "gate/up_proj", 128, 11008, 4096),
    ("attention", "scores.seq4096.hd128", 4096, 4096, 128),
    ("attention", "pv.seq4096.hd128", 4096, 128, 4096),
    ("attention", "scores.seq8192.hd64", 8192, 8192, 64),
    ("attention", "pv.seq8192.hd64", 8192, 64, 8192),
    ("square", "512", 512, 512, 512),
    ("square", "1024", 1024, 1024, 1024),
    ("square", "4096", 4096, 4096, 4096),
    ("square", "8192", 8192, 8192, 8192),
    ("ragged", "1000", 1000, 1000, 1000),
    ("ragged", "4095", 4095, 4095, 4095),
    ("ragged", "5000x3000x1000", 5000, 3000, 1000),
    ("ragged", "129x1000x33", 129, 1000, 33),
    ("ragged", "17x4095x1000", 17, 4095, 1000),
]
GROUPS = ("attention", "square", "ragged")

# The quick subset, M×N×K: decode and prefill of each family, the attention products, the squares the
# project has always been measured at, and ragged sizes.
SMALL = [
    (1, 4096, 4096), (16, 4096, 4096), (128, 4096, 4096), (2048, 4096, 4096),
    (16, 1024, 4096), (512, 6144, 4096),
    (1, 14336, 4096), (64, 14336, 4096), (2048, 14336, 4096), (16, 4096, 14336),
    (8, 1024, 8192), (128, 28672, 8192), (1, 8192, 28672), (8192, 8192, 8192),
    (16, 2048, 7168), (64, 7168, 2048), (128, 576, 7168), (2048, 24576, 1536),
    (128, 4096, 11008),
    (4096, 128, 4096), (4096, 4096, 128), (8192, 8192, 64),
    (512, 512, 512), (4096, 4096, 4096),
    (5000, 3000, 1000), (129, 1000, 33),
]


def merge_layers(projections) -> list[tuple[str, int, int]]:
    """Layers of one model with the same (N, K) become one entry: q_proj and o_proj -> q/o_proj."""
    merged: dict[tuple[int, int], list[str]] = {}
    for layer, n, k in projections:
        merged.setdefault((n, k), []).append(layer)
    return [(_join(layers), n, k) for (n, k), layers in merged.items()]


def _join(layers: list[str]) -> str:
    if len(layers) > 1 and all(x.endswith("_proj") for x in layers):
        prefix = layers[0].rsplit(".", 1)[0] + "." if "." in layers[0] else ""
        return prefix + "/".join(x[len(prefix):-len("_proj")] for x in layers) + "_proj"
    return "/".join(layers)


def _entries(models, tokens, extras=()):
    """(model, layer, M, N, K) of every projection of `models` ((name, projections) pairs) at every token
    count, then the extras."""
    for model, projections in models:
        for layer, n, k in merge_layers(projections):
            for m in tokens:
                yield model, layer, m, n, k
    yield from extras


def build(name: str = "llm") -> list[Shape]:
    """The corpus `name` ("llm", "llm-dense" or "unseen", whole): one Shape per distinct M×N×K, in
    definition order, with the names it also goes by."""
    models = [(t.name, t.projections()) for t in (LLAMA3_8B, LLAMA3_70B, MIXTRAL_8X7B)] + [DEEPSEEK_V3]
    if name == "unseen":
        entries = _entries([(t.name, t.projections()) for t in UNSEEN_MODELS], UNSEEN_TOKENS)
    elif name == "llm-dense":
        entries = _entries(models, DENSE_TOKENS)
    else:
        entries = _entries(models, TOKENS, EXTRAS)
    first: dict[tuple[int, int, int], tuple] = {}
    aliases: dict[tuple[int, int, int], list[str]] = {}
    for model, layer, m, n, k in entries:
        name = f"{model}.{layer}" if model in GROUPS else f"{model}.{layer}.M{m}"
        if (m, n, k) in first:
            aliases[(m, n, k)].append(name)
        else:
            first[(m, n, k)] = (name, model, layer)
            aliases[(m, n, k)] = []
    return [Shape(name, model, layer, *mnk, also=tuple(aliases[mnk])) for mnk, (name, model, layer) in first.items()]


def lookup(corpus: list[Shape], m: int, n: int, k: int) -> Shape:
    for shape in corpus:
        if shape.mnk == (m, n, k):
            return shape
    raise KeyError(f"{m}x{n}x{k} is not in the corpus")


CORPORA = ("llm", "llm-small", "llm-dense", "unseen")


def shapes(name: str = "llm") -> list[Shape]:
    """The corpus called `name` (see CORPORA), or `CORPUS:MxNxK,…`: those shapes of it, in that order (the
    shapes a dispatch table is refined on, .ci/dispatch-tables)."""
    name, _, subset = name.partition(":")
    if name not in CORPORA:
        raise ValueError(f"unknown shape corpus {name!r}; choose one of {', '.join(CORPORA)}")
    corpus = build("llm" if name == "llm-small" else name)
    chosen = [lookup(corpus, *mnk) for mnk in SMALL] if name == "llm-small" else corpus
    if not subset:
        return chosen
    by_label = {s.label.replace("×", "x"): s for s in chosen}
    unknown = [x for x in subset.split(",") if x not in by_label]
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not in the {name} corpus (its shapes: MxNxK, e.g. "
                         f"{chosen[0].label.replace('×', 'x')})")
    return [by_label[x] for x in subset.split(",")]


def named_or_listed(specs: list[str] | str) -> list[Shape]:
    """Corpora (`llm`, `llm:MxNxK,…`) and plain MxNxK lists, as Shapes (a listed one named by its size), in
    order, each shape once: what `cupy-gemm tune` and `bench --tuned/--candidates` time."""
    from .shapes import parse_shapes
    out: list[Shape] = []
    for spec in [specs] if isinstance(specs, str) else specs:
        if spec.partition(":")[0] in CORPORA:
            out += shapes(spec)
        else:
            out += [Shape("x".join(map(str, mnk)), "", "", *mnk) for mnk in parse_shapes(spec)]
    return list({s.mnk: s for s in out}.values())
