"""`cupy-gemm tune`'s default mode without a GPU: entries from a candidate run's records, keyed by the exact
shape and B's layout, and how `variant="auto"` finds them."""
import argparse

import pytest

from cupy_gemm import candidates, cli_corpus, cli_tune, registry, tuning
from cupy_gemm.measure import corpus, tune_candidates

GPU = {"name": "Fake GPU", "compute_capability": "90"}
DEVICE = ("Fake GPU", 90)
ROW = "hgemm_wgmma_m64n128k16_tile64x128_stages8_ws1_splitk"
COL = "hgemm_wgmma_kmajor_m64n128k16_tile128x128_stages3_ws1"
BIG = "hgemm_wgmma_m64n256k16_stages4_ws2_cluster2"


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.setenv("CUPY_GEMM_CACHE_DIR", str(tmp_path))
    return tmp_path / "tuning.json"


def record(variant, us, shape=(32, 3584, 3584), mode="float16", status="ok", default=False, cupy_us=20.0):
    m, n, k = shape
    return {"kind": "candidate", "dtype": mode, "M": m, "N": n, "K": k, "variant": variant, "status": status,
            "ours_us": us if status == "ok" else None, "cupy_us": cupy_us, "default": default}


def meta(b_layout="row"):
    return {"devices": [GPU], "settings": {"b_layout": b_layout}}


def test_the_fastest_correct_candidate_is_stored_beside_the_default():
    rows = [record(BIG, 30.0, default=True), record(BIG, 30.5), record(ROW, 18.0),
            record(COL, 9.0, status="incorrect"),  # faster but wrong: never stored
            record(ROW, None, shape=(17, 17, 17), status="invalid")]  # nothing ran: no entry
    (entry,) = tune_candidates.entries(meta(), rows)
    assert entry["variant"] == ROW and entry["time_ms"] == pytest.approx(0.018)
    assert entry["default"] == BIG and entry["default_ms"] == pytest.approx(0.030)
    assert entry["cublas_ms"] == pytest.approx(0.020) and entry["layout"] == "row"
    assert entry["key"] == tuning.shape_key("Fake GPU", 90, "float16", "float32", "row", (32, 3584, 3584))
    assert tuning.resolve(entry).name == ROW


def test_an_exact_float32_kernel_that_wins_under_tf32_keeps_its_own_accumulate_type():
    exact = "sgemm_t_8x4_sliced_k16_f32x4_bcf_dbuf_offset_splitk"
    assert registry.lookup(exact).acc == "float32"
    (entry,) = tune_candidates.entries(meta(), [record(exact, 5.0, mode="tf32")])
    assert (entry["dtype"], entry["acc"], entry["variant_acc"]) == ("float32", "tf32", "float32")
    assert tuning.resolve(entry).name == exact


def test_each_shape_keeps_its_own_entry_inside_a_shared_bucket(db):
    """3584 and 4096 share a bucket: a model's two shapes there must not overwrite each other."""
    a, b = (32, 3584, 3584), (32, 4096, 3584)
    assert tuning.bucket(*a) == tuning.bucket(*b)
    rows = [record(BIG, 30.0, a, default=True), record(ROW, 20.0, a),
            record(BIG, 30.0, b, default=True), record(BIG, 30.0, b)]
    tuning.store(tune_candidates.entries(meta(), rows))
    assert tuning.lookup(DEVICE, "float16", None, "row", *a) == ROW
    assert tuning.lookup(DEVICE, "float16", None, "row", *b) == BIG
    # a third shape of the bucket borrows only a neighbour that clearly beat the default
    assert tuning.lookup(DEVICE, "float16", None, "row", 32, 3584, 4096) == ROW
    tuning.store(tune_candidates.entries(meta(), [record(BIG, 30.0, a, default=True), record(ROW, 29.5, a)]))
    assert tuning.lookup(DEVICE, "float16", None, "row", 32, 3584, 4096) is None


