"""Stand-in of CatPred's ``catpred.data.esm_utils`` with the behaviour kinflow relies
on: ``init_esm`` loads ESM-2 650M through the torch hub (here it fails, as on an
offline host) and stores ``(model, batch_converter)`` in ``GLOBAL_VARIABLES['model']``;
``get_single_esm_repr`` calls ``init_esm`` through the module's globals, cuts the
tokens at 2,048 and returns layer 33 of residues ``1..len``."""

import torch

GLOBAL_VARIABLES = {"model": None, "tokenizer": None}
ESM_MAX_LENGTH = 2048


def init_esm():
    if GLOBAL_VARIABLES["model"] is None:
        raise RuntimeError("stand-in init_esm: ESM-2 would come from the torch hub (no network here)")


def get_single_esm_repr(protein_str):
    init_esm()
    model, batch_converter = GLOBAL_VARIABLES["model"]
    _, _, tokens = batch_converter([("protein", protein_str)])
    tokens = tokens[:, :ESM_MAX_LENGTH].to(next(model.parameters()).device)
    with torch.no_grad():
        out = model(tokens, repr_layers=[33])
    return out["representations"][33][0][1 : len(protein_str) + 1]
