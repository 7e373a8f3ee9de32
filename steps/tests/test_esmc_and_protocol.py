"""The ESMC step (on the stand-in of EvolutionaryScale's interface) and the protocol:
oom keeps the server up, a missing weights path never gets ready, a bad sequence is
an error answer, one-shot exit codes, EOF, files left alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from conftest import HERE, STEPS_ROOT, hidden_files, manifest, out_path
from test_fair_esm import rand_seq, write_table

TOL = dict(rtol=1e-4, atol=1e-5)


def esmc_hidden(path: str, seq: str, layer: int) -> np.ndarray:
    import torch
    from kinflow_esmc_standin.models.esmc import ESMC
    from kinflow_esmc_standin.tokenization import get_esmc_model_tokenizers

    m = ESMC(d_model=32, n_heads=2, n_layers=36, tokenizer=get_esmc_model_tokenizers())
    m.load_state_dict(torch.load(path))
    m.eval()
    with torch.no_grad():
        out = m(sequence_tokens=m._tokenize([seq]))
    return out.hidden_states[layer][0, 1:-1].numpy()


def test_methoda_esmc_layers(server, tiny, media):
    seqs = {"c1": rand_seq(21, 1), "c2": rand_seq(6, 2)}
    rng = np.random.default_rng(2)
    weights = {sid: np.round(rng.random(len(seq)), 6) for sid, seq in seqs.items()}
    write_table(media, weights)
    fams = [(f"esmc_layer_{n}/{k}", ".npy") for n in (24, 32) for k in ("mean_vecs", "weighted_vecs")]
    s = server("methoda_esmc_layers")
    assert s.send(manifest("methoda_esmc_layers", media, seqs, fams))["status"] == "done"
    for sid, seq in seqs.items():
        for layer in (24, 32):
            res = esmc_hidden(tiny["KINFLOW_ESMC_600M_PATH"], seq, layer)
            assert res.shape == (len(seq), 32)
            mean = np.load(out_path(media, f"esmc_layer_{layer}/mean_vecs", sid))
            wv = np.load(out_path(media, f"esmc_layer_{layer}/weighted_vecs", sid))
            np.testing.assert_allclose(mean, res.mean(0), **TOL)
            w = weights[sid] / weights[sid].sum()
            np.testing.assert_allclose(wv, (res * w[:, None]).sum(0), **TOL)


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
