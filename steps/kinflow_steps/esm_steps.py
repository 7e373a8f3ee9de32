"""The fair-esm steps: ESM-2 650M (methods A, G and H), ESM-1v (method F) and ESM-1b
with method D's fine-tuned weights."""

from __future__ import annotations

import os

import numpy as np

from kinflow_steps import cache_io
from kinflow_steps.base import PooledStep, Step, nonfinite_error
from kinflow_steps.batch import Batch, Seq
from kinflow_steps.models import LAST, FairESM, esm2_path, require_path
from kinflow_steps.writer import HostPart, Writer

# ESM windows: 1,024 tokens with BOS/EOS, so 1,022 residues.
ESM_WINDOW = 1022
#: The token-matrix width the reference's method G and H workers cut to.
ESM_TOKENS = 1024
# Method F's rule for longer sequences (the reference's ESM-1v worker): first 500 + last 500.
ESM1V_HALF = 500


ESM2_PATH = ("KINFLOW_ESM2_650M_PATH",)


class ESM2Step(PooledStep):
    family = "esm2"
    what = "the ESM-2 650M checkpoint esm2_t33_650M_UR50D.pt (fair-esm format, contact-regression file beside it)"

    def load(self) -> dict[str, str]:
        path = require_path(*ESM2_PATH, what=self.what)
        self.model = FairESM(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}

    def precision_note(self) -> str:
        return esm2_path(self.dtype)


class MethodHESM2LastMean(ESM2Step):
    """Method H: layer-33 (last) mean of ESM-2 650M over the residues the method's own
    worker keeps: its token matrix cut to 1,024 columns (BOS and the first 1,023
    residues, no EOS, for a longer sequence; docs/method-cuts.md)."""

    key = "methodh_esm2_last_mean"
    spec = {"esm2_layer_last_mean": (LAST, "mean")}
    max_tokens = ESM_TOKENS


class MethodGESM2(ESM2Step):
    """Method G: the layer-33 per-residue tensor [L, 1280] as torch.save float32, the
    token matrix cut to 1,024 columns as the method's own worker does: at most 1,023
    rows, no EOS for a longer sequence (kinflow's Family.Rows; docs/method-cuts.md)."""

    key = "methodg_esm2"
    spec = {"methodg_esm2": (LAST, "residue_pt")}
    max_tokens = ESM_TOKENS


class MethodAESM2Layers(ESM2Step):
    """Method A: layers 26 and 29, mean and binding-site-weighted (no truncation, as
    the reference)."""

    key = "methoda_esm2_layers"
    spec = {
        "esm2_layer_26/mean_vecs": (26, "mean"),
        "esm2_layer_26/weighted_vecs": (26, "weighted"),
        "esm2_layer_29/mean_vecs": (29, "mean"),
        "esm2_layer_29/weighted_vecs": (29, "weighted"),
    }


# --- ESM-1v / ESM-1b (fair-esm) --------------------------------------------------


class MethodFESM1v(PooledStep):
    """Method F: ESM-1v layer-33 per-residue matrix, BOS/EOS removed; a sequence over
    1,022 residues becomes its first 500 + last 500 (the host normally did that)."""

    key = "methodf_esm1v"
    family = "esm1v"
    spec = {"esm1v": (LAST, "residue_npy")}

    def fit(self, seq: str) -> str:
        return seq if len(seq) <= ESM_WINDOW else seq[:ESM1V_HALF] + seq[-ESM1V_HALF:]

    def load(self) -> dict[str, str]:
        path = require_path(
            "KINFLOW_ESM1V_PATH", "METHODF_MODEL_PATH", what="the ESM-1v checkpoint esm1v_t33_650M_UR90S_1.pt"
        )
        self.model = FairESM(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}


class MethodDESM1b(Step):
    """Method D (TurNup): ESM-1b with the method's fine-tuned weights loaded over it
    (keys lose their ``model.`` prefix; the ``fc1..fc3`` head is dropped), the layer-33
    BOS/CLS vector [1280], sequence cut to its first 1,022 residues."""

    key = "methodd_esm1b"
    families = ("esm1b_methodd",)
    family = "esm1b"

    def load(self) -> dict[str, str]:
        import torch

        base = require_path("KINFLOW_ESM1B_PATH", what="the ESM-1b checkpoint esm1b_t33_650M_UR50S.pt")
        tuned = require_path(
            "KINFLOW_METHODD_CHECKPOINT",
            what="method D's fine-tuned ESM-1b weights (model_ESM_binary_A100_epoch_1_new_split.pkl)",
        )
        raw = torch.load(tuned, map_location="cpu")
        if isinstance(raw, dict) and "model" in raw and isinstance(raw["model"], dict):
            raw = raw["model"]
        state = {k.split("model.")[-1]: v for k, v in raw.items()}
        for k in [
            k for k in state if k.startswith(("module.fc1.", "module.fc2.", "module.fc3.", "fc1.", "fc2.", "fc3."))
        ]:
            del state[k]
        self.model = FairESM(base, self.device, self.dtype, state_dict=state)
        return {"model": os.path.basename(base) + "+" + os.path.basename(tuned)}

    def fit(self, seq: str) -> str:
        return seq[:ESM_WINDOW]

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart:
        """The BOS/CLS rows alone cross to the host ([B, 1280] per pass)."""
        import torch

        from kinflow_steps.device import Transfer

        reps = self.model.embed_device([self.fit(s.sequence) for s, _ in group], [LAST])
        with torch.inference_mode():
            copy = Transfer({"cls": reps.cls_rows(LAST).contiguous()})
        del reps

        def host(w: Writer) -> None:
            cls = copy.wait()["cls"]
            nonfinite_error([s.seq_id for i, (s, _) in enumerate(group) if not np.isfinite(cls[i]).all()], self.key)
            for row, (s, want) in enumerate(group):
                w.put(want["esm1b_methodd"], s.seq_id, cache_io.npy_bytes(cls[row]))

        return host
