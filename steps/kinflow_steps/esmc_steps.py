"""The ESM C 600M steps (EvolutionaryScale's ``esm``): methods A and K."""

from __future__ import annotations

import os

from kinflow_steps.base import PooledStep
from kinflow_steps.models import ESMC, FINAL, require_path


class ESMCStep(PooledStep):
    """A step over ESM C 600M (KINFLOW_ESMC_600M_PATH), padded batches at the family's
    precision and length spread (LENGTH_SPREAD)."""

    family = "esmc"

    def load(self) -> dict[str, str]:
        path = require_path("KINFLOW_ESMC_600M_PATH", what="the ESMC 600M weights esmc_600m_2024_12_v0.pth")
        self.model = ESMC(path, self.device, self.dtype)
        return {"model": os.path.basename(path)}


class MethodAESMCLayers(ESMCStep):
    """Method A: ESMC 600M layers 24 and 32, mean and binding-site-weighted."""

    key = "methoda_esmc_layers"
    spec = {
        "esmc_layer_24/mean_vecs": (24, "mean"),
        "esmc_layer_24/weighted_vecs": (24, "weighted"),
        "esmc_layer_32/mean_vecs": (32, "mean"),
        "esmc_layer_32/weighted_vecs": (32, "weighted"),
    }


class MethodKESMCMean(ESMCStep):
    """Method K: the mean over residues (BOS/EOS excluded) of ESM C 600M's final trunk
    embeddings (``ESMCOutput.embeddings``, after the final layer norm; not a hidden
    state), [1152] per sequence. The method's worker upper-cases the sequence before
    ``ESMProtein(sequence=...)``, so the model sees it upper-cased here too (methoda's
    ESM C step keeps case, as method A's code does)."""

    key = "methodk_esmc_mean"
    spec = {"methodk_esmc": (FINAL, "mean")}

    def fit(self, seq: str) -> str:
        return seq.upper()
