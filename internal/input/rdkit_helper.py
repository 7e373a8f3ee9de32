"""kinflow RDKit helper: line-delimited JSON over stdin/stdout.

Started by internal/input (Go) as a long-lived subprocess. The first line it
writes is {"ready": true, "rdkit": <version>, "inchi": <bool>,
"inchi_via": "rdkit"|"openbabel"|""}. Then, for each request line
{"id": n, "op": op, "items": [text, ...]} it writes one response line
{"id": n, "results": [{"ok": bool, "value": text|null}, ...]}. An exception
on one item makes that item {"ok": false}; it never stops the helper.

The first argument, when given, is a memory limit in MiB: once the helper's
peak resident memory passes it, a response also carries "restart": true and
the parent replaces the helper (Open Babel 3.1.1 leaks about 30 KB for every
InChI it cannot read).

InChI ("inchi" true) comes from RDKit's own InChI support when the build has
it ("inchi_via": "rdkit"). Debian's python3-rdkit lacks it; then Open Babel
(Debian's python3-openbabel), when importable, reads and writes InChI
("inchi_via": "openbabel"): InChI -> Open Babel -> Kekule SMILES -> RDKit
MolFromSmiles (so RDKit still sanitises; no atoms means invalid), and
mol -> RDKit SMILES -> Open Babel -> standard InChI. With neither, "inchi" is
false, InChI texts are invalid here and the Go side keeps its shape check.

ops (the reference's chemistry rules, docs/input.md):
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

# Open Babel as the InChI reader and writer when RDKit has no InChI.
pybel = None
if not HAS_INCHI:
    try:
        from openbabel import openbabel as _ob, pybel as _pybel

        if "inchi" in _pybel.informats and "inchi" in _pybel.outformats:
            # Its InChI errors and warnings ("*** Open Babel Error in InChI
            # code") would otherwise go to stderr for every bad text.
            _ob.obErrorLog.StopLogging()
            pybel = _pybel
    except Exception:
        pybel = None

if HAS_INCHI:
    INCHI_VIA = "rdkit"
elif pybel is not None:
    INCHI_VIA = "openbabel"
else:
    INCHI_VIA = ""

INVALID = {"", "None", "NaN", "nan"}
INCHI_PREFIX = "InChI=1S/"


def from_smiles(text):
    try:
        return Chem.MolFromSmiles(text)
    except Exception:
        return None


def nonempty(m):
    if m is None or m.GetNumAtoms() == 0:
        return None
    return m


def from_inchi(text):
    try:
        if HAS_INCHI:
            return Chem.MolFromInchi(text)
        # Open Babel finds an "InChI=" anywhere in its input and ignores
        # what follows the first InChI: only a whole, single InChI is read.
        if pybel is None or not text.startswith("InChI=") or len(text.split()) != 1:
            return None
        # Kekule SMILES: Open Babel's bond orders as they are, so RDKit does
        # not have to kekulise Open Babel's aromaticity.
        words = pybel.readstring("inchi", text).write("smi", opt={"k": None}).split()
        if not words:
            return None
        return nonempty(from_smiles(words[0]))
    except Exception:  # Open Babel raises OSError for an unreadable InChI
        return None


def to_inchi(m):
    """Standard InChI of m, or None."""
    if HAS_INCHI:
        value = Chem.MolToInchi(m)
    elif pybel is not None:
        try:
            k = Chem.Mol(m)
            Chem.Kekulize(k, clearAromaticFlags=True)
            smi = Chem.MolToSmiles(k, kekuleSmiles=True)
        except Exception:
            smi = Chem.MolToSmiles(m)
        value = pybel.readstring("smi", smi).write("inchi")
    else:
        return None
    value = (value or "").strip()
    if not value.startswith(INCHI_PREFIX):
        return None
    return value.split()[0]


def convert_to_mol(text):
    t = text.strip()
    if t in INVALID:
        return None, False
    m = from_smiles(t)
    if m is not None:
        return m, True
    return from_inchi(t), False


def one(op, text):
    try:
        return one_unguarded(op, text)
    except Exception as exc:
        return {"ok": False, "value": None, "error": str(exc)}


def one_unguarded(op, text):
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
            if not INCHI_VIA:
                return {"ok": False, "value": None, "error": "no InChI support: RDKit lacks it and Open Babel is not installed"}
            value = to_inchi(m)
            if value is None:
                return {"ok": False, "value": None, "error": "no standard InChI for this molecule"}
            return {"ok": True, "value": value}
    except Exception as exc:
        return {"ok": False, "value": None, "error": str(exc)}
    return {"ok": False, "value": None, "error": "unknown op " + str(op)}


def max_rss_kib():
    try:
        return int(sys.argv[1]) * 1024
    except Exception:
        return 0


def over_limit(limit_kib):
    if limit_kib <= 0:
        return False
    try:  # ru_maxrss is in KiB on Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > limit_kib
    except Exception:
        return False


def main():
    out = sys.stdout
    limit_kib = max_rss_kib()
    out.write(json.dumps({"ready": True, "rdkit": rdBase.rdkitVersion, "inchi": bool(INCHI_VIA), "inchi_via": INCHI_VIA}) + "\n")
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
            if over_limit(limit_kib):
                resp["restart"] = True
        except Exception as exc:
            resp = {"id": None, "error": str(exc)}
        out.write(json.dumps(resp) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
