"""Method E's steps: CatPred's pooled sequence representations over ESM-2 650M
features, one file per checkpoint."""

from __future__ import annotations

import os
import sys
from typing import Any

from kinflow_steps import cache_io
from kinflow_steps.base import Step
from kinflow_steps.batch import Batch, Seq
from kinflow_steps.errors import BatchError, ConfigError, NonFiniteError
from kinflow_steps.esm_steps import ESM2_PATH, ESM2Step
from kinflow_steps.models import FairESM, require_path
from kinflow_steps.writer import Writer


class MethodEEmbed(Step):
    """Method E: per checkpoint, CatPred's sequence encoder and attentive pooling over
    its ESM-2 features -> methode_esm2/<parameter>/<grandparent>__<parent>/<sid>.pt.
    Needs the method's own package (``catpred``: ``catpred.utils.load_checkpoint``,
    ``catpred.data.esm_utils.get_single_esm_repr``) from KINFLOW_CATPRED_ROOT and the
    checkpoints under METHODE_CHECKPOINT_ROOT/<parameter>/.

    Offline: CatPred's ``init_esm`` fetches ESM-2 650M through the torch hub; here the
    model comes from KINFLOW_ESM2_650M_PATH (fair-esm's local loader, fp32 as CatPred
    runs it) and is handed to ``esm_utils`` before its first use. CatPred refuses to
    unpickle checkpoints outside CATPRED_TRUSTED_DESERIALIZATION_ROOTS; the step adds
    METHODE_CHECKPOINT_ROOT to it, as the reference deployment sets it."""

    parameter = ""
    family = "catpred"

    def owns(self, fam: str) -> bool:
        parts = fam.split("/")
        return len(parts) == 3 and parts[0] == "methode_esm2" and parts[1] == self.parameter

    def load(self) -> dict[str, str]:
        import importlib

        import torch

        src = require_path(
            "KINFLOW_CATPRED_ROOT", what="method E's source tree (the folder holding catpred/)", is_dir=True
        )
        root = require_path("METHODE_CHECKPOINT_ROOT", what="method E's checkpoints", is_dir=True)
        esm2 = require_path(*ESM2_PATH, what="ESM-2 650M for method E's features (" + ESM2Step.what + ")")
        trusted_roots_add(root)
        if self.device.type == "cpu":
            os.environ["PROTEIN_EMBED_USE_CPU"] = "1"  # read by esm_utils at import
        if src not in sys.path:
            sys.path.insert(0, src)
        try:
            self.utils = importlib.import_module("catpred.utils")
            self.esm_utils = importlib.import_module("catpred.data.esm_utils")
        except ImportError as exc:
            raise ConfigError(f"method E's package catpred cannot be imported from {src}: {exc}") from exc
        offline_esm(self.esm_utils, FairESM(esm2, self.device, torch.float32, unpadded=False))
        self.torch = torch
        self.checkpoints: dict[str, str] = {}
        base = os.path.join(root, self.parameter)
        for dirpath, _, files in sorted(os.walk(base)):
            if "model.pt" in files:
                parent = os.path.basename(dirpath)
                key = f"{os.path.basename(os.path.dirname(dirpath))}__{parent}"
                if key in self.checkpoints:
                    raise ConfigError(f"duplicate method E checkpoint key {key} under {base}")
                self.checkpoints[key] = os.path.join(dirpath, "model.pt")
        if not self.checkpoints:
            raise ConfigError(f"no model.pt under {base} (METHODE_CHECKPOINT_ROOT)")
        self.models: dict[str, Any] = {}
        for key, path in sorted(self.checkpoints.items()):
            m = self.utils.load_checkpoint(path, device=self.device)
            m.eval()
            self.models[key] = m
        return {"model": f"catpred {self.parameter} x{len(self.models)}"}

    def refuse(self, seq: str) -> str | None:
        """CatPred indexes residues with its 20-letter table (``_AA_TO_INDEX``) after
        fair-esm's encoder: any other letter (lower case, X, B, U, Z, O, J) fails the
        method's own code, so such a sequence gets no file."""
        bad = sorted(set(seq) - set(CATPRED_AA))
        if bad:
            return f"residue(s) {''.join(bad)} outside CatPred's 20-letter index, on which the method's own code fails"
        return None

    def produce(self, b: Batch, group: list[tuple[Seq, dict[str, str]]], w: Writer) -> None:
        torch = self.torch
        for s, want in group:
            feats = self.esm_utils.get_single_esm_repr(s.sequence).float().cpu()
            if not torch.isfinite(feats).all():
                raise NonFiniteError(f"non-finite values in method E's ESM-2 features of seq {s.seq_id}")
            for fam, path in sorted(want.items()):
                key = fam.split("/")[2]
                model = self.models.get(key)
                if model is None:
                    raise BatchError(f"seq {s.seq_id}: no method E checkpoint {key} on this host")
                with torch.no_grad():
                    pooled = catpred_pool(model, s.sequence, s.seq_id, feats, self.device)
                if not torch.isfinite(pooled).all():
                    raise NonFiniteError(f"non-finite values in {self.key} ({key}) of seq {s.seq_id}")
                w.put(path, s.seq_id, cache_io.pt_bytes(pooled))


