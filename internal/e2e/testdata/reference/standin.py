"""A stand-in for the reference deployment's method programs, written from
their contracts (what the reference's engine hands each program and what it
reads back), not from their code.

`--as NAME` picks the program. Each one, as its original does:
  * reads the environment variables its original reads, and exits non-zero
    naming the first one that is unset (the originals crash or fall back to
    their authors' home folders);
  * reads its rows in its file contract (JSON with `substrates` and, where
    the reference's engine attaches it, `seq_id`; the substrate CSV; the
    reaction CSV; DLKcat's TSV);
  * finds each sequence's id as its original does: from the row's `seq_id`,
    or by looking the sequence up in MEDIA/sequence_info/seqmap.sqlite3;
  * opens the cached embedding its original reads, under the reference's
    folder name, and fails the row when it is absent;
  * deletes the files it read where its original does (IECata always,
    OmniESI and EITLEM unless told not to);
  * answers in its original's form: a value in the column's unit, RealKcat a
    class index, IECata log10 of kcat/Km per (s*M).
Each value is a function of the sequence's length, so a test can tell which
row a number belongs to. Every run appends what it saw to $STANDIN_LOG.
"""

import csv
import json
import os
import sqlite3
import sys
import zipfile

import numpy as np

MULT = {"CataPro": 1.5, "UniKP": 2.5, "TurNup": 3.5, "EITLEM": 4.5, "MMISA-KM": 0.25, "DLKcat": 5.5, "OmniESI": 6.5, "OmniESI-O2DENet": 7.5}

# CatRange's class edges (kcat in s^-1, Km in M) and their midpoints, the
# geometric mean of a class's edges (the arithmetic one for a class from 0).
EDGES = {"KCAT": (0.0, 1e-8, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0, 1e8), "KM": (1e-14, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e4)}


def midpoints(kind):
    e = EDGES[kind]
    return [(lo * hi) ** 0.5 if lo > 0 else (lo + hi) / 2.0 for lo, hi in zip(e, e[1:])]

# name: (contract, environment read, how ids are found, where the embedding is)
SPEC = {
    "CataPro": ("json", ["CATAPRO_MEDIA_PATH", "CATAPRO_TOOLS_PATH", "CATAPRO_MODEL_ROOT"], "seqmap", ("CATAPRO_MEDIA_PATH", "prot_t5_last/mean_vecs", ".npy")),
    "UniKP": ("substrate_csv", ["UNIKP_MEDIA_PATH", "UNIKP_TOOLS_PATH"], "seqmap", ("UNIKP_MEDIA_PATH", "prot_t5_last/mean_vecs", ".npy")),
    "TurNup": ("reaction_csv", ["TURNUP_MEDIA_PATH", "TURNUP_TOOLS_PATH"], "seqmap", ("TURNUP_MEDIA_PATH", "esm1b_turnup", ".npy")),
    "EITLEM": ("substrate_csv", ["EITLEM_MEDIA_PATH", "EITLEM_TOOLS_PATH"], "seqmap", ("EITLEM_MEDIA_PATH", "esm1v", ".npy")),
    "OmniESI": ("json", ["OMNIESI_EMBED_CACHE_DIR", "OmniESI_CACHE_DIR", "OmniESI_ADDITIONAL_DATA"], "seq_id", ("OMNIESI_EMBED_CACHE_DIR", "", ".pt")),
    "OmniESI-O2DENet": ("json", ["OMNIESI_EMBED_CACHE_DIR", "OmniESI_CACHE_DIR", "OmniESI_ADDITIONAL_DATA"], "seq_id", ("OMNIESI_EMBED_CACHE_DIR", "", ".pt")),
    "CatRange": ("json", ["CATRANGE_REPO_ROOT", "CATRANGE_MODELS_DIR", "CATRANGE_MEDIA_DIR"], "seq_id", ("CATRANGE_MEDIA_DIR", "catrange_esmc", ".npy")),
    "RealKcat": ("json", ["REALKCAT_DATA", "REALKCAT_EMBED_CACHE_DIR"], "seq_id", ("REALKCAT_EMBED_CACHE_DIR", "", ".npy")),
    "IECata": ("json", ["IECATA_DATA", "IECATA_EMBED_DIR"], "seq_id", ("IECATA_EMBED_DIR", "", ".npy")),
    "MMISA-KM": ("json", [], None, None),
    "DLKcat": ("tsv", ["DLKCAT_DATA_PATH", "DLKCAT_RESULTS_PATH"], None, None),
}


