package methods

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestREADMEOperatorFileExample parses the operator file shown in the
// README's "Adding a method" section, so the example stays true.
func TestREADMEOperatorFileExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "## Adding a method")
	if i < 0 {
		t.Fatal("README has no 'Adding a method' section")
	}
	start := strings.Index(text[i:], "```yaml\n")
	end := strings.Index(text[i+start+8:], "```")
	if start < 0 || end < 0 {
		t.Fatal("no yaml block in 'Adding a method'")
	}
	c, err := Parse([]byte(text[i+start+8 : i+start+8+end]))
	if err != nil {
		t.Fatalf("README example: %v", err)
	}
	if _, ok := c.Get("J"); ok {
		t.Error("J should be removed")
	}
	if _, ok := c.Get("A-high"); !ok {
		t.Error("A-H should be renamed A-high")
	}
	k, ok := c.Get("M")
	if !ok || k.Profile != ProfileProtT5Mean || k.Command == nil {
		t.Fatalf("M not added as written: %+v", k)
	}
	if b, _ := c.Get("B"); b.Command == nil || b.Command.Script != "/opt/methods/b/predict.py" || b.DisplayName != "Method B" {
		t.Errorf("B override: %+v", b)
	}
}

// TestREADMEReferenceFileExample parses the methods file shown in the
// README's "Moving from the reference deployment": the reference's keys
// are there, and the one method written gets its command.
func TestREADMEReferenceFileExample(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, "## Moving from the reference deployment")
	if i < 0 {
		t.Fatal("README has no 'Moving from the reference deployment' section")
	}
	start := strings.Index(text[i:], "```yaml\n")
	if start < 0 {
		t.Fatal("no yaml block in 'Moving from the reference deployment'")
	}
	body := text[i+start+len("```yaml\n"):]
	end := strings.Index(body, "```")
	if end < 0 {
		t.Fatal("unterminated yaml block")
	}
	// The block sits in a numbered list: drop the list's indentation.
	var lines []string
	for _, l := range strings.Split(body[:end], "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   "))
	}
	c, err := Parse([]byte(strings.Join(lines, "\n")))
	if err != nil {
		t.Fatalf("README example: %v", err)
	}
	for _, k := range []string{"KinForm-H", "CataPro", "UniKP", "TurNup", "CatPred", "EITLEM", "OmniESI", "RealKcat", "IECata", "MMISA-KM", "CatRange"} {
		if _, ok := c.Get(k); !ok {
			t.Errorf("the reference profile lacks %s", k)
		}
	}
	u, _ := c.Get("UniKP")
	if u == nil || u.Command == nil || u.Command.Python != "/srv/envs/unikp/bin/python" || u.Command.Paths["tools"] != "/srv/webKinPred/tools" {
		t.Errorf("UniKP's command not as written: %+v", u)
	}
}
