"""The host's folder naming (KINFLOW_CACHE_FOLDERS): a step takes each output
path's family from the manifest's ``folders`` and never builds a folder itself."""

from __future__ import annotations

import pytest
from conftest import manifest, out_path

from kinflow_steps.errors import BatchError
from kinflow_steps.steps import STEPS, parse_manifest


def test_reference_folders_come_from_the_manifest(tmp_path):
    media = str(tmp_path / "media")
    doc = manifest("methodd_esm1b", media, {"d1": "MKTAYIAK"}, [("esm1b_turnup", ".npy")])
    step = STEPS["methodd_esm1b"]()
    # Without the host's map the reference folder is no family of the step.
    with pytest.raises(BatchError, match="does not write esm1b_turnup"):
        step.pending(parse_manifest(doc))
    doc["folders"] = {"esm1b_turnup": "esm1b_methodd"}
    ((s, want),) = step.pending(parse_manifest(doc))
    assert s.seq_id == "d1" and want == {"esm1b_methodd": out_path(media, "esm1b_turnup", "d1")}
