package embedding

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/methods"
)

// SequenceInfoDir is the cache folder under the media root, the reference
// deployment's, so one media root serves both.
const SequenceInfoDir = "sequence_info"

// DefaultBindingSiteDir is the default folder under the media root holding
// method A's binding-site table (config KINFLOW_BINDING_SITE_DIR). The spec
// leaves the name open (`media/<binding_site_dir>/`); "pseq2sites" is the
// reference deployment's folder (`media/pseq2sites/`), so a shared media root
// sees the reference's existing table.
const DefaultBindingSiteDir = "pseq2sites"

// BindingSiteTableName is the binding-site table's file name.
const BindingSiteTableName = "binding_sites_all.tsv"

// MethodEModelFile is the checkpoint file name whose folders give method E's model keys.
const MethodEModelFile = "model.pt"

// SyntheticMethodEModelKey is method E's only model key when no checkpoint
// root is configured (METHODE_CHECKPOINT_ROOT empty): the synthetic embedder
// and planner then use methode_esm2/<parameter>/synthetic__model_0/. The name
// cannot clash with a real checkpoint's `<fold>__<model>` key by accident.
const SyntheticMethodEModelKey = "synthetic__model_0"

// Layout places every cache artefact. Paths are built only from ids that
// pass ValidSeqID, below MediaRoot's sequence_info/ (or MethodJCacheDir), so
// nothing a user sends can reach outside the cache root.
type Layout struct {
	// MediaRoot is the absolute media root.
	MediaRoot string
	// MethodJCacheDir is method J's contact-map cache folder.
	MethodJCacheDir string
	// MethodECheckpointRoot holds method E's checkpoints; empty: synthetic model key.
	MethodECheckpointRoot string
	// BindingSiteDir is the binding-site table's folder relative to MediaRoot.
	BindingSiteDir string
	// Folders is the naming of the family folders (config
	// KINFLOW_CACHE_FOLDERS); empty is FoldersKinflow.
	Folders Folders
}

// NewLayout makes a Layout with an absolute media root. An empty
// methodJCacheDir means <media>/sequence_info/methodj_contacts; an empty
// bindingSiteDir means DefaultBindingSiteDir.
func NewLayout(mediaRoot, methodJCacheDir, methodECheckpointRoot, bindingSiteDir string) (*Layout, error) {
	if mediaRoot == "" {
		return nil, errors.New("layout: empty media root")
	}
	abs, err := filepath.Abs(mediaRoot)
	if err != nil {
		return nil, fmt.Errorf("layout: media root %q: %w", mediaRoot, err)
	}
	if bindingSiteDir == "" {
		bindingSiteDir = DefaultBindingSiteDir
	}
	bindingSiteDir = filepath.Clean(bindingSiteDir)
	if filepath.IsAbs(bindingSiteDir) || bindingSiteDir == ".." || strings.HasPrefix(bindingSiteDir, "../") || bindingSiteDir == "." {
		return nil, fmt.Errorf("layout: binding-site dir %q must be a folder below the media root", bindingSiteDir)
	}
	l := &Layout{MediaRoot: abs, MethodECheckpointRoot: methodECheckpointRoot, BindingSiteDir: bindingSiteDir}
	if methodJCacheDir == "" {
		l.MethodJCacheDir = filepath.Join(abs, SequenceInfoDir, FamilyMethodJContacts)
	} else if l.MethodJCacheDir, err = filepath.Abs(methodJCacheDir); err != nil {
		return nil, fmt.Errorf("layout: method J cache dir: %w", err)
	}
	return l, nil
}

// LayoutFromConfig makes the Layout of a loaded configuration.
func LayoutFromConfig(c *config.Config) (*Layout, error) {
	n, err := ParseFolders(c.CacheFolders)
	if err != nil {
		return nil, fmt.Errorf("layout: %w", err)
	}
	l, err := NewLayout(c.MediaRoot, c.MethodJCacheDir, c.MethodECheckpointRoot, c.BindingSiteDir)
	if err != nil {
		return nil, err
	}
	l.Folders = n
	return l, nil
}

// SequenceInfo is the cache root, <media>/sequence_info.
func (l *Layout) SequenceInfo() string { return filepath.Join(l.MediaRoot, SequenceInfoDir) }

// Naming is the layout's folder naming (FoldersKinflow when unset).
func (l *Layout) Naming() Folders { return l.Folders.OrDefault() }

// Folder is family f's folder relative to sequence_info/ (slash-separated)
// under the layout's naming. Every folder of a family is built from it.
func (l *Layout) Folder(f Family) string { return l.Folders.Folder(f.Name) }

