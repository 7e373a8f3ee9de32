"""The seq-id rule of the step programs is internal/embedding.ValidSeqID's plus the
GPU host's CheckSeqID: legacy ids of a taken-over seqmap must pass."""

from kinflow_steps import cache_io


def test_valid_seq_id_matches_the_go_rule():
    for sid in ["0123456789ab", "P0A7B8.2", "sp|P12345", "abc:1", "a_b-c", "x" * 128]:
        assert cache_io.valid_seq_id(sid), sid
    for sid in ["", ".hidden", "-flag", "a/b", "a\\b", "a..b", "a,b", "a b", "a\tb", "a\x7fb", "x" * 129]:
        assert not cache_io.valid_seq_id(sid), repr(sid)
