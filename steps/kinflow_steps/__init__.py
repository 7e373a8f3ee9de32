"""kinflow's GPU step programs: real embedding artefacts from the field's model libraries.

One program, ``python -m kinflow_steps --step KEY``, serves every active step key
(SEED-SPEC §5.3) with the resident protocol of docs/gpu-host.md, or one batch with
``--manifest FILE``. See steps/README.md.
"""

__version__ = "0.1.0"