// FamilyDir is the absolute folder of family f.
func (l *Layout) FamilyDir(f Family) string {
	return filepath.Join(l.SequenceInfo(), filepath.FromSlash(l.Folder(f)))
}

// QuarantineFolder is the absolute folder where integrity checks set aside
// family f's bad files: sequence_info/.quarantine/<the family's folder>.
func (l *Layout) QuarantineFolder(f Family) string {
	return filepath.Join(l.SequenceInfo(), QuarantineDir, filepath.FromSlash(l.Folder(f)))
}

// MethodEParameterDir is the absolute folder holding method E's model-key
// folders for parameter (kcat or km) under the layout's naming.
func (l *Layout) MethodEParameterDir(parameter string) string {
	return filepath.Join(l.SequenceInfo(), filepath.FromSlash(l.Folders.Folder(FamilyMethodEESM2Prefix+"/"+parameter)))
}

// FamilyOfDir is the family of an absolute cache folder
// (<media>/sequence_info/<folder>) under the layout's naming; false for a
// folder outside sequence_info/ or of no family.
func (l *Layout) FamilyOfDir(dir string) (Family, bool) {
	sep := string(filepath.Separator) + SequenceInfoDir + string(filepath.Separator)
	i := strings.LastIndex(dir, sep)
	if i < 0 {
		return Family{}, false
	}
	return l.Folders.FamilyOfFolder(filepath.ToSlash(dir[i+len(sep):]))
}

// FolderFamilies maps the folders of families (relative to sequence_info/,
// slash-separated) to the family names, for a step program that must know
// which family each output path belongs to without building folders itself.
func (l *Layout) FolderFamilies(fams []Family) map[string]string {
	out := make(map[string]string, len(fams))
	for _, f := range fams {
		out[l.Folder(f)] = f.Name
	}
	return out
}

// Path is the absolute path of sid's artefact of family f; an error when sid
// is not a valid seq id.
func (l *Layout) Path(f Family, sid string) (string, error) {
	if !ValidSeqID(sid) {
		return "", fmt.Errorf("invalid seq id %q", sid)
	}
	return l.FamilyDir(f) + string(filepath.Separator) + sid + f.Suffix(), nil
}

// BindingSiteTable is the absolute path of binding_sites_all.tsv.
func (l *Layout) BindingSiteTable() string {
	return filepath.Join(l.MediaRoot, l.BindingSiteDir, BindingSiteTableName)
}

