package provenance

// Stage is the provenance of one stage's predictions, as the JSON result
// and the final status carry it: which method and version, which engine
// (and its fingerprint), and the fingerprint of each artefact family the
// stage read.
type Stage struct {
	// Method is the method key; ModelVersion its model_version (bumped
	// whenever a change would alter predicted values).
	Method       string `json:"method"`
	ModelVersion string `json:"modelVersion"`
	// Engine is "synthetic" or "command"; EngineFingerprint the id of the
	// command engine's program and model files (or of the synthetic engine).
	Engine            string `json:"engine"`
	EngineFingerprint string `json:"engineFingerprint"`
	// Families maps each family the stage read to its recorded fingerprint
	// id, "unverified" when the family has no record (files of unknown
	// origin, such as the reference deployment's, until `kinflow cache
	// adopt`), or a "synthetic-…" id.
	Families map[string]string `json:"families,omitempty"`
	// Synthetic is true when the predictions or any artefact they read are
	// synthetic stand-ins: such numbers are not predictions.
	Synthetic bool `json:"synthetic"`
	// SyntheticArtefacts is true when an artefact the stage read is
	// synthetic (whatever the engine).
	SyntheticArtefacts bool `json:"syntheticArtefacts,omitempty"`
	// Unverified lists the families read whose files are not verified.
	Unverified []string `json:"unverified,omitempty"`
	// PredictionsCached is how many of the stage's prediction units were
	// served from the prediction cache (internal/predcache) instead of the
	// engine; CachedRows says which input rows they belong to.
	PredictionsCached int         `json:"predictionsCached"`
	CachedRows        []CachedRow `json:"cachedRows,omitempty"`
	// Citation is how to cite the method that made the stage's numbers
	// ("Authors. Title. URL. Code: repository."), from its descriptor;
	// empty where the catalogue knows no real publication (the built-in
	// labels' placeholders).
	Citation string `json:"citation,omitempty"`
}

// CachedRow is one input row (0-based) served, wholly or in part, from the
// prediction cache: how many of its units, and when the earliest of them
// was first computed (RFC 3339, UTC).
type CachedRow struct {
	Row             int    `json:"row"`
	Units           int    `json:"units"`
	FirstComputedAt string `json:"firstComputedAt"`
}

// UnverifiedID is the Families value of a family without a record.
const UnverifiedID = "unverified"