def test_entries_answer_calls_whose_b_lies_as_it_was_timed(db):
    tuning.store(tune_candidates.entries(meta("col"), [record(BIG, 30.0, default=True), record(COL, 20.0)]))
    assert tuning.lookup(DEVICE, "float16", None, "col", 32, 3584, 3584) == COL
    assert tuning.lookup(DEVICE, "float16", None, "row", 32, 3584, 3584) is None


def test_the_default_mode_times_what_the_tables_are_timed_on():
    """Every Hopper entry of every candidate list is among the timed ones, so a tuning run (and a table's
    candidate step) can choose it."""
    timed = set(candidates.timed())
    for role, lists in candidates.candidates().items():
        for key, names in lists.items():
            for name in names:
                v = registry.catalogue().get(name)
                if v is not None and key != "3xtf32" and v.runs_on(90) and not v.runs_on(80):
                    assert name in timed, (role, key, name)


def test_the_command_line_of_the_default_mode():
    assert cli_tune.mode_of("float16", None) == "float16" and cli_tune.mode_of("float32", "tf32") == "tf32"
    for dtype, acc in (("float16", "float16"), ("float32", "3xtf32")):
        with pytest.raises(ValueError, match="--family"):
            cli_tune.mode_of(dtype, acc)
    shapes = corpus.named_or_listed(["unseen:32x3584x3584,256x3584x3584", "32x3584x3584,64"])
    assert [s.mnk for s in shapes] == [(32, 3584, 3584), (256, 3584, 3584), (64, 64, 64)]
    args = argparse.Namespace(family=None, variant=None, sweep=None, set=None, grid=None)
    assert cli_tune.wanted(args) and not cli_tune.wanted(argparse.Namespace(**{**vars(args), "family": ["wgmma"]}))
    # bench: plain shapes go to the seed-style benchmark, unless --default, --tuned or --candidates asks for the
    # corpus one
    bench = argparse.Namespace(shapes="32x3584x3584", default=False, tuned=False, candidates=False)
    assert not cli_corpus.is_corpus(bench)
    assert cli_corpus.is_corpus(argparse.Namespace(**{**vars(bench), "tuned": True}))
    assert cli_corpus.is_corpus(argparse.Namespace(**{**vars(bench), "default": True}))
    assert cli_corpus.is_corpus(argparse.Namespace(**{**vars(bench), "shapes": "unseen"}))


def test_tune_stores_the_winners_and_says_one_line_a_shape(db, monkeypatch):
    """tune() around a stand-in for the corpus timing: the default timed beside the candidates, entries stored
    for the run's B layout, progress one line per shape (not per candidate)."""
    rows = [record(BIG, 30.0, default=True), record(ROW, 20.0),
            record(BIG, 8.0, shape=(1, 3584, 3584), default=True), record(ROW, None, (1, 3584, 3584), status="invalid")]
    for r in rows:
        r["name"] = "x".join(map(str, (r["M"], r["N"], r["K"])))
    calls = {}

    def fake_run(shapes, modes, *, variants, settings, command, progress, checkpoint, with_default):
        calls.update(variants=variants, b_layout=settings.b_layout, torch=settings.torch, with_default=with_default)
        progress("Fake GPU: copy bandwidth 3000 GB/s")
        progress("[float16 1/2] a candidate's line")
        for upto in (2, 4, 4):  # after each shape, then after the mode
            checkpoint(meta("col"), rows[:upto])
        return meta("col"), rows
    monkeypatch.setattr(tune_candidates.corpus_bench, "run", fake_run)
    monkeypatch.setattr(tune_candidates, "compile_ahead", lambda variants, say: None)
    lines = []
    found = tune_candidates.tune([], ["float16"], b_layout="col", progress=lines.append)
    assert calls == {"variants": candidates.timed(), "b_layout": "col", "torch": False, "with_default": True}
    assert lines[0].startswith("Fake GPU") and len(lines) == 3
    assert lines[1].endswith(f"{ROW} 20.0 µs, 1.50× the default's {BIG}, 1.00× cupy.matmul")
    assert lines[2].startswith("[float16 2/") and BIG in lines[2]
    assert [e["variant"] for e in found] == [ROW, BIG]
    assert tuning.lookup(DEVICE, "float16", None, "col", 32, 3584, 3584) == ROW
