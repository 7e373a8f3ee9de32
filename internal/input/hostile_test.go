package input

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

// issueWideJSON is a hostile 838 KiB body: 10,000 rows, each with its own
// extra key, which used to become a 10,000 × 10,002 table.
func issueWideJSON(rows int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"data":[`)
	for i := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"k%d":"x","Protein Sequence":"MKTAYIAK","Substrate":"CCO"}`, i)
	}
	b.WriteString("]}")
	return b.Bytes()
}

// heapAlloc returns the bytes f allocated (cumulative, garbage included).
func heapAlloc(f func()) uint64 {
	total, _ := heapUse(f)
	return total
}

// heapUse returns the bytes f allocated in all and the bytes still live
// after a GC (what f's results hold; the caller keeps them reachable).
func heapUse(f func()) (total, live uint64) {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	total = b.TotalAlloc - a.TotalAlloc
	runtime.GC()
	runtime.ReadMemStats(&b)
	if b.HeapAlloc > a.HeapAlloc {
		live = b.HeapAlloc - a.HeapAlloc
	}
	return total, live
}

func TestWideJSONRejectedCheaply(t *testing.T) {
	body := issueWideJSON(10000)
	var jb *JSONBody
	var err error
	alloc := heapAlloc(func() { jb, err = ParseJSONBody(bytes.NewReader(body), DefaultMaxRows) })
	if err != nil {
		t.Fatal(err)
	}
	if jb.DataErr == nil || !strings.Contains(jb.DataErr.Msg, "Too many columns") || jb.DataErr.Status() != 400 {
		t.Fatalf("data error %v", jb.DataErr)
	}
	// Before the cap this parse allocated about 1.6 GB; now a small multiple
	// of the 838 KiB body (the decoder's token copies dominate).
	if limit := uint64(16 * len(body)); alloc > limit {
		t.Fatalf("parsing a %d-byte body allocated %d bytes (limit %d)", len(body), alloc, limit)
	}
	t.Logf("body %d B, allocated %d B (%.1f× body)", len(body), alloc, float64(alloc)/float64(len(body)))
}

func TestWideCSVRejected(t *testing.T) {
	cols := make([]string, MaxColumns+1)
	for i := range cols {
		cols[i] = fmt.Sprintf("c%d", i)
	}
	cols[0], cols[1] = ColProteinSequence, ColSubstrate
	_, err := ParseCSV(strings.NewReader(strings.Join(cols, ",")+"\nMKV,CCO\n"), 0)
	if e, ok := AsError(err); !ok || e.Status() != 400 || !strings.Contains(e.Msg, "Too many columns") {
		t.Fatalf("err %v", err)
	}
	// Exactly MaxColumns is fine.
	tb, err := ParseCSV(strings.NewReader(strings.Join(cols[:MaxColumns], ",")+"\nMKV,CCO\n"), 0)
	if err != nil || len(tb.Columns) != MaxColumns {
		t.Fatalf("%v %v", tb, err)
	}
}

