package api

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestUserMessage(t *testing.T) {
	var b strings.Builder
	b.WriteString("write embeddings: no space left on device: ")
	for i := range 200 {
		fmt.Fprintf(&b, "/srv/kinflow/media/sequence_info/prot_t5/%04d.npy, ", i)
	}
	got := userMessage(b.String())
	if strings.Contains(got, "/srv") || strings.Contains(got, "media/") {
		t.Fatalf("server path shown: %q", got)
	}
	if n := utf8.RuneCountInString(got); n > userMessageMax || !strings.HasPrefix(got, "write embeddings: no space left on device: [server path]") {
		t.Fatalf("%d runes: %q", n, got)
	}
	for in, want := range map[string]string{
		"The job could not be queued.":                      "The job could not be queued.",
		"open /tmp/x/input.csv: permission denied":          "open [server path]: permission denied",
		"rate 1/2 of rows; kcat/Km failed":                  "rate 1/2 of rows; kcat/Km failed",
		"method B exited 1 (/opt/methods/b/run.py, line 3)": "method B exited 1 ([server path], line 3)",
	} {
		if got := userMessage(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
