"""The protocol: oom keeps the server up, a missing weights path never gets ready, an
unproven precision is refused at start, a non-finite output writes nothing, a bad
sequence is an error answer, one-shot exit codes, EOF, files left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from conftest import HERE, STEPS_ROOT, hidden_files, manifest, out_path
from test_fair_esm import rand_seq


def test_oom_answer_keeps_server_alive(server, media):
    fam = [("esm2_layer_last_mean", ".npy")]
    s = server("methodh_esm2_last_mean", KINFLOW_STEPS_FAKE_OOM_ABOVE="1")
    two = {"o1": rand_seq(10, 3), "o2": rand_seq(8, 4)}
    assert s.send(manifest("methodh_esm2_last_mean", media, two, fam, batch=1)) == {"batch": 1, "status": "oom"}
    assert not os.path.exists(out_path(media, "esm2_layer_last_mean", "o1"))
    # The host splits the batch: each half now fits.
    assert s.send(manifest("methodh_esm2_last_mean", media, {"o1": two["o1"]}, fam, batch=2))["status"] == "done"
    assert s.send(manifest("methodh_esm2_last_mean", media, {"o2": two["o2"]}, fam, batch=3))["status"] == "done"
    assert os.path.exists(out_path(media, "esm2_layer_last_mean", "o2"))
    assert hidden_files(media) == []


def test_bad_sequence_is_error_answer(server, media):
    fam = [("esm2_layer_last_mean", ".npy")]
    s = server("methodh_esm2_last_mean")
    ans = s.send(manifest("methodh_esm2_last_mean", media, {"b1": "MKV1J"}, fam, batch=4))
    assert ans["batch"] == 4 and ans["status"] == "error" and "b1" in ans["message"]
    s.proc.stdin.write("not json\n")
    s.proc.stdin.flush()
    assert s.read()["status"] == "error"
    bad_path = manifest("methodh_esm2_last_mean", media, {"b2": "MKV"}, fam, batch=5)
    bad_path["seqs"][0]["missing_outputs"] = ["/etc/b2.npy"]
    assert s.send(bad_path)["status"] == "error"
    assert s.send(manifest("methodh_esm2_last_mean", media, {"b3": "MKV"}, fam, batch=6)) == {
        "batch": 6,
        "status": "done",
    }


def test_existing_files_are_left_alone(server, media):
    fam = [("esm2_layer_last_mean", ".npy")]
    p = out_path(media, "esm2_layer_last_mean", "e1")
    os.makedirs(os.path.dirname(p))
    np.save(p, np.zeros(3, dtype=np.float32))
    s = server("methodh_esm2_last_mean")
    assert s.send(manifest("methodh_esm2_last_mean", media, {"e1": "MKV"}, fam))["status"] == "done"
    assert np.load(p).shape == (3,)


def run_program(args: list[str], env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess:
    full = dict(os.environ)
    full.update(env)
    full["PYTHONPATH"] = os.pathsep.join([STEPS_ROOT, HERE])
    return subprocess.run(
        [sys.executable, "-m", "kinflow_steps", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        timeout=300,
    )


def test_missing_weights_path_never_ready(tiny, tmp_path):
    for step, var in (
        ("methodh_esm2_last_mean", "KINFLOW_ESM2_650M_PATH"),
        ("prot_t5_mean", "KINFLOW_PROT_T5_PATH"),
        ("methoda_esmc_layers", "KINFLOW_ESMC_600M_PATH"),
        ("methodk_esmc_mean", "KINFLOW_ESMC_600M_PATH"),
        ("methodd_esm1b", "KINFLOW_METHODD_CHECKPOINT"),
        ("methode_embed_kcat", "KINFLOW_CATPRED_ROOT"),
    ):
        env = dict(tiny)
        env[var] = ""
        env["METHODA_T5_MODEL_PATH"] = ""
        r = run_program(["--step", step], env, stdin="{}\n")
        assert r.returncode == 2, (step, r.stderr)
        assert r.stdout == "", (step, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and var in lines[0] and "not set" in lines[0], (step, r.stderr)
    env = dict(tiny)
    env["KINFLOW_ESM2_650M_PATH"] = str(tmp_path / "absent.pt")
    r = run_program(["--step", "methodg_esm2"], env)
    assert r.returncode == 2 and "absent.pt" in r.stderr and r.stdout == ""
    r = run_program(["--step", "no_such_step"], dict(tiny))
    assert r.returncode == 2 and "unknown step" in r.stderr


def test_one_shot_exit_codes_and_eof(tiny, media, tmp_path):
    fam = [("esm2_layer_last_mean", ".npy")]
    mf = tmp_path / "manifest.json"
    mf.write_text(json.dumps(manifest("methodh_esm2_last_mean", media, {"x1": "MKV", "x2": "MKVL"}, fam)))
    env = dict(tiny, KINFLOW_STEPS_FAKE_OOM_ABOVE="1")
    r = run_program(["--step", "methodh_esm2_last_mean", "--manifest", str(mf)], env)
    assert r.returncode == 75 and "KINFLOW_OOM" in r.stderr
    r = run_program(["--step", "methodh_esm2_last_mean", "--manifest", str(mf)], dict(tiny))
    assert r.returncode == 0, r.stderr
    assert os.path.exists(out_path(media, "esm2_layer_last_mean", "x2"))
    r = run_program(["--step", "methodh_esm2_last_mean"], dict(tiny), stdin="")
    assert r.returncode == 0 and json.loads(r.stdout)["ready"] is True


def test_check_mode(tiny):
    r = run_program(["--step", "methoda_t5_full", "--check"], dict(tiny))
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["ok"] is True and rep["shapes"] == {"19": [22, 16], "last": [22, 16]}


def test_unproven_precision_refused_at_start(tiny):
    for step, want in (("methodh_esm2_last_mean", "esm2"), ("methodd_esm1b", "esm1b"), ("prot_t5_mean", "prot_t5")):
        r = run_program(
            ["--step", step], dict(tiny, KINFLOW_STEPS_DEVICE="cpu", KINFLOW_STEPS_PRECISION="fp16"), "{}\n"
        )
        assert r.returncode == 2 and r.stdout == "", (step, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "no equivalence proof" in lines[0] and want in lines[0], (step, r.stderr)
    r = run_program(["--step", "methodh_esm2_last_mean"], dict(tiny, KINFLOW_STEPS_PRECISION="fp8"))
    assert r.returncode == 2 and "want fp32, tf32, fp16 or bf16" in r.stderr
    # The proven precision, named explicitly, starts.
    r = run_program(
        ["--step", "methodh_esm2_last_mean"], dict(tiny, KINFLOW_STEPS_DEVICE="cpu", KINFLOW_STEPS_PRECISION="fp32")
    )
    assert r.returncode == 0 and json.loads(r.stdout)["ready"] is True, r.stderr


def nan_esm2(tiny: dict, out: str) -> str:
    """The tiny ESM-2 with a NaN embedding for tryptophan: a sequence holding W gets
    NaN everywhere, the others in its batch stay finite."""
    import argparse
    import shutil

    import esm
    import torch

    src = tiny["KINFLOW_ESM2_650M_PATH"]
    with torch.serialization.safe_globals([argparse.Namespace]):
        ck = torch.load(src, weights_only=True)
    w = esm.Alphabet.from_architecture("ESM-1b").get_idx("W")
    ck["model"]["encoder.embed_tokens.weight"][w] = float("nan")
    path = os.path.join(out, "esm2_t33_nan.pt")
    torch.save(ck, path)
    shutil.copy(src[:-3] + "-contact-regression.pt", path[:-3] + "-contact-regression.pt")
    return path


def test_nonfinite_output_writes_nothing(server, tiny, media, tmp_path):
    fam = [("esm2_layer_last_mean", ".npy")]
    s = server("methodh_esm2_last_mean", KINFLOW_ESM2_650M_PATH=nan_esm2(tiny, str(tmp_path)))
    seqs = {"fine": "MKVLAAGIVQ", "bad": "MKVWLAAG"}
    ans = s.send(manifest("methodh_esm2_last_mean", media, seqs, fam, batch=7))
    assert ans["status"] == "error" and "non-finite" in ans["message"], ans
    assert "bad" in ans["message"] and "fine" not in ans["message"], ans
    assert not os.path.exists(out_path(media, "esm2_layer_last_mean", "fine"))
    assert not os.path.exists(out_path(media, "esm2_layer_last_mean", "bad"))
    assert not os.path.exists(os.path.join(media, "sequence_info", "esm2_layer_last_mean", "manifest.json"))
    # Still serving; the finite sequence alone is written.
    assert s.send(manifest("methodh_esm2_last_mean", media, {"fine": seqs["fine"]}, fam, batch=8))["status"] == "done"
    assert np.isfinite(np.load(out_path(media, "esm2_layer_last_mean", "fine"))).all()


def test_weighted_vec_edge_rules():
    from kinflow_steps.cache_io import append_binding_sites, read_binding_sites, score_text
    from kinflow_steps.steps import mean_vec, weighted_vec

    res = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(weighted_vec(res, np.zeros(4)), mean_vec(res))
    np.testing.assert_array_equal(weighted_vec(res, np.array([-1.0, 0.5, 0.2, 0.1])), mean_vec(res))
    np.testing.assert_array_equal(weighted_vec(res, np.full(4, np.nan)), mean_vec(res))
    np.testing.assert_allclose(weighted_vec(res, np.array([np.nan, 1.0, np.nan, 1.0])), (res[1] + res[3]) / 2)
    # Rows keep the predictor's float32 values exactly (no 6-decimal rounding).
    vals = np.array([0.123456789, 1e-7, 0.5, np.nan], dtype=np.float32)
    assert score_text(vals[0]) == "0.12345679"
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "pseq2sites", "binding_sites_all.tsv")
        append_binding_sites(path, {"s1": vals.tolist()})
        back = read_binding_sites(path, {"s1"})["s1"]
    np.testing.assert_array_equal(back[:3].astype(np.float32), vals[:3])
    assert np.isnan(back[3])
