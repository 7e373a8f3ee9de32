"""A stand-in for CatPred's package (method E), with the names kinflow_steps uses:
``utils.load_checkpoint(path, device)`` returning a model with ``seq_embedder``,
``rotary_embedder.rotate_queries_or_keys``, ``multihead_attn``, ``attentive_pooler``
and ``args``, and ``data.esm_utils.get_single_esm_repr(sequence)``. CatPred's real
source is not available to the tests (steps/README.md, "Method E")."""
