package embedding

import (
	"fmt"
	"path"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
)

// Folders is a naming of the cache folders under sequence_info/ (config
// KINFLOW_CACHE_FOLDERS). A family keeps its Name whatever the naming; only
// its folder changes. Every process that shares a cache must use the same
// naming: they would otherwise write and look in different folders.
type Folders string

// The namings.
const (
	// FoldersKinflow names every folder after its family (the default).
	FoldersKinflow Folders = "kinflow"
	// FoldersReference uses the reference deployment's folders, which its
	// method programs read: esm1b_turnup (method D), catpred_esm2/… (E),
	// omniesi_esm2 (G and G-O2), iecata_prot_t5_residues (I) and
	// catrange_esmc (K). The other families have the same folder in both.
	FoldersReference Folders = "reference"
)

// referenceFolders maps the families whose reference folder differs from
// their name to that folder; FamilyMethodEESM2Prefix is method E's first
// path element (`<prefix>/<parameter>/<model key>`).
var referenceFolders = map[string]string{
	FamilyESM1bMethodD:          "esm1b_turnup",
	FamilyMethodEESM2Prefix:     "catpred_esm2",
	FamilyMethodGESM2:           "omniesi_esm2",
	FamilyMethodIProtT5Residues: "iecata_prot_t5_residues",
	FamilyMethodKESMC:           "catrange_esmc",
}

// ParseFolders reads a naming; "" is FoldersKinflow.
func ParseFolders(s string) (Folders, error) {
	switch Folders(strings.TrimSpace(s)) {
	case "", FoldersKinflow:
		return FoldersKinflow, nil
	case FoldersReference:
		return FoldersReference, nil
	}
	return "", fmt.Errorf("cache folder naming %q: want kinflow or reference", s)
}

// OrDefault is n, or FoldersKinflow when n is empty (a Layout or a message
// from before namings).
func (n Folders) OrDefault() Folders {
	if n == "" {
		return FoldersKinflow
	}
	return n
}

// Folder is the folder (relative to sequence_info/, slash-separated) of
// the family named name under naming n. This and FamilyOfFolder are the one
// mapping between family names and folders.
func (n Folders) Folder(name string) string {
	if n.OrDefault() != FoldersReference {
		return name
	}
	head, rest, nested := strings.Cut(name, "/")
	if nested && head == FamilyMethodEESM2Prefix {
		return referenceFolders[head] + "/" + rest
	}
	if d, ok := referenceFolders[name]; ok && name != FamilyMethodEESM2Prefix {
		return d
	}
	return name
}

// FamilyOfFolder is the family whose folder under naming n is dir (relative
// to sequence_info/, slash-separated): a fixed family or a method E
// checkpoint family. A folder of the other naming is no family of n.
func (n Folders) FamilyOfFolder(dir string) (Family, bool) {
	dir = path.Clean(dir)
	name := dir
	if n.OrDefault() == FoldersReference {
		for fam, d := range referenceFolders {
			if fam == FamilyMethodEESM2Prefix {
				if rest, ok := strings.CutPrefix(dir, d+"/"); ok {
					name = fam + "/" + rest
				}
			} else if dir == d {
				name = fam
			}
		}
	}
	f, ok := FamilyOf(name)
	if !ok || n.Folder(f.Name) != dir {
		return Family{}, false
	}
	return f, true
}

// FoldersOf is the naming a folder → family name map (a batch manifest's
// "folders") was made under: the one under which every listed folder is its
// family's. An empty map is FoldersKinflow; a map no naming explains is an
// error.
func FoldersOf(folders map[string]string) (Folders, error) {
	for _, n := range []Folders{FoldersKinflow, FoldersReference} {
		ok := true
		for dir, name := range folders {
			if n.Folder(name) != dir {
				ok = false
				break
			}
		}
		if ok {
			return n, nil
		}
	}
	return "", fmt.Errorf("cache folders %v follow no folder naming", folders)
}

// The method catalogue's {folder:<family>} placeholders must name a family.
func init() {
	methods.KnownFamily = func(name string) bool {
		_, ok := FamilyOf(name)
		return ok
	}
}

// FolderOf is the absolute folder of the family named name under the
// layout's naming (the command engine's {folder:<family>}).
func (l *Layout) FolderOf(name string) (string, bool) {
	f, ok := FamilyOf(name)
	if !ok {
		return "", false
	}
	return l.FamilyDir(f), true
}
