"""The seq-id rule of the step programs is internal/embedding.ValidSeqID's plus the
GPU host's CheckSeqID: legacy ids of a taken-over seqmap must pass."""

from kinflow_steps import cache_io


def test_valid_seq_id_matches_the_go_rule():
    for sid in ["0123456789ab", "P0A7B8.2", "sp|P12345", "abc:1", "a_b-c", "x" * 128]:
        assert cache_io.valid_seq_id(sid), sid
    for sid in ["", ".hidden", "-flag", "a/b", "a\\b", "a..b", "a,b", "a b", "a\tb", "a\x7fb", "x" * 129]:
        assert not cache_io.valid_seq_id(sid), repr(sid)


def test_writer_records_integrity_before_the_file_is_visible(tmp_path, monkeypatch):
    """Each entry holds the file's size, mtime_ns, ctime_ns, inode and SHA-256 (what
    kinflow's planner compares), and the manifest is merged before the rename: at the
    moment a file becomes visible its record is already there. The rename moves the
    inode change time: the record holds the final one afterwards."""
    import hashlib
    import json
    import os

    from kinflow_steps import cache_io
    from kinflow_steps.steps import Writer

    folder = tmp_path / "sequence_info" / "esm2_layer_last_mean"
    path = str(folder / "abc.npy")
    seen_at_publish = []
    real_publish = cache_io.Staged.publish

    def publish(self):
        doc = json.loads((folder / "manifest.json").read_text())
        seen_at_publish.append(doc["entries"].get("abc"))
        real_publish(self)

    monkeypatch.setattr(cache_io.Staged, "publish", publish)
    w = Writer()
    w.put(path, "abc", b"\x93NUMPY payload")
    w.commit()
    assert w.written == 1
    e = json.loads((folder / "manifest.json").read_text())["entries"]["abc"]
    st = os.stat(path)
    before = dict(seen_at_publish[0])
    assert before["ino"] == st.st_ino and before["ctime_ns"] <= st.st_ctime_ns
    before.pop("ctime_ns"), before.pop("updated_at")
    assert before == {k: v for k, v in e.items() if k not in ("ctime_ns", "updated_at")}
    assert e["bytes"] == st.st_size and e["mtime_ns"] == st.st_mtime_ns
    assert e["ctime_ns"] == st.st_ctime_ns and e["ino"] == st.st_ino
    assert e["sha256"] == hashlib.sha256(b"\x93NUMPY payload").hexdigest()
    assert "synthetic" not in e
    assert not [n for n in os.listdir(folder) if n.startswith(".abc.")]


def test_merge_manifest_keeps_a_synthetic_flag(tmp_path):
    import json

    from kinflow_steps import cache_io

    cache_io.merge_manifest(str(tmp_path), [cache_io.Commit("s", "s.npy", 3, "ab" * 32, 7, synthetic=True)])
    e = json.loads((tmp_path / "manifest.json").read_text())["entries"]["s"]
    assert e["synthetic"] is True and e["sha256"] == "ab" * 32 and e["mtime_ns"] == 7
    # A real file over it drops the flag and a stale record.
    cache_io.merge_manifest(str(tmp_path), [cache_io.Commit("s", "s.npy", 4)])
    e = json.loads((tmp_path / "manifest.json").read_text())["entries"]["s"]
    assert "synthetic" not in e and "sha256" not in e and e["bytes"] == 4


def test_record_renamed_leaves_a_changed_file_to_the_hash(tmp_path):
    """A file changed between the rename and record_renamed keeps its old record: kinflow
    hashes it at its next check instead of trusting the new stat."""
    import json
    import os

    from kinflow_steps import cache_io

    path = tmp_path / "s.npy"
    st = cache_io.stage_bytes(str(path), b"good")
    c = cache_io.Commit("s", "s.npy", st.nbytes, st.sha256, st.mtime_ns, ctime_ns=st.ctime_ns, ino=st.ino)
    cache_io.merge_manifest(str(tmp_path), [c])
    st.publish()
    path.write_bytes(b"evil")  # same size, a later mtime
    cache_io.record_renamed(str(tmp_path), [c])
    e = json.loads((tmp_path / "manifest.json").read_text())["entries"]["s"]
    assert e["ctime_ns"] == st.ctime_ns and e["ctime_ns"] != os.stat(path).st_ctime_ns


