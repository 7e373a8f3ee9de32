"""A stand-in for EvolutionaryScale's ``esm`` package (ESM C), with the interface
kinflow_steps.models.ESMC uses: ``models.esmc.ESMC(d_model, n_heads, n_layers,
tokenizer, use_flash_attn)``, its ``_tokenize`` and a forward pass returning
``hidden_states`` [n_layers, B, L, D], and ``tokenization.get_esmc_model_tokenizers``.

The real package needs a newer torch than the Debian one the test venv uses, and its
top-level module name ``esm`` clashes with fair-esm's, so the tests run the ESMC step
on this stand-in (steps/README.md says so). The transformer itself is torch's own
``nn.TransformerEncoderLayer``; padding is masked as ESM C does (pad tokens)."""
