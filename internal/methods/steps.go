package methods

// GPU step keys. A step key is also the Temporal activity
// type of the GPU worker that runs it.
const (
	StepMethodAT5Full                 = "methoda_t5_full"
	StepMethodAESM2Layers             = "methoda_esm2_layers"
	StepMethodAESMCLayers             = "methoda_esmc_layers"
	StepProtT5Mean                    = "prot_t5_mean"
	StepMethodDESM1b                  = "methodd_esm1b"
	StepMethodFESM1v                  = "methodf_esm1v"
	StepMethodEEmbedKcat              = "methode_embed_kcat"
	StepMethodEEmbedKm                = "methode_embed_km"
	StepMethodGESM2                   = "methodg_esm2"
	StepMethodHESM2LastMean           = "methodh_esm2_last_mean"
	StepMethodIProtT5Residues         = "methodi_prot_t5_residues"
	StepMethodKESMCMean               = "methodk_esmc_mean"
	DeprecatedStepMethodABindsites    = "methoda_bindsites"
	DeprecatedStepMethodAProtT5Layers = "methoda_prott5_layers"
)

// ActiveSteps returns the active step keys, method A's three first (its
// methoda_t5_full writes the binding-site rows the other two read).
func ActiveSteps() []string {
	return []string{StepMethodAT5Full, StepMethodAESM2Layers, StepMethodAESMCLayers, StepProtT5Mean,
		StepMethodDESM1b, StepMethodFESM1v, StepMethodEEmbedKcat, StepMethodEEmbedKm, StepMethodGESM2,
		StepMethodHESM2LastMean, StepMethodIProtT5Residues, StepMethodKESMCMean}
}

// DeprecatedSteps returns the deprecated step keys, each mapped to the active
// key that replaces it: methoda_t5_full covers binding sites and the ProtT5
// outputs, so callers that still send the old keys keep working.
func DeprecatedSteps() map[string]string {
	return map[string]string{
		DeprecatedStepMethodABindsites:    StepMethodAT5Full,
		DeprecatedStepMethodAProtT5Layers: StepMethodAT5Full,
	}
}

// IsActiveStep reports whether key is an active step key.
func IsActiveStep(key string) bool {
	switch key {
	case StepMethodAT5Full, StepMethodAESM2Layers, StepMethodAESMCLayers, StepProtT5Mean,
		StepMethodDESM1b, StepMethodFESM1v, StepMethodEEmbedKcat, StepMethodEEmbedKm, StepMethodGESM2,
		StepMethodHESM2LastMean, StepMethodIProtT5Residues, StepMethodKESMCMean:
		return true
	}
	return false
}

// CanonicalStep maps a step key accepted at the edges to the active key that
// runs it: an active key maps to itself, a deprecated key to its replacement;
// anything else is false.
func CanonicalStep(key string) (string, bool) {
	if IsActiveStep(key) {
		return key, true
	}
	switch key {
	case DeprecatedStepMethodABindsites, DeprecatedStepMethodAProtT5Layers:
		return StepMethodAT5Full, true
	}
	return "", false
}
