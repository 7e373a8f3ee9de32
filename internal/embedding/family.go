package embedding

import (
	"fmt"

	"github.com/kinflow/kinflow/internal/methods"
)

// Format is an artefact's file format.
type Format string

// Artefact formats.
const (
	// FormatNPY is a NumPy .npy file (format 1.0, little-endian float32).
	FormatNPY Format = "npy"
	// FormatPT is a torch.save zip archive holding one float32 tensor.
	FormatPT Format = "pt"
)

// Suffix is the file-name suffix of the format.
func (f Format) Suffix() string { return "." + string(f) }

// Model dimensions of the protein language models.
const (
	DimProtT5XL  = 1024
	DimESM2650M  = 1280
	DimESMC600M  = 1152
	DimESM1b650M = 1280
	DimESM1v650M = 1280
)

// Per-residue length limits of the real models, reproduced by the synthetic
// embedder so its shapes match: ESM windows take 1022 residues plus BOS/EOS.
const (
	// ESMWindow is the most residues an ESM model embeds in one pass.
	ESMWindow = 1022
	// ESM1vHalf: method F cuts a sequence over ESMWindow residues to its
	// first and last 500, as the reference's ESM-1v worker does.
	ESM1vHalf = 500
	// ESMTokens is the token-matrix width methods G and H's own workers cut
	// to (BOS and the first 1,023 residues of a longer sequence, no EOS;
	// docs/method-cuts.md).
	ESMTokens = 1024
)

// Family is one kind of cache artefact (one folder of docs/embedding.md,
// "Layout"): a folder
// under sequence_info/ holding `<seq_id><suffix>` files.
type Family struct {
	// Name identifies the family in records, plans, metrics and messages
	// (method E: `methode_esm2/<parameter>/<model_key>`). It is the family's
	// folder under the kinflow naming; its folder under a Layout's naming is
	// Layout.Folder (never build a folder from Name).
	Name string
	// Format is the file format.
	Format Format
	// Dim is the model's embedding width.
	Dim int
	// PerResidue marks [L, Dim] artefacts; otherwise the artefact is [Dim].
	PerResidue bool
	// Persistent artefacts are reused across runs; ephemeral ones are
	// deleted after the prediction that consumed them.
	Persistent bool
	// Model names the protein language model (documentation and synthetic seeding).
	Model string
	// Content says what the artefact holds.
	Content string
}

// Suffix is the family's file-name suffix.
func (f Family) Suffix() string { return f.Format.Suffix() }

// Rows is the first dimension of a per-residue artefact for a sequence of
// seqLen residues, as the real model produces it; 0 for pooled artefacts.
func (f Family) Rows(seqLen int) int {
	if !f.PerResidue {
		return 0
	}
	switch f.Name {
	case FamilyESM1v:
		if seqLen > ESMWindow {
			return 2 * ESM1vHalf
		}
	case FamilyMethodGESM2:
		return min(seqLen, ESMTokens-1)
	}
	return seqLen
}

// Shape is the artefact's shape for a sequence of seqLen residues.
func (f Family) Shape(seqLen int) []int {
	if f.PerResidue {
		return []int{f.Rows(seqLen), f.Dim}
	}
	return []int{f.Dim}
}

// Family names (their folders under sequence_info/ in the kinflow naming,
// FoldersKinflow; FoldersReference renames five of them, Folders.Folder).
const (
	FamilyProtT5LastMean        = "prot_t5_last/mean_vecs"
	FamilyProtT5LastWeighted    = "prot_t5_last/weighted_vecs"
	FamilyProtT5Layer19Mean     = "prot_t5_layer_19/mean_vecs"
	FamilyProtT5Layer19Weighted = "prot_t5_layer_19/weighted_vecs"
	FamilyESM2Layer26Mean       = "esm2_layer_26/mean_vecs"
	FamilyESM2Layer26Weighted   = "esm2_layer_26/weighted_vecs"
	FamilyESM2Layer29Mean       = "esm2_layer_29/mean_vecs"
	FamilyESM2Layer29Weighted   = "esm2_layer_29/weighted_vecs"
	FamilyESMCLayer24Mean       = "esmc_layer_24/mean_vecs"
	FamilyESMCLayer24Weighted   = "esmc_layer_24/weighted_vecs"
	FamilyESMCLayer32Mean       = "esmc_layer_32/mean_vecs"
	FamilyESMCLayer32Weighted   = "esmc_layer_32/weighted_vecs"
	FamilyESM1bMethodD          = "esm1b_methodd"
	FamilyESM1v                 = "esm1v"
	FamilyMethodGESM2           = "methodg_esm2"
	FamilyESM2LayerLastMean     = "esm2_layer_last_mean"
	FamilyMethodIProtT5Residues = "methodi_prot_t5_residues"
	FamilyMethodKESMC           = "methodk_esmc"
	FamilyMethodEESM2Prefix     = "methode_esm2"
	FamilyMethodJContacts       = "methodj_contacts"
)

