import json

from cupy_gemm.cli import main


def test_list_json(capsys):
    assert main(["list", "--json", "--family", "naive"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"] for r in rows} >= {"sgemm_naive_f32"} and all(r["family"] == "naive" for r in rows)


def test_show_with_override(capsys):
    assert main(["show", "sgemm_sliced_k_f32", "--set", "BK=16", "--shape", "100x200x300"]) == 0
    out = capsys.readouterr().out
    assert "BK=16" in out and "grid (28, 1, 1)" in out and "gemm_kernel" in out


def test_show_bad_parameter(capsys):
    assert main(["show", "sgemm_sliced_k_f32", "--set", "BK=0", "--no-source"]) == 2
    assert "BK=0" in capsys.readouterr().out


def test_compile_and_unknown(capsys):
    assert main(["compile", "sgemm_naive_f32", "--arch", "sm_80"]) == 0
    assert "all compiled" in capsys.readouterr().out
    assert main(["compile", "sgemm_naiv_f32"]) == 2
    assert "did you mean" in capsys.readouterr().out
