package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/store"
)

// provenanceFile is the provenance of a stage (in its folder) or of a job
// (in jobs/<id>/): which method, version and engine made the numbers, and
// which artefact families they read (internal/provenance).
const provenanceFile = jobfiles.ProvenanceFile

// JobProvenance is jobs/<id>/provenance.json, read by the API for the final
// status and the JSON result.
type JobProvenance struct {
	Stages []provenance.Stage `json:"stages"`
	// Notice is one sentence for the status when the job read cached files
	// of unknown origin (unverified) or synthetic artefacts.
	Notice string `json:"notice,omitempty"`
}

// realOnly reports whether plans must count synthetic files as missing (a
// real engine never consumes synthetic files unflagged): whenever a real step program can replace them, that is
// when this worker's own executor is `command` (the local fallback) or the
// GPU service reports a `command` executor in its /health (read through the
// health cache). Otherwise nothing real could be computed, and a result
// built on synthetic files is flagged synthetic instead (applyProvenance).
func (a *Activities) realOnly(ctx context.Context) bool {
	if a.Config.StepExecutor == "command" {
		return true
	}
	if a.Config.GPUEmbedServiceURL == "" || a.Health == nil {
		return false
	}
	h := a.Health.Check(ctx)
	return h.Online && h.Executor == "command"
}

// planRealOnly is realOnly for a stage's first plan, which decides what is
// computed (synthetic files go to the real step programs). A post-check
// demands real files only when this worker's own executor could compute
// them: after a failed remote phase the fail-open fallback computes locally,
// and a synthetic fallback's files are accepted, the prediction built on them
// being flagged synthetic (applyProvenance), rather than failing the job.
func (a *Activities) planRealOnly(ctx context.Context, postCheck bool) bool {
	if postCheck {
		return a.Config.StepExecutor == "command"
	}
	return a.realOnly(ctx)
}

// stageProvenance computes the provenance of a stage before its
// prediction (predict stores it, with the cache's use, in the stage
// folder's provenance.json once the predictions are made): method and model version,
// the engine's fingerprint, and the recorded fingerprint of every family
// the stage's plan reads, with the families of unknown origin and whether
// any artefact read is synthetic (per file: the family's record, and its
// manifest where the family holds files of two origins).
func (a *Activities) stageProvenance(ref StageRef, d *methods.Descriptor) (provenance.Stage, error) {
	st := provenance.Stage{Method: d.Key, ModelVersion: d.ModelVersion, Engine: a.Config.PredictionEngine, Citation: d.Citation()}
	if a.Config.PredictionEngine == "synthetic" {
		st.EngineFingerprint = methods.SyntheticEngineFingerprint(d).ID()
		st.Synthetic = true
	} else {
		fp, err := methods.EngineFingerprint(d, provenance.SharedHashCache(), methodECheckpoints(d, a.Config.MethodECheckpointRoot))
		if err != nil {
			return st, fmt.Errorf("fingerprint of method %s's engine: %w", d.Key, err)
		}
		st.EngineFingerprint = fp.ID()
	}
	dir, err := a.stageDir(ref.JobID, ref.StageIndex)
	if err != nil {
		return st, err
	}
	var plan struct {
		Expected map[string][]string `json:"expected_paths_by_seq"`
	}
	err = fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	byDir := map[string][]string{} // family folder → seq ids read there
	for sid, paths := range plan.Expected {
		for _, p := range paths {
			byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], sid)
		}
	}
	for _, fd := range slices.Sorted(maps.Keys(byDir)) {
		fam := embedjob.FamilyName(a.Layout, fd)
		rec, err := provenance.ReadRecorded(fd)
		if err != nil {
			return st, err
		}
		if st.Families == nil {
			st.Families = map[string]string{}
		}
		if rec == nil {
			st.Families[fam] = provenance.UnverifiedID
		} else {
			st.Families[fam] = rec.ID
		}
		if rec == nil || (rec.Unverified && rec.Adopted == nil) {
			st.Unverified = append(st.Unverified, fam)
		}
		switch {
		case rec.AllSynthetic() && !rec.Unverified:
			st.SyntheticArtefacts = true
		case rec == nil || rec.SyntheticFiles || rec.AllSynthetic():
			entries := embedding.ReadManifest(fd)
			for _, sid := range byDir[fd] {
				if entries[sid].Synthetic {
					st.SyntheticArtefacts = true
					break
				}
			}
		}
	}
	st.Synthetic = st.Synthetic || st.SyntheticArtefacts
	return st, nil
}

// applyProvenance flags a stage's predictions synthetic when a real engine
// nevertheless read synthetic artefacts: such numbers are stand-ins, flagged
// exactly as the synthetic engine's are.
func applyProvenance(out *jobfiles.StagePredictions, st provenance.Stage, d *methods.Descriptor) {
	if st.SyntheticArtefacts && !out.Synthetic {
		out.Synthetic = true
		out.Source = "Synthetic placeholder from " + d.DisplayName + " (built on synthetic embeddings, not a prediction)"
	}
}

// writeJobProvenance gathers the stages' provenance into
// jobs/<id>/provenance.json and returns it.
func (a *Activities) writeJobProvenance(job *store.Job) (JobProvenance, error) {
	jobID, stages := job.ID, len(job.Targets)
	var jp JobProvenance
	var unverified []string
	synthetic := false
	for i := 0; i < stages; i++ {
		dir, err := a.stageDir(jobID, i)
		if err != nil {
			return jp, err
		}
		var st provenance.Stage
		if err := fsutil.ReadJSON(filepath.Join(dir, provenanceFile), &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // the stage never reached its prediction
			}
			return jp, err
		}
		jp.Stages = append(jp.Stages, st)
		unverified = append(unverified, st.Unverified...)
		synthetic = synthetic || st.SyntheticArtefacts
	}
	sort.Strings(unverified)
	unverified = compactStrings(unverified)
	var notes []string
	if len(unverified) > 0 {
		notes = append(notes, "This job used cached embeddings of unverified origin ("+strings.Join(unverified, ", ")+
			"): an operator can check them with `kinflow cache verify` and `kinflow cache adopt`.")
	}
	if synthetic {
		notes = append(notes, "Some embeddings this job read are synthetic stand-ins: its numbers are not predictions.")
	}
	jp.Notice = strings.Join(notes, " ")
	dir, err := a.jobDir(jobID)
	if err != nil {
		return jp, err
	}
	return jp, fsutil.WriteJSONAtomic(filepath.Join(dir, provenanceFile), jp)
}

func compactStrings(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// methodECheckpoints is the checkpoint root a method's environment names
// (method E's METHODE_CHECKPOINT_ROOT: its model weights), for the engine's
// fingerprint; "" for the other methods.
func methodECheckpoints(d *methods.Descriptor, root string) string {
	for _, e := range d.EnvPaths {
		if strings.Contains(e.Value, "{methode_checkpoint_root}") {
			return root
		}
	}
	return ""
}
