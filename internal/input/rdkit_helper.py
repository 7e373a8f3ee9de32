"""kinflow RDKit helper: line-delimited JSON over stdin/stdout.

Started by internal/input (Go) as a long-lived subprocess. The first line it
writes is {"ready": true, "rdkit": <version>, "inchi": <bool>}. Then, for
each request line {"id": n, "op": op, "items": [text, ...]} it writes one
response line {"id": n, "results": [{"ok": bool, "value": text|null}, ...]}.

ops (WIRE-CONTRACT 4.5):
  check      convert_to_mol(text) is not None
  canonical  RDKit canonical SMILES (InChI converted)
  smiles     the raw text if it parses as SMILES, else a non-canonical SMILES
             from the InChI
  inchi      standard InChI
"""
import json
import sys

try:
    from rdkit import Chem, RDLogger, rdBase
except Exception as exc:  # rdkit missing: tell the parent and stop
    sys.stdout.write(json.dumps({"ready": False, "error": repr(exc)}) + "\n")
    sys.stdout.flush()
    sys.exit(3)

RDLogger.DisableLog("rdApp.*")

try:
    from rdkit.Chem import inchi as _inchi
    HAS_INCHI = bool(getattr(_inchi, "INCHI_AVAILABLE", False)) and hasattr(Chem, "MolFromInchi")
except Exception:
    HAS_INCHI = False

INVALID = {"", "None", "NaN", "nan"}


def from_smiles(text):
    try:
        return Chem.MolFromSmiles(text)
    except Exception:
        return None


def from_inchi(text):
    if not HAS_INCHI:
        return None
    try:
        return Chem.MolFromInchi(text)
    except Exception:
        return None


def convert_to_mol(text):
    t = text.strip()
    if t in INVALID:
        return None, False
    m = from_smiles(t)
    if m is not None:
        return m, True
    return from_inchi(t), False


def one(op, text):
    if not isinstance(text, str):
        return {"ok": False, "value": None}
    m, was_smiles = convert_to_mol(text)
    if m is None:
        return {"ok": False, "value": None}
    try:
        if op == "check":
            return {"ok": True, "value": None}
        if op == "canonical":
            return {"ok": True, "value": Chem.MolToSmiles(m)}
        if op == "smiles":
            if was_smiles:
                return {"ok": True, "value": text.strip()}
            return {"ok": True, "value": Chem.MolToSmiles(m, canonical=False)}
        if op == "inchi":
            if not HAS_INCHI:
                return {"ok": False, "value": None, "error": "InChI support is not built into this RDKit"}
            return {"ok": True, "value": Chem.MolToInchi(m)}
    except Exception as exc:
        return {"ok": False, "value": None, "error": str(exc)}
    return {"ok": False, "value": None, "error": "unknown op " + str(op)}


def main():
    out = sys.stdout
    out.write(json.dumps({"ready": True, "rdkit": rdBase.rdkitVersion, "inchi": HAS_INCHI}) + "\n")
    out.flush()
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            items = req.get("items") or []
            resp = {"id": req.get("id"), "results": [one(op, t) for t in items]}
        except Exception as exc:
            resp = {"id": None, "error": str(exc)}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
