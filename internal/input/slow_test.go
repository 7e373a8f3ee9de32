package input

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// otherCallerBound is the documented bound (docs/input.md) on how long one
// caller's slow molecules may delay another caller's validation while fewer
// callers than helpers send slow molecules: not at all beyond the other
// caller's own work; 3 s (one molecule bound) is the ceiling we assert.
const otherCallerBound = defaultMoleculeTimeout

func chain(n int) string { return strings.Repeat("C", n) }

func tableOf(subs ...string) *Table {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for _, s := range subs {
		fmt.Fprintf(&b, "MKTAYIAKQRQISFVKSHFSRQ,%s\n", s)
	}
	t, err := ParseCSV(strings.NewReader(b.String()), 0)
	if err != nil {
		panic(err)
	}
	return t
}

// TestSlowMoleculeDoesNotStallOthers: with the real helper, one caller validates a file of three 3,000-C chains (each ~30 s
// or more for RDKit) while another validates a small file. The other
// caller finishes within otherCallerBound; the slow caller within
// maxTimeoutsPerCall molecule bounds (plus restarts), its rows read "could
// not be checked in time", never "invalid"; and a retry costs nothing.
func TestSlowMoleculeDoesNotStallOthers(t *testing.T) {
	rd := needRDKit(t)
	ctx := context.Background()
	if err := rd.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	chem := NewChemistry(rd, nil)
	cat := methodsDefault()
	slow := tableOf(chain(3000), chain(3001), chain(3002))
	small := tableOf("CCO", "CC(=O)Oc1ccccc1C(=O)O", "C1=CC=CC=C1O", "OCC(O)CO", "C(C)(C)(C)(C)C")

	var slowRep *ValidateReport
	var slowErr error
	var slowTook time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		start := time.Now()
		slowRep, slowErr = Validate(ctx, cat, chem, slow, false)
		slowTook = time.Since(start)
	}()
	time.Sleep(300 * time.Millisecond) // the slow caller holds a helper now
	var worst time.Duration
	for i := 0; i < 5; i++ {
		start := time.Now()
		rep, err := Validate(ctx, cat, chem, small, false)
		took := time.Since(start)
		worst = max(worst, took)
		if err != nil || len(rep.InvalidSubstrates) != 1 || rep.InvalidSubstrates[0].Reason != ReasonInvalidSMILES {
			t.Fatalf("small file: %v %v", rep.InvalidSubstrates, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("other caller: worst %v while the slow caller took %v", worst, slowTook)
	if worst > otherCallerBound {
		t.Errorf("the other caller took %v, over the bound %v", worst, otherCallerBound)
	}
	if slowErr != nil || len(slowRep.InvalidSubstrates) != 3 {
		t.Fatalf("slow file: %v", slowErr)
	}
	for _, is := range slowRep.InvalidSubstrates {
		if is.Reason != ReasonUnchecked {
			t.Errorf("row %d: reason %q, want %q", is.Row, is.Reason, ReasonUnchecked)
		}
	}
	if limit := time.Duration(maxTimeoutsPerCall+2) * defaultMoleculeTimeout; slowTook > limit {
		t.Errorf("the slow caller took %v, over %v", slowTook, limit)
	}
	// A retry pays only for the molecule the first call had no budget to
	// try; the timed-out ones are remembered. A third call pays nothing.
	for try, limit := range []time.Duration{defaultMoleculeTimeout + 2*time.Second, time.Second} {
		start := time.Now()
		rep, err := Validate(ctx, cat, chem, slow, false)
		if took := time.Since(start); err != nil || len(rep.InvalidSubstrates) != 3 || took > limit {
			t.Fatalf("retry %d: %d issues, %v, in %v (limit %v)", try+1, len(rep.InvalidSubstrates), err, took, limit)
		}
	}
	// A job's row check skips such rows with their own reason.
	reasons, err := ValidateRows(ctx, chem, MethodInfo{}, slow, []string{"MKV", "MKV", "MKV"})
	if err != nil || reasons[0] != ReasonUncheckedSubstrate {
		t.Fatalf("run-time reasons %q %v", reasons, err)
	}
}

// TestSlowMoleculesProperty: random mixes of fast and slow molecules from
// several concurrent callers (a short molecule bound, so that 600-C chains
// count as slow). For every caller: each fast molecule gets RDKit's own
// verdict, each slow one is valid or "unchecked" but never plain invalid,
// and no call takes longer than its budget of timeouts allows.
func TestSlowMoleculesProperty(t *testing.T) {
	needRDKit(t)
	const bound = 150 * time.Millisecond
	rd := NewRDKit(RDKitOptions{MoleculeTimeout: bound, Helpers: 2})
	defer rd.Close()
	ctx := context.Background()
	if err := rd.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	chem := NewChemistry(rd, nil)
	fast := map[string]bool{"CCO": true, "OCC(O)CO": true, "C1=CC=CC=C1O": true, "C(C)(C)(C)(C)C": false, "c1ccccc1C(=O)O": true}
	rng := rand.New(rand.NewPCG(14, 1))
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for caller := range 4 {
		var texts []string
		for range 3 + rng.IntN(6) {
			if rng.IntN(3) == 0 {
				texts = append(texts, chain(600+rng.IntN(400)))
			} else {
				for s := range fast {
					texts = append(texts, s)
					break
				}
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			v, late, err := chem.ValidManyDetail(ctx, texts)
			took := time.Since(start)
			if err != nil {
				errs <- err
				return
			}
			for _, s := range texts {
				if want, ok := fast[s]; ok && v[s] != want {
					errs <- fmt.Errorf("caller %d: %q verdict %v", caller, s, v[s])
				}
				if _, ok := fast[s]; !ok && !v[s] && !late[s] {
					errs <- fmt.Errorf("caller %d: a %d-C chain reads invalid", caller, len(s))
				}
			}
			// Budget: its own timeouts plus waiting for another caller's
			// (each ≤ bound + a chunk), plus helper restarts (~1 s each
			// on a loaded machine).
			if limit := 8*bound + 6*time.Second; took > limit {
				errs <- fmt.Errorf("caller %d took %v > %v", caller, took, limit)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
