package predcache

import "testing"

func TestTransient(t *testing.T) {
	for reason, want := range map[string]bool{
		"RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB": true,
		"torch.OutOfMemoryError":               true,
		"MemoryError":                          true,
		"the process was Killed":               true,
		"request timed out after 60 s":         true,
		"Invalid SMILES/InChI":                 false,
		"water is not a substrate":             false,
		"Prediction could not be made":         false,
		"Sequence too long — row was excluded": false,
		"":                                     false,
	} {
		if got := Transient(reason); got != want {
			t.Errorf("Transient(%q) = %v, want %v", reason, got, want)
		}
	}
}
