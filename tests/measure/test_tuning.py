"""The tuning database without a GPU: buckets, keys, the file and its lock, lookup and its fallbacks."""
import json
import multiprocessing

import pytest

import cupy_gemm
from cupy_gemm import registry, tuning
from cupy_gemm.measure import space
from cupy_gemm.measure import tune as tune_mod

DEVICE = ("Fake GPU", 90)


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    return tmp_path / "tuning.json"


def _entry(variant="sgemm_sliced_k_f32", shape=(4096, 4096, 4096), time_ms=1.0, default_ms=2.0, dtype="float32",
           acc="float32", device=DEVICE, **extra):
    v = registry.lookup(variant) if variant in registry.catalogue() else extra.pop("as_variant")
    entry = {"key": tuning.entry_key(device[0], device[1], dtype, acc, "row", tuning.bucket(*shape)),
             "device": device[0], "cc": device[1], "dtype": dtype, "acc": acc, "layout": "row",
             "bucket": list(tuning.bucket(*shape)), "shape": list(shape), "variant": v.name, "family": v.family.name,
             "params": dict(v.params), "source_hash": tuning.source_hash(v), "time_ms": time_ms,
             "default_ms": default_ms}
    entry.update(extra)
    return entry


def test_buckets_and_keys():
    assert tuning.bucket(4096, 4096, 4096) == (12, 12, 12)
    assert tuning.bucket(5000, 3000, 1) == (12, 12, 0)  # nearest power of two on a log scale
    assert tuning.bucket(6000, 2800, 1) == (13, 11, 0)
    assert tuning.entry_key("H100", 90, "float16", "float32", "row", (12, 12, 10)) == \
        "H100|sm_90|float16|float32|row|2^12x2^12x2^10"


def test_store_and_load(db):
    assert tuning.load() == {}
    tuning.store([_entry()])
    tuning.store([_entry(shape=(1024, 1024, 1024))])
    data = json.loads(db.read_text())
    assert data["schema"] == tuning.SCHEMA and len(data["entries"]) == 2
    tuning.store([_entry(time_ms=0.5)])  # same key: replaced
    assert len(tuning.load()) == 2 and min(e["time_ms"] for e in tuning.load().values()) == 0.5
    assert tuning.remove([_entry()["key"]]) == 1 and len(tuning.load()) == 1


def test_unreadable_or_other_schema_reads_empty(db):
    db.write_text("{not json")
    assert tuning.load() == {}
    db.write_text(json.dumps({"schema": 999, "entries": {"k": {}}}))
    assert tuning.load() == {}
    tuning.store([_entry()])  # replaces the unusable file
    assert len(tuning.load()) == 1


def _writer(path, worker, count):
    for i in range(count):
        tuning.store([_entry(shape=(2 ** (worker + 1), 2 ** (i + 1), 64))], path)


def test_concurrent_writers_lose_nothing(tmp_path):
    path = tmp_path / "tuning.json"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, w, 12)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = tuning.load(path)
    assert len(entries) == 4 * 12
    assert not [p.name for p in tmp_path.iterdir() if p.name not in ("tuning.json", "tuning.json.lock")]


def test_lookup_exact_nearest_and_default(db):
    tuning.store([_entry("sgemm_sliced_k_f32", (4096, 4096, 4096), time_ms=1.0, default_ms=2.0),
                _entry("sgemm_naive_f32", (256, 256, 256), time_ms=1.0, default_ms=1.01)])
    look = lambda m, n, k, **kw: tuning.lookup(kw.get("device", DEVICE), kw.get("dtype", "float32"), None, "row",
                                             m, n, k)
    assert look(4096, 4096, 4096) == "sgemm_sliced_k_f32"
    assert look(5000, 4000, 3500) == "sgemm_sliced_k_f32"  # same bucket
    assert look(8000, 4096, 4096) == "sgemm_sliced_k_f32"  # nearest tuned shape, within 2× in every dimension
    assert look(9000, 4096, 4096) is None  # too far: the default
    assert look(200, 256, 256) == "sgemm_naive_f32"  # same bucket as its own shape
    assert look(256, 256, 512) is None  # a neighbour that barely beat the default is not borrowed
    assert look(4096, 4096, 4096, device=("Other GPU", 90)) is None
    assert look(4096, 4096, 4096, dtype="float16") is None


def test_lookup_ignores_entries_whose_source_changed(db):
    tuning.store([_entry(source_hash="0" * 16)])
    assert tuning.lookup(DEVICE, "float32", None, "row", 4096, 4096, 4096) is None
    assert tuning.listing()[0]["valid"] is False


def test_lookup_notices_file_changes(db):
    assert tuning.lookup(DEVICE, "float32", None, "row", 4096, 4096, 4096) is None
    tuning.store([_entry()])
    assert tuning.lookup(DEVICE, "float32", None, "row", 4096, 4096, 4096) == "sgemm_sliced_k_f32"


def test_swept_winner_outside_the_catalogue(db):
    point = next(p for p in space.points("sliced_k", {"BM": [16], "BN": [16], "BK": [8]}, "float32") if p.valid)
    assert not point.catalogue
    cat = registry.lookup("sgemm_sliced_k_f32")
    tuning.store([_entry("sweep-point", as_variant=point.variant, catalogue_variant=cat.name,
                       catalogue_family="sliced_k", catalogue_params=dict(cat.params),
                       catalogue_source_hash=tuning.source_hash(cat), catalogue_ms=1.5)])
    # lookup names a catalogue variant (what registry.lookup resolves); lookup_variant gives the winner
    assert tuning.lookup(DEVICE, "float32", None, "row", 4096, 4096, 4096) == "sgemm_sliced_k_f32"
    winner = tuning.lookup_variant(DEVICE, "float32", None, "row", 4096, 4096, 4096)
    assert winner.name == point.name and dict(winner.params) == point.params


def test_default_acc(monkeypatch):
    monkeypatch.delenv("CUPY_TF32", raising=False)
    assert tuning.default_acc("float32") == "float32" and tuning.default_acc("float16") == "float32"
    monkeypatch.setenv("CUPY_TF32", "1")
    assert tuning.default_acc("float32") == "tf32" and tuning.default_acc("float16") == "float32"


def test_tune_is_exported():
    """cupy_gemm.tune(...) tunes; cupy_gemm.tuning.lookup serves matmul(variant="auto")."""
    assert cupy_gemm.tune is tune_mod.tune
    assert callable(cupy_gemm.tuning.lookup_variant)


def test_variant_spec_round_trips_and_runs_on():
    cat = registry.lookup("sgemm_sliced_k_f32")
    assert registry.from_spec(cat.to_spec()) is cat  # the catalogue's own entry, notes and all
    point = next(p for p in space.points("sliced_k", {"BM": [16], "BN": [16], "BK": [8]}, "float32") if p.valid)
    again = registry.from_spec(point.variant.to_spec())
    assert again == point.variant and tuning.source_hash(again) == point.source_hash
    hopper = next(v for v in registry.catalogue().values() if v.family.needs_sm90a)
    assert hopper.runs_on(90) and not hopper.runs_on(80) and not hopper.runs_on(100)
    assert cat.runs_on(80) and cat.runs_on(90)
