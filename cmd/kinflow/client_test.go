package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/client"
)

func TestSelection(t *testing.T) {
	order, sel, err := selection([]string{"Km", "kcat"}, []string{"C", "B"}, "kcat/Km=D")
	if err != nil || !reflect.DeepEqual(order, []string{"Km", "kcat", "kcat/Km"}) ||
		!reflect.DeepEqual(sel, map[string]string{"Km": "C", "kcat": "B", "kcat/Km": "D"}) {
		t.Fatalf("%v %v %v", order, sel, err)
	}
	for _, c := range []struct {
		targets, methods []string
		spec, want       string
	}{
		{nil, nil, "", "choose what to predict"},
		{[]string{"kcat"}, nil, "", "1 --target but 0 --method"},
		{nil, nil, "kcat", "want target=method pairs"},
		{nil, nil, "kcat=B,kcat=C", `target "kcat" given twice`},
		{nil, nil, "kcat=", "empty target or method"},
	} {
		_, _, err := selection(c.targets, c.methods, c.spec)
		if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

func statusFrom(t *testing.T, js string) *client.Status {
	t.Helper()
	var st client.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	return &st
}

func TestProgressLine(t *testing.T) {
	running := statusFrom(t, `{"status":"Processing","activeStageIndex":0,"totalStageCount":2,
		"progress":{"predictionsTotal":3,"embedding":{"total":4,"cachedAlready":1,"computed":1,"remaining":2}},
		"progressStages":[{"index":0,"target":"kcat","methodKey":"B"},{"index":1,"target":"Km","methodKey":"C"}]}`)
	if got, want := progressLine(running), "Processing [############------------] 2/4 embeddings  stage 1/2 kcat·B"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	noEmb := statusFrom(t, `{"status":"Completed","progress":{"predictionsTotal":3,"predictionsMade":3},"progressStages":[]}`)
	if got := progressLine(noEmb); !strings.Contains(got, "[########################] 3/3 predictions") {
		t.Fatalf("%q", got)
	}
	// Off a terminal, one line per change.
	var buf bytes.Buffer
	bar := newProgressBar(&buf)
	bar.update(running)
	bar.update(running)
	bar.update(noEmb)
	bar.finish()
	if n := strings.Count(buf.String(), "\n"); n != 2 || strings.Contains(buf.String(), "\r") {
		t.Fatalf("%q", buf.String())
	}
}

// TestProgressLineOverall: with the server's `overall`, the bar shows the
// whole job's percentage, the elapsed time and the ETA, then the stage in
// sequences or predictions; queued jobs their queue position.
func TestProgressLineOverall(t *testing.T) {
	embedding := statusFrom(t, `{"status":"Processing","elapsedSeconds":70,"overall":{"percent":60,"etaSeconds":40,"phase":"embedding",
		"rows":600,"sequences":20,"stage":2,"stages":2,"text":"x"},
		"progressStages":[{"index":0,"target":"kcat","methodKey":"B"},{"index":1,"target":"Km","methodKey":"E","sequences":20,"sequencesEmbedded":17}]}`)
	if got, want := progressLine(embedding), "Processing [##############----------]  60.0%  elapsed 1:10  ETA 0:40  600 rows  stage 2/2 Km·E embedding 17/20 sequences"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	queued := statusFrom(t, `{"status":"Pending","elapsedSeconds":3,"queuePosition":4,"overall":{"percent":0,"etaSeconds":null,"phase":"queued","rows":5,"stages":1}}`)
	if got, want := progressLine(queued), "Pending    [------------------------]   0.0%  elapsed 0:03  ETA -  5 rows  queue position 4"; got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
	predicting := statusFrom(t, `{"status":"Processing","elapsedSeconds":4000,"overall":{"percent":99.5,"etaSeconds":20,"phase":"predicting","rows":5,"stage":1,"stages":1},
		"progressStages":[{"index":0,"target":"kcat","methodKey":"B","prediction":{"predictionsMade":4,"predictionsTotal":5}}]}`)
	if got := progressLine(predicting); !strings.HasSuffix(got, " 99.5%  elapsed 1:06:40  ETA 0:20  5 rows  stage 1/1 kcat·B predicting 4/5") {
		t.Fatalf("%q", got)
	}
	line := stageLine(client.Stage{Index: 0, Target: "kcat", MethodKey: "B", Status: "completed", Rows: 3, Sequences: ptr(2), SequencesEmbedded: ptr(2), Seconds: ptr64(75)})
	if want := "stage 1 kcat·B: completed; 3 rows, 2 sequences, 2 embedded; predictions 0/0; embedding files 0/0 (cached 0, computed 0, remaining 0); 1:15"; line != want {
		t.Fatalf("stage line %q\nwant       %q", line, want)
	}
}

func ptr(n int) *int       { return &n }
func ptr64(n int64) *int64 { return &n }

// TestClientUsage: usage mistakes exit 2 before any request is sent.
func TestClientUsage(t *testing.T) {
	for _, args := range [][]string{
		{"key"}, {"key", "rotate"}, {"validate"}, {"submit", "x.csv"}, {"submit", "x.csv", "--methods", "kcat=B", "--long", "x"},
		{"submit", "x.csv", "--methods", "kcat=B", "--canonicalize", "maybe"}, {"status"}, {"result"}, {"methods", "extra"},
	} {
		var out, errb bytes.Buffer
		if code := run(context.Background(), append(args, "--url", "http://127.0.0.1:1"), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, stderr %s", args, code, errb.String())
		}
	}
}

// TestOneChemistryPerProcess: `kinflow dev` wires the api and the worker in
// one process; both get the same RDKit pool.
func TestOneChemistryPerProcess(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first, second := newChemistry(log), newChemistry(log)
	if first != second {
		t.Fatal("two RDKit pools in one process")
	}
}

// TestListTime: `kinflow jobs` lists times to the second, in UTC.
func TestListTime(t *testing.T) {
	for in, want := range map[string]string{
		"2026-03-04T14:30:02.123456+00:00": "2026-03-04 14:30:02Z",
		"2026-03-04T16:30:02.9+02:00":      "2026-03-04 14:30:02Z",
		"not a time":                       "not a time",
	} {
		if got := listTime(in); got != want {
			t.Errorf("listTime(%q) = %q, want %q", in, got, want)
		}
	}
}
