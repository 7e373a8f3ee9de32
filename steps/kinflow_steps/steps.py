"""The step keys: ``STEPS`` maps each active key to its step class.

The steps themselves live by model library (esm_steps, esmc_steps, t5_steps,
catpred_steps) over the base classes (base), the batch vocabulary (batch) and the
batch's file writer (writer); their public names are re-exported here, so
``kinflow_steps.steps`` names everything a caller of the step programs uses.
"""

from __future__ import annotations

from collections.abc import Callable

from kinflow_steps.base import (
    DEFAULT_BINDING_SITE_DIR,
    LENGTH_SPREAD,
    PooledStep,
    Step,
    binding_site_table,
    env_float,
    env_int,
    mean_vec,
    nonfinite_error,
    weight_norm,
    weighted_vec,
)
from kinflow_steps.batch import (
    LETTERS,
    SEQUENCE_INFO,
    Batch,
    Seq,
    family_of,
    pack,
    padding_report,
    parse_manifest,
    tokens_computed,
)
from kinflow_steps.catpred_steps import (
    CATPRED_AA,
    MethodEEmbed,
    MethodEEmbedKcat,
    MethodEEmbedKm,
    catpred_pool,
    offline_esm,
    trusted_roots_add,
)
from kinflow_steps.esm_steps import (
    ESM1V_HALF,
    ESM2_PATH,
    ESM_TOKENS,
    ESM_WINDOW,
    ESM2Step,
    MethodAESM2Layers,
    MethodDESM1b,
    MethodFESM1v,
    MethodGESM2,
    MethodHESM2LastMean,
)
from kinflow_steps.esmc_steps import ESMCStep, MethodAESMCLayers, MethodKESMCMean
from kinflow_steps.t5_steps import (
    PSEQ2SITES_MAX,
    T5_PATH,
    T5_WHAT,
    MethodAT5Full,
    MethodIProtT5Residues,
    ProtT5Mean,
    T5Step,
    run_predictor,
)
from kinflow_steps.writer import HostPart, Writer

__all__ = [
    "CATPRED_AA",
    "DEFAULT_BINDING_SITE_DIR",
    "ESM1V_HALF",
    "ESM2_PATH",
    "ESM_TOKENS",
    "ESM_WINDOW",
    "LENGTH_SPREAD",
    "LETTERS",
    "PSEQ2SITES_MAX",
    "SEQUENCE_INFO",
    "STEPS",
    "T5_PATH",
    "T5_WHAT",
    "Batch",
    "ESM2Step",
    "ESMCStep",
    "HostPart",
    "MethodAESM2Layers",
    "MethodAESMCLayers",
    "MethodAT5Full",
    "MethodDESM1b",
    "MethodEEmbed",
    "MethodEEmbedKcat",
    "MethodEEmbedKm",
    "MethodFESM1v",
    "MethodGESM2",
    "MethodHESM2LastMean",
    "MethodIProtT5Residues",
    "MethodKESMCMean",
    "PooledStep",
    "ProtT5Mean",
    "Seq",
    "Step",
    "T5Step",
    "Writer",
    "binding_site_table",
    "catpred_pool",
    "env_float",
    "env_int",
    "family_of",
    "mean_vec",
    "nonfinite_error",
    "offline_esm",
    "pack",
    "padding_report",
    "parse_manifest",
    "run_predictor",
    "tokens_computed",
    "trusted_roots_add",
    "weight_norm",
    "weighted_vec",
]

STEPS: dict[str, Callable[[], Step]] = {
    c.key: c
    for c in (
        ProtT5Mean,
        MethodAT5Full,
        MethodAESM2Layers,
        MethodAESMCLayers,
        MethodKESMCMean,
        MethodDESM1b,
        MethodFESM1v,
        MethodEEmbedKcat,
        MethodEEmbedKm,
        MethodGESM2,
        MethodHESM2LastMean,
        MethodIProtT5Residues,
    )
}
# Deprecated keys kinflow maps to methoda_t5_full, which covers binding sites and ProtT5.
STEPS["methoda_bindsites"] = MethodAT5Full
STEPS["methoda_prott5_layers"] = MethodAT5Full
