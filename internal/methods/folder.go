package methods

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// folderPlaceholder finds {folder:<family name>} in a template: the
// absolute folder of a cache family under the worker's folder naming
// (KINFLOW_CACHE_FOLDERS), e.g. {folder:methodg_esm2}.
var folderPlaceholder = regexp.MustCompile(`\{folder:([^{}\s]+)\}`)

// FolderVar is the vars key of the {folder:<family>} placeholder.
func FolderVar(family string) string { return "folder:" + family }

// KnownFamily reports whether name is a cache family's name, for the
// validation of {folder:<name>} placeholders. internal/embedding, which owns
// the families and imports this package, sets it when it is loaded; while it
// is nil only the placeholder's form is checked.
var KnownFamily func(name string) bool

// templates are every template of d that takes placeholders: its EnvPaths
// values, its command line (Argv and ExtraArgs) and its command.paths values.
func (d *Descriptor) templates() []string {
	var out []string
	for _, ev := range d.EnvPaths {
		out = append(out, ev.Value)
	}
	if c := d.Command; c != nil {
		out = append(out, c.Argv...)
		out = append(out, c.ExtraArgs...)
		for _, k := range slices.Sorted(maps.Keys(c.Paths)) {
			out = append(out, c.Paths[k])
		}
	}
	return out
}

// FolderFamilies lists the families d's templates name in {folder:…}
// placeholders, in first-seen order.
func (d *Descriptor) FolderFamilies() []string {
	var out []string
	for _, t := range d.templates() {
		for _, m := range folderPlaceholder.FindAllStringSubmatch(t, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// validateFolders checks that every {folder:…} placeholder of d names a
// known family.
func (d *Descriptor) validateFolders() error {
	for _, t := range d.templates() {
		if i := strings.Index(t, "{folder:"); i >= 0 && !folderPlaceholder.MatchString(t[i:]) {
			return fmt.Errorf("method %q: malformed placeholder in %q: want {folder:<family name>}", d.Key, t)
		}
	}
	for _, name := range d.FolderFamilies() {
		if KnownFamily != nil && !KnownFamily(name) {
			return fmt.Errorf("method %q: {folder:%s} names no cache family (the family names are in docs/embedding.md)", d.Key, name)
		}
	}
	return nil
}