def trusted_roots_add(root: str) -> None:
    """Add root to CATPRED_TRUSTED_DESERIALIZATION_ROOTS (os.pathsep-separated), the
    folders CatPred unpickles checkpoints from (catpred/security/deserialization.py)."""
    name = "CATPRED_TRUSTED_DESERIALIZATION_ROOTS"
    have = [p for p in os.environ.get(name, "").split(os.pathsep) if p.strip()]
    if os.path.abspath(root) not in {os.path.abspath(p) for p in have}:
        have.append(os.path.abspath(root))
    os.environ[name] = os.pathsep.join(have)


def offline_esm(esm_utils: Any, model: FairESM) -> None:
    """Give CatPred's esm_utils the locally loaded ESM-2 (its ``GLOBAL_VARIABLES['model']``
    = (model, batch converter), what ``init_esm`` stores) and make ``init_esm`` a no-op,
    so ``get_single_esm_repr`` never reaches the torch hub."""
    esm_utils.GLOBAL_VARIABLES["model"] = (model.model, model.converter)
    esm_utils.init_esm = lambda: None


# CatPred's residue index (catpred_embed_gpu.py).
CATPRED_AA = {a: i for i, a in enumerate("ARNDCQEGHILKMFPSTWYV")}


def catpred_pool(model: Any, sequence: str, seq_id: str, esm_feature: Any, device: Any) -> Any:
    """CatPred's pooled sequence representation, the steps its GPU script documents:
    seq_embedder -> rotary queries/keys -> multi-head attention -> optional ESM
    concatenation -> attentive pooling (or mean) -> optional EGNN features."""
    import torch

    try:
        idx = [CATPRED_AA[a] for a in sequence]
    except KeyError as exc:
        raise BatchError(f"seq {seq_id}: residue {exc.args[0]} has no CatPred index") from exc
    seq_arr = torch.as_tensor(idx, device=device, dtype=torch.long).unsqueeze(0)
    feats = esm_feature.to(device).unsqueeze(0)
    n = min(seq_arr.shape[1], feats.shape[1])
    seq_arr, feats = seq_arr[:, :n], feats[:, :n]
    outs = model.seq_embedder(seq_arr)
    q = k = model.rotary_embedder.rotate_queries_or_keys(outs, seq_dim=1)
    outs, _ = model.multihead_attn(q, k, outs)
    if model.args.add_esm_feats:
        outs = torch.cat([feats, outs], dim=-1)
    if not model.args.skip_attentive_pooling:
        pooled, _ = model.attentive_pooler(outs)
    else:
        pooled = outs.mean(dim=1)
    if getattr(model.args, "add_pretrained_egnn_feats", False):
        table = model.pretrained_egnn_feats_dict
        extra = table[seq_id] if seq_id in table else model.pretrained_egnn_feats_avg
        pooled = torch.cat([pooled, extra.to(device).unsqueeze(0)], dim=-1)
    return pooled.squeeze(0).detach().cpu()


class MethodEEmbedKcat(MethodEEmbed):
    key = "methode_embed_kcat"
    parameter = "kcat"


class MethodEEmbedKm(MethodEEmbed):
    key = "methode_embed_km"
    parameter = "km"