def test_folders_are_created_only_under_the_identified_media_root(tmp_path, monkeypatch):
    """With the GPU host's media-root identity in the environment, a write creates its
    family folder only while the root holds a marker with that id: with the root renamed
    away (or another root's marker at its path) it raises MediaRootUnavailable and
    creates nothing at the old path; once the root is back, the write goes through.
    Without the identity (a test, a scratch root) folders are simply made."""
    import json
    import os

    import pytest

    root = tmp_path / "media"
    root.mkdir()
    (root / cache_io.MEDIA_MARKER).write_text(json.dumps({"id": "abc123", "created": "2026-01-01T00:00:00Z"}))
    monkeypatch.setenv(cache_io.MEDIA_ROOT_ID_ENV, "abc123")
    cache_io.use_media_root(str(root))
    try:
        path = str(root / "sequence_info" / "prot_t5_last" / "mean_vecs" / "s1.npy")
        aside = tmp_path / "media.aside"
        os.rename(root, aside)
        with pytest.raises(cache_io.MediaRootUnavailable, match="media root unavailable"):
            cache_io.write_bytes_atomic(path, b"x")
        assert not root.exists()
        root.mkdir()
        (root / cache_io.MEDIA_MARKER).write_text(json.dumps({"id": "other", "created": "2026-01-01T00:00:00Z"}))
        with pytest.raises(cache_io.MediaRootUnavailable):
            cache_io.stage_bytes(path, b"x")
        assert sorted(os.listdir(root)) == [cache_io.MEDIA_MARKER]
        (root / cache_io.MEDIA_MARKER).unlink()
        root.rmdir()
        os.rename(aside, root)
        assert cache_io.write_bytes_atomic(path, b"x") == 1
        assert (root / "sequence_info" / "prot_t5_last" / "mean_vecs" / "s1.npy").read_bytes() == b"x"

        monkeypatch.delenv(cache_io.MEDIA_ROOT_ID_ENV)
        os.rename(root, aside)
        cache_io.write_bytes_atomic(path, b"y")
        assert (root / "sequence_info" / "prot_t5_last" / "mean_vecs" / "s1.npy").read_bytes() == b"y"
    finally:
        cache_io.use_media_root("")


# The Go writers' codes of the same records (internal/embedding,
# recordkey_test.go recordMACVectors).
RECORD_MAC_VECTORS = [
    (
        "/srv/media/sequence_info/prot_t5_last/mean_vecs",
        "0b2b6b8411d2",
        4224,
        1700000000123456789,
        1700000000223456789,
        5310708,
        "AB12",
        True,
        "19fe4591df54756dcc3d735cf6eab2360f06a379257d723bee5908f34343890c",
    ),
    (
        "esm2_layer_last_mean",
        "c9e7ae8c70d7",
        10,
        1,
        2,
        3,
        "ff",
        False,
        "772a761757a1af1dba3c65a4e14b4021097c3527778642bdcd808d09a87715a6",
    ),
]


def test_record_mac_matches_the_go_writers(tmp_path, monkeypatch):
    key = tmp_path / "record.key"
    key.write_bytes(b"kinflow shared test vector key\n")
    monkeypatch.setenv(cache_io.ENV_RECORD_KEY_FILE, str(key))
    for folder, sid, size, mt, ct, ino, sha, synthetic, want in RECORD_MAC_VECTORS:
        assert cache_io.record_mac(folder, sid, size, mt, ct, ino, sha, synthetic) == want, sid
    monkeypatch.delenv(cache_io.ENV_RECORD_KEY_FILE)
    assert cache_io.record_mac("x", "s", 1, 1, 1, 1, "ab", False) == ""


def test_written_records_carry_the_hosts_code(tmp_path, monkeypatch):
    """With the host's record key, each record the writer leaves (after the rename,
    whose new change time it records) carries the code of its final fields; without
    the key it carries none."""
    import json
    import os

    from kinflow_steps.steps import Writer

    key = tmp_path / "record.key"
    key.write_bytes(b"a record key of at least sixteen bytes")
    folder = tmp_path / "sequence_info" / "esm2_layer_last_mean"
    path = str(folder / "abc.npy")
    monkeypatch.setenv(cache_io.ENV_RECORD_KEY_FILE, str(key))
    w = Writer()
    w.put(path, "abc", b"\x93NUMPY payload")
    w.commit()
    e = json.loads((folder / "manifest.json").read_text())["entries"]["abc"]
    st = os.stat(path)
    assert e["ctime_ns"] == st.st_ctime_ns
    assert e["mac"] == cache_io.record_mac(
        str(folder), "abc", e["bytes"], e["mtime_ns"], e["ctime_ns"], e["ino"], e["sha256"], False
    )
    monkeypatch.delenv(cache_io.ENV_RECORD_KEY_FILE)
    w = Writer()
    w.put(path, "abc", b"\x93NUMPY other payload")
    w.commit()
    e = json.loads((folder / "manifest.json").read_text())["entries"]["abc"]
    assert "mac" not in e
