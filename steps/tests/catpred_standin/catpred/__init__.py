"""A stand-in for CatPred's package (method E), with the names kinflow_steps uses:
``utils.load_checkpoint(path, device)`` returning a model with ``seq_embedder``,
``rotary_embedder.rotate_queries_or_keys``, ``multihead_attn``, ``attentive_pooler``
and ``args``, and ``data.esm_utils`` (``GLOBAL_VARIABLES``, ``init_esm``,
``get_single_esm_repr``). CatPred's real source is public (the reference's
``models/CatPred/``) but is not vendored here; the stand-in is written from its
documented behaviour (steps/README.md, "Method E")."""