// MethodEModelKeys lists method E's model keys for parameter (kcat or km):
// `<grandparent>__<parent>` of every model.pt found recursively under
// <checkpoint root>/<parameter>/, sorted and unique (docs/embedding.md,
// "Method E model keys"). Without a
// checkpoint root it is [SyntheticMethodEModelKey]. Keys that would not be
// safe folder names are skipped.
func (l *Layout) MethodEModelKeys(parameter string) ([]string, error) {
	if parameter != "kcat" && parameter != "km" {
		return nil, fmt.Errorf("method E parameter %q: want kcat or km", parameter)
	}
	if l.MethodECheckpointRoot == "" {
		return []string{SyntheticMethodEModelKey}, nil
	}
	root := filepath.Join(l.MethodECheckpointRoot, parameter)
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() || d.Name() != MethodEModelFile {
			return nil
		}
		parent := filepath.Dir(p)
		key := filepath.Base(filepath.Dir(parent)) + "__" + filepath.Base(parent)
		if ValidSeqID(key) {
			seen[key] = true
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("method E checkpoints under %s: %w", root, err)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// MethodEFamilies is method E's families for target t, one per model key.
func (l *Layout) MethodEFamilies(t methods.Target) ([]Family, error) {
	param, ok := MethodEParameter(t)
	if !ok {
		return nil, fmt.Errorf("method E has no artefacts for target %q", t)
	}
	keys, err := l.MethodEModelKeys(param)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("method E: no %s under %s", MethodEModelFile, filepath.Join(l.MethodECheckpointRoot, param))
	}
	out := make([]Family, 0, len(keys))
	for _, k := range keys {
		f, err := MethodEFamily(param, k)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// StepSpec is what one GPU step produces: its families and, for
// methoda_t5_full, the binding-site rows.
type StepSpec struct {
	Key          string
	Families     []Family
	BindingSites bool
}

// ErrNoCacheProfile is returned when a method has no shared-cache plan
// (method J): not a failure of the job, the planning step is simply skipped.
var ErrNoCacheProfile = errors.New("no embedding cache profile")

// ErrUnknownStep is returned for a step key that is neither active nor deprecated.
var ErrUnknownStep = errors.New("unknown step key")

// Step returns the spec of a step key; deprecated keys are mapped first.
func (l *Layout) Step(stepKey string) (StepSpec, error) {
	key, ok := methods.CanonicalStep(stepKey)
	if !ok {
		return StepSpec{}, fmt.Errorf("%w %q", ErrUnknownStep, stepKey)
	}
	pick := func(names ...string) []Family {
		out := make([]Family, 0, len(names))
		for _, n := range names {
			f, _ := FamilyByName(n)
			out = append(out, f)
		}
		return out
	}
	switch key {
	case methods.StepMethodAT5Full:
		return StepSpec{Key: key, BindingSites: true, Families: pick(FamilyProtT5Layer19Mean, FamilyProtT5Layer19Weighted,
			FamilyProtT5LastMean, FamilyProtT5LastWeighted)}, nil
	case methods.StepMethodAESM2Layers:
		return StepSpec{Key: key, Families: pick(FamilyESM2Layer26Mean, FamilyESM2Layer26Weighted,
			FamilyESM2Layer29Mean, FamilyESM2Layer29Weighted)}, nil
	case methods.StepMethodAESMCLayers:
		return StepSpec{Key: key, Families: pick(FamilyESMCLayer24Mean, FamilyESMCLayer24Weighted,
			FamilyESMCLayer32Mean, FamilyESMCLayer32Weighted)}, nil
	case methods.StepProtT5Mean:
		return StepSpec{Key: key, Families: pick(FamilyProtT5LastMean)}, nil
	case methods.StepMethodDESM1b:
		return StepSpec{Key: key, Families: pick(FamilyESM1bMethodD)}, nil
	case methods.StepMethodFESM1v:
		return StepSpec{Key: key, Families: pick(FamilyESM1v)}, nil
	case methods.StepMethodGESM2:
		return StepSpec{Key: key, Families: pick(FamilyMethodGESM2)}, nil
	case methods.StepMethodHESM2LastMean:
		return StepSpec{Key: key, Families: pick(FamilyESM2LayerLastMean)}, nil
	case methods.StepMethodIProtT5Residues:
		return StepSpec{Key: key, Families: pick(FamilyMethodIProtT5Residues)}, nil
	case methods.StepMethodKESMCMean:
		return StepSpec{Key: key, Families: pick(FamilyMethodKESMC)}, nil
	case methods.StepMethodEEmbedKcat, methods.StepMethodEEmbedKm:
		t := methods.Kcat
		if key == methods.StepMethodEEmbedKm {
			t = methods.Km
		}
		fams, err := l.MethodEFamilies(t)
		if err != nil {
			return StepSpec{}, err
		}
		return StepSpec{Key: key, Families: fams}, nil
	}
	return StepSpec{}, fmt.Errorf("%w %q", ErrUnknownStep, stepKey)
}

// ProfileSteps returns the steps of a planner profile for target t, in plan
// order. Method A has three steps, so a sequence missing only its ESM2
// files never recomputes ProtT5; method E one step per
// target; the other profiles one step named like the profile. ProfileNone is
// ErrNoCacheProfile.
func (l *Layout) ProfileSteps(profile string, t methods.Target) ([]StepSpec, error) {
	var keys []string
	switch profile {
	case methods.ProfileNone:
		return nil, ErrNoCacheProfile
	case methods.ProfileMethodAFull:
		keys = []string{methods.StepMethodAT5Full, methods.StepMethodAESM2Layers, methods.StepMethodAESMCLayers}
	case methods.ProfileMethodEEmbed:
		switch t {
		case methods.Kcat:
			keys = []string{methods.StepMethodEEmbedKcat}
		case methods.Km:
			keys = []string{methods.StepMethodEEmbedKm}
		default:
			return nil, fmt.Errorf("method E has no artefacts for target %q", t)
		}
	case methods.ProfileProtT5Mean, methods.ProfileMethodDESM1b, methods.ProfileMethodFESM1v,
		methods.ProfileMethodGESM2, methods.ProfileMethodHESM2LastMean, methods.ProfileMethodIProtT5Residues,
		methods.ProfileMethodKESMCMean:
		keys = []string{profile}
	default:
		return nil, fmt.Errorf("unknown planner profile %q", profile)
	}
	out := make([]StepSpec, 0, len(keys))
	for _, k := range keys {
		s, err := l.Step(k)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// ensureDir creates dir (and parents) for a writer.
func ensureDir(dir string) error {
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create cache folder: %w", err)
	}
	return nil
}