func fam(name string, format Format, dim int, perResidue, persistent bool, model, content string) Family {
	return Family{Name: name, Format: format, Dim: dim, PerResidue: perResidue,
		Persistent: persistent, Model: model, Content: content}
}

const (
	modelProtT5 = "ProtT5-XL"
	modelESM2   = "ESM2-650M"
	modelESMC   = "ESMC-600M"
	modelESM1b  = "ESM-1b-650M"
	modelESM1v  = "ESM-1v-650M"
)

// methodAFamilies are method A's 12 families, in the reference planner's
// order (roots esm2_layer_26, esm2_layer_29, esmc_layer_24, esmc_layer_32,
// prot_t5_layer_19, prot_t5_last; mean then weighted).
func methodAFamilies() []Family {
	type root struct {
		dir, model string
		dim        int
		layer      string
	}
	roots := []root{
		{"esm2_layer_26", modelESM2, DimESM2650M, "layer 26"},
		{"esm2_layer_29", modelESM2, DimESM2650M, "layer 29"},
		{"esmc_layer_24", modelESMC, DimESMC600M, "layer 24"},
		{"esmc_layer_32", modelESMC, DimESMC600M, "layer 32"},
		{"prot_t5_layer_19", modelProtT5, DimProtT5XL, "layer 19"},
		{"prot_t5_last", modelProtT5, DimProtT5XL, "last layer"},
	}
	out := make([]Family, 0, 12)
	for _, r := range roots {
		out = append(out,
			fam(r.dir+"/mean_vecs", FormatNPY, r.dim, false, true, r.model, "mean of "+r.layer+" residue embeddings"),
			fam(r.dir+"/weighted_vecs", FormatNPY, r.dim, false, true, r.model, "binding-site-weighted average of "+r.layer+" residue embeddings"))
	}
	return out
}

// Families returns every fixed family of the cache layout (method E's
// checkpoint-specific families come from Layout.MethodEFamilies; method J's
// contact maps are a method-local folder, Layout.MethodJCacheDir).
func Families() []Family {
	out := methodAFamilies()
	out = append(out,
		fam(FamilyESM1bMethodD, FormatNPY, DimESM1b650M, false, true, modelESM1b, "method D protein vector"),
		fam(FamilyESM1v, FormatNPY, DimESM1v650M, true, false, modelESM1v, "method F layer-33 per-residue matrix"),
		fam(FamilyMethodGESM2, FormatPT, DimESM2650M, true, false, modelESM2, "layer-33 per-residue tensor"),
		fam(FamilyESM2LayerLastMean, FormatNPY, DimESM2650M, false, true, modelESM2, "layer-33 mean vector"),
		fam(FamilyMethodIProtT5Residues, FormatNPY, DimProtT5XL, true, false, modelProtT5, "ProtT5 per-residue tensor"),
		// Method K's vector is ESM C's final trunk embedding (after the
		// last norm), not one of method A's ESM C hidden-state layers.
		fam(FamilyMethodKESMC, FormatNPY, DimESMC600M, false, true, modelESMC, "mean of the final (normed) residue embeddings"),
	)
	return out
}

// FamilyByName returns a fixed family by name.
func FamilyByName(name string) (Family, bool) {
	for _, f := range Families() {
		if f.Name == name {
			return f, true
		}
	}
	return Family{}, false
}

// MethodEFamily is method E's pooled-tensor family for one parameter
// (`kcat` or `km`) and checkpoint model key.
func MethodEFamily(parameter, modelKey string) (Family, error) {
	if parameter != "kcat" && parameter != "km" {
		return Family{}, fmt.Errorf("method E parameter %q: want kcat or km", parameter)
	}
	if !ValidSeqID(modelKey) {
		return Family{}, fmt.Errorf("method E model key %q is not a safe folder name", modelKey)
	}
	name := FamilyMethodEESM2Prefix + "/" + parameter + "/" + modelKey
	return fam(name, FormatPT, DimESM2650M, false, true, modelESM2, "checkpoint-specific attentive-pooled tensor"), nil
}

// MethodEParameter maps a target to method E's parameter folder name.
func MethodEParameter(t methods.Target) (string, bool) {
	switch t {
	case methods.Kcat:
		return "kcat", true
	case methods.Km:
		return "km", true
	}
	return "", false
}
