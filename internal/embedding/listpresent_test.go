package embedding

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestListPresentMarksRegularFilesOnly: however many sids are asked for,
// listPresent marks exactly the regular files `<sid><suffix>` (not a
// folder or a symlink of that name, not a temp file, not another suffix),
// and a missing folder has nothing present.
func TestListPresentMarksRegularFilesOnly(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const suffix = ".npy"
	var want []string
	for _, n := range []int{1, 3, 5} {
		write(fmt.Sprintf("s%03d%s", n, suffix))
		want = append(want, fmt.Sprintf("s%03d", n))
	}
	write("s002.pt")                 // another suffix
	write(".s004" + suffix + ".tmp") // a temp file
	if err := os.Mkdir(filepath.Join(dir, "s006"+suffix), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "s001"+suffix), filepath.Join(dir, "s007"+suffix)); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 8, 64, 65, 300} {
		index := map[string]int{}
		var sids []string
		for i := range n {
			sid := fmt.Sprintf("s%03d", i)
			index[sid] = i
			sids = append(sids, sid)
		}
		for _, d := range []string{dir, filepath.Join(dir, "absent")} {
			present := make([]bool, n)
			if err := listPresent(d, suffix, index, present, nil); err != nil {
				t.Fatal(err)
			}
			var got []string
			for i, p := range present {
				if p {
					got = append(got, sids[i])
				}
			}
			var exp []string
			for _, sid := range want {
				if d == dir && slices.Contains(sids, sid) {
					exp = append(exp, sid)
				}
			}
			if !slices.Equal(got, exp) {
				t.Errorf("%d sids, folder %s: present %v, want %v", n, filepath.Base(d), got, exp)
			}
		}
	}
}