def main(argv):
    name = argv[argv.index("--as") + 1]
    rest = [a for i, a in enumerate(argv) if a != "--as" and (i == 0 or argv[i - 1] != "--as")]
    contract, env, ids, emb = SPEC[name]
    for var in env:
        if not os.environ.get(var):
            sys.exit("%s: %s is not set" % (name, var))
    params, target = {}, None
    if contract == "json":
        inp, out = rest[rest.index("--input") + 1], rest[rest.index("--output") + 1]
        job = json.load(open(inp))
        params, target = job.get("params", {}), job.get("target")
        rows = job["rows"]
        for r in rows:
            if "substrates" not in r:
                sys.exit("%s: row without 'substrates': %s" % (name, sorted(r)))
            if ids == "seq_id" and not r.get("seq_id"):
                sys.exit("%s: row without 'seq_id'" % name)
    elif contract == "tsv":
        inp, out = rest[0], rest[1]
        lines = open(inp).read().splitlines()
        assert lines[0] == "Substrate Name\tSubstrate SMILES\tProtein Sequence", lines[0]
        rows = [{"sequence": l.split("\t")[2], "substrates": l.split("\t")[1]} for l in lines[1:]]
    else:
        inp, out = rest[0], rest[1]
        rows = [{"sequence": r["Protein Sequence"], "substrates": r.get("Substrate SMILES") or r.get("Substrates")} for r in csv.DictReader(open(inp))]
        if contract == "substrate_csv":
            target = rest[2]

    seqmap = {}
    if ids == "seqmap":
        db = os.path.join(os.environ[emb[0]], "sequence_info", "seqmap.sqlite3")
        if not os.path.exists(db):
            sys.exit("%s: seqmap DB not found" % name)
        con = sqlite3.connect(db)
        seqmap = dict(con.execute("SELECT seq, id FROM sequences"))
        con.close()

    omni_deletes = os.environ.get("OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN") != "0" and params.get("cleanup_embeddings_after_run", True) is not False
    deletes = {"IECata": True, "OmniESI": omni_deletes, "OmniESI-O2DENet": omni_deletes,
               "EITLEM": os.environ.get("EITLEM_DELETE_EMBEDDINGS_AFTER_RUN") != "0"}.get(name, False)
    preds, reasons, read = [], {}, []
    for i, r in enumerate(rows):
        seq = r["sequence"]
        if emb is not None:
            sid = r.get("seq_id") if ids == "seq_id" else seqmap.get(seq)
            if not sid:
                preds.append(None)
                reasons[str(i)] = "no id for the sequence"
                continue
            base = os.environ[emb[0]]
            folder = os.path.join(base, "sequence_info", emb[1]) if emb[1] else base
            path = os.path.join(folder, sid + emb[2])
            if not os.path.exists(path):
                preds.append(None)
                reasons[str(i)] = "no embedding at %s" % os.path.relpath(path, base)
                continue
            if emb[2] == ".npy":
                assert np.load(path).size > 0
            else:
                assert zipfile.is_zipfile(path), path
            read.append(path)
        n = len(seq)
        if name == "RealKcat":
            preds.append(n % 3)
        elif name == "IECata":
            preds.append(1.0 + n / 10.0)
        elif name == "CatRange":
            mids = midpoints(params["kinetics_type"])
            preds.append(mids[n % len(mids)])
        else:
            preds.append(n * MULT[name])
    deleted = 0
    if deletes:
        for p in read:
            if os.path.lexists(p):
                os.remove(p)
                deleted += 1

    if contract == "json":
        json.dump({"predictions": preds, "invalid_indices": [int(k) for k in reasons], "invalid_reasons": reasons}, open(out, "w"))
    elif contract == "tsv":
        with open(out, "w") as f:
            f.write("Substrate Name\tSubstrate SMILES\tProtein Sequence\tKcat value (1/s)\n")
            for r, v in zip(rows, preds):
                f.write("noname\t%s\t%s\t%s\n" % (r["substrates"], r["sequence"], "" if v is None else repr(v)))
    else:
        col = "kcat [s^(-1)]" if contract == "reaction_csv" else "Predicted Value"
        with open(out, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow([col])
            for v in preds:
                w.writerow(["" if v is None else repr(v)])
    log = os.environ.get("STANDIN_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"method": name, "target": target, "rows": len(rows), "read": len(read), "deleted": deleted,
                                "row_keys": sorted(rows[0]) if rows else [], "params": params}) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