func TestJSONInvalidUTF8Rejected(t *testing.T) {
	body := []byte("{\"data\":[{\"Protein Sequence\":\"MKV\",\"Substrate\":\"CC\xffO\"}]}")
	jb, err := ParseJSONBody(bytes.NewReader(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	if jb.DataErr == nil || !strings.Contains(jb.DataErr.Msg, "UTF-8") {
		t.Fatalf("data error %v", jb.DataErr)
	}
	// The same in a key (column name).
	body = []byte("{\"data\":[{\"Protein Sequence\":\"MKV\",\"Substrate\":\"CCO\",\"N\xffame\":\"x\"}]}")
	if jb, err = ParseJSONBody(bytes.NewReader(body), 0); err != nil {
		t.Fatal(err)
	}
	if jb.DataErr == nil || !strings.Contains(jb.DataErr.Msg, "UTF-8") {
		t.Fatalf("invalid key: data error %v", jb.DataErr)
	}
}

func TestHeaderOnlyCSVRejectedAtSubmit(t *testing.T) {
	cat := methodsDefault()
	raw := RawOptions{fields: map[string]any{"targets": []any{"kcat"}, "methods": map[string]any{"kcat": "B"}}}
	for _, in := range []string{"Protein Sequence,Substrate\n", "Protein Sequence,Substrate\n,\n,\n"} {
		_, err := ValidateSubmit(cat, raw, func() (*Table, error) { return ParseCSV(strings.NewReader(in), 0) })
		if e, ok := AsError(err); !ok || e.Status() != 400 || !strings.Contains(e.Msg, "no data rows") {
			t.Fatalf("%q: %v", in, err)
		}
	}
}

// TestTableMemoryProperty: for random shapes (rows × columns, sparse or
// dense, JSON or CSV), either the table is rejected with a 400 or it has at
// most MaxColumns columns; the table kept afterwards holds at most twice the
// body plus the dense cell array (16 B per cell, ≤ 10 MiB at 10,000 rows),
// and the parse allocates in all (garbage included) at most 64× the body
// plus that array: json.Decoder's per-token copies cost ~40× a dense body.
func TestTableMemoryProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 14))
	for trial := range 40 {
		rows := 1 + rng.IntN(3000)
		cols := 1 + rng.IntN(200)
		fresh := rng.IntN(2) == 0 // every row brings a new key
		var body []byte
		var parse func() (*Table, error)
		if trial%2 == 0 {
			var b bytes.Buffer
			b.WriteString(`{"data":[`)
			for r := range rows {
				if r > 0 {
					b.WriteByte(',')
				}
				b.WriteString(`{"Protein Sequence":"MKV"`)
				if fresh {
					fmt.Fprintf(&b, `,"k%d":1`, r)
				} else {
					for c := range cols {
						fmt.Fprintf(&b, `,"c%d":%d`, c, r)
					}
				}
				b.WriteString("}")
			}
			b.WriteString("]}")
			body = b.Bytes()
			parse = func() (*Table, error) {
				jb, err := ParseJSONBody(bytes.NewReader(body), DefaultMaxRows)
				if err != nil {
					return nil, err
				}
				if jb.DataErr != nil {
					return nil, jb.DataErr
				}
				return jb.Data, nil
			}
		} else {
			var b bytes.Buffer
			for c := range cols {
				fmt.Fprintf(&b, "c%d,", c)
			}
			b.WriteString("Protein Sequence\n")
			for range rows {
				b.WriteString("x\n") // short rows: padded to the header's width
			}
			body = b.Bytes()
			parse = func() (*Table, error) { return ParseCSV(bytes.NewReader(body), DefaultMaxRows) }
		}
		var tb *Table
		var err error
		alloc, live := heapUse(func() { tb, err = parse() })
		if err != nil {
			if e, ok := AsError(err); !ok || e.Status() != 400 {
				t.Fatalf("trial %d: %v", trial, err)
			}
		} else if len(tb.Columns) > MaxColumns {
			t.Fatalf("trial %d: %d columns", trial, len(tb.Columns))
		}
		cells := uint64(16 * rows * MaxColumns)
		if limit := 2*uint64(len(body)) + cells + 1<<20; live > limit {
			t.Fatalf("trial %d (%d rows × %d cols, fresh %v, %d B): table holds %d > %d", trial, rows, cols, fresh, len(body), live, limit)
		}
		if limit := 64*uint64(len(body)) + cells + 1<<20; alloc > limit {
			t.Fatalf("trial %d (%d rows × %d cols, fresh %v, %d B): allocated %d > %d", trial, rows, cols, fresh, len(body), alloc, limit)
		}
		runtime.KeepAlive(tb)
	}
}

func BenchmarkParseWideJSON(b *testing.B) {
	body := issueWideJSON(10000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseJSONBody(bytes.NewReader(body), DefaultMaxRows); err != nil {
			b.Fatal(err)
		}
	}
}
