// Package embedjob is the embed-job domain: one GPU embedding job (a POST
// /embed/jobs of docs/gpu-host.md, "HTTP API") from its contract to its computation, in the shape of a domain
// package of temporalio/reference-app-orders-go:
//
//   - api.go: the types and names other packages use (workflow name and ID,
//     queries, input and result payloads, error types, the work file and the
//     step-program manifest);
//   - workflows.go: the EmbedJob workflow;
//   - activities.go: the step activities, one per step key;
//   - worker.go: the GPU task queue's worker and the CPU worker's local
//     steps (fail-open) — the same activities on either queue;
//   - engine.go, batch.go, dedupe.go: skipping what exists, token-budget
//     batches, out-of-memory splits, file checks, leases;
//   - command.go, synthetic.go: the executors that compute a batch;
//   - settings.go, envfile.go, joblog.go: the GPU host's env file and step logs.
//
// Both ways a GPU job starts — the backend's PredictionWorkflow starting
// EmbedJob as a child, and POST /embed/jobs on a GPU host (gpu-worker/, a thin
// HTTP layer on top of this package) — run the same workflow and activities.
package embedjob

import "time"

// Application error types of the embed job (the workflows and the Temporal
// UI show them).
const (
	// ErrTypeInvalidStepInput: the work file or step input is wrong; not retried.
	ErrTypeInvalidStepInput = "InvalidStepInput"
	// ErrTypeStepConfig: this host cannot run the step as configured; not retried.
	ErrTypeStepConfig = "StepConfig"
	// ErrTypeStepFailed: the step program failed; retried (written files are kept).
	ErrTypeStepFailed = "StepFailed"
	// ErrTypeEmbedStepFailed: EmbedJob's own failure, naming the step that
	// failed after its retries.
	ErrTypeEmbedStepFailed = "EmbedStepFailed"
)

// MissingSampleSize bounds StepResult.MissingSample: results and error
// details travel through the workflow history, where Temporal rejects a
// payload over 2 MB; 10,000 missing paths would be about 1 MB of "seq_id:
// path" strings, and a failure of a larger step would break the history.
const MissingSampleSize = 20

// WorkflowName is the EmbedJob workflow type.
const WorkflowName = "EmbedJob"

// StatusQuery is the query name EmbedJob answers with its Status.
const StatusQuery = "status"

// WorkflowID is the workflow ID of a GPU embedding job (its id is the 32-hex
// GPU job id of the GPU service API).
func WorkflowID(gpuJobID string) string { return "embed:" + gpuJobID }

// Input is the input of the EmbedJob workflow. It carries the fields of a
// GPU job's submit (method_key, target, profile, step_work, seq_id_to_seq); the large ones (step_work, seq_id_to_seq) travel by
// reference: WorkFile is a JSON file on shared storage holding a Work.
type Input struct {
	GPUJobID  string `json:"job_id"`
	MethodKey string `json:"method_key"`
	Target    string `json:"target"`
	Profile   string `json:"profile"`
	// Steps lists the step keys with work, in execution order.
	Steps []string `json:"steps"`
	// StepCounts is the number of sequences each step was given.
	StepCounts map[string]int `json:"step_counts"`
	// WorkFile is the absolute path of the Work JSON file.
	WorkFile string `json:"work_file"`
	// HeartbeatSeconds is the step activities' heartbeat timeout; 0 means
	// one minute.
	HeartbeatSeconds int `json:"heartbeat_seconds,omitempty"`
	// GPUTaskQueue is the queue the step activities run on.
	GPUTaskQueue string `json:"gpu_task_queue"`
	// ShardSeqs is the most sequences one shard of a step holds
	// (KINFLOW_STEP_SHARD_SEQS); 0 means DefaultShardSeqs.
	ShardSeqs int `json:"shard_seqs,omitempty"`
	// SmallStepSeqs is KINFLOW_GPU_SMALL_STEP_SEQS: a step of at most this
	// many sequences runs on config.SmallTaskQueue(GPUTaskQueue); 0 (and every
	// input from before the small lane) means none does.
	SmallStepSeqs int `json:"small_step_seqs,omitempty"`
	// Rev is the workflow revision the job was started under
	// (embedjob.Rev): a run with Rev >= 1 takes every change of
	// docs/workflows.md's table at version 1 without asking GetVersion.
	// 0 (every input from before revisions) asks, as before.
	Rev int `json:"rev,omitempty"`
	// CacheFolders is the submitter's cache folder naming
	// (KINFLOW_CACHE_FOLDERS); empty (inputs from before namings) is kinflow.
	// A host of another naming refuses the job's steps.
	CacheFolders string `json:"cache_folders,omitempty"`
}

// DefaultShardSeqs is the shard size when none is given (config's
// KINFLOW_STEP_SHARD_SEQS explains the figure).
const DefaultShardSeqs = 500

// MaxConcurrentShards bounds the shards of one step in flight at once: the
// GPU hosts' slots bound the work itself, this bounds the pending
// activities in one workflow's history and mutable state.
const MaxConcurrentShards = 16

// Work is the content of Input.WorkFile: exactly a GPU job's submit
// payload.
type Work struct {
	MethodKey  string              `json:"method_key"`
	Target     string              `json:"target"`
	Profile    string              `json:"profile"`
	StepWork   map[string][]string `json:"step_work"`
	SeqIDToSeq map[string]string   `json:"seq_id_to_seq"`
}

// StepInput is the input of one GPU step activity; the activity type name is
// the step key itself (methoda_t5_full, …).
type StepInput struct {
	GPUJobID string `json:"job_id"`
	StepKey  string `json:"step_key"`
	// WorkFile is the Work file; the step reads its own seq ids and
	// sequences from it.
	WorkFile string `json:"work_file"`
	// Shard and Shards cut the step: this activity runs shard Shard
	// (0-based) of Shards, its share of the step's seq ids in sorted order
	// (ShardOf). Shards 0 or 1 means the whole step.
	Shard  int `json:"shard,omitempty"`
	Shards int `json:"shards,omitempty"`
	// CacheFolders is the submitter's cache folder naming (Input.CacheFolders;
	// empty: kinflow). The step is refused, not retried, by a host whose own
	// naming differs: it would write where the submitter never looks.
	CacheFolders string `json:"cache_folders,omitempty"`
}

// ShardCount is how many shards a step of count sequences is cut into.
func ShardCount(count, shardSeqs int) int {
	if shardSeqs <= 0 {
		shardSeqs = DefaultShardSeqs
	}
	return max(1, (count+shardSeqs-1)/shardSeqs)
}

// ShardOf returns shard i of n of ids (sorted by the caller): an even split,
// so every id is in exactly one shard whatever the count.
func ShardOf[T any](ids []T, i, n int) []T {
	if n <= 1 {
		return ids
	}
	return ids[i*len(ids)/n : (i+1)*len(ids)/n]
}

// StepResult reports one step's outcome.
type StepResult struct {
	StepKey string `json:"step_key"`
	// Requested is the number of sequences the step was given.
	Requested int `json:"requested"`
	// Written counts files written by this run; Existing those already there.
	Written  int `json:"written"`
	Existing int `json:"existing"`
	// MissingSeqs counts the sequences with an expected file absent after
	// the step; MissingFiles the absent files.
	MissingSeqs  int `json:"missing_seqs"`
	MissingFiles int `json:"missing_files"`
	// MissingSample is the first MissingSampleSize absent files ("seq_id:
	// path"); MissingList, when files are missing, is the file on shared
	// storage listing every one ("seq_id: path: reason" per line).
	MissingSample []string `json:"missing_sample,omitempty"`
	MissingList   string   `json:"missing_list,omitempty"`
}

// Status is what EmbedJob's status query answers: the GPU service's
// GET /embed/jobs/{job_id} is built from it.
type Status struct {
	State      string         `json:"status"` // queued, running, done, failed
	Steps      map[string]int `json:"steps_done"`
	StepTotals map[string]int `json:"steps_total"`
	// Written counts, per step, the files this job wrote (the rest existed).
	Written    map[string]int `json:"steps_written,omitempty"`
	StartedAt  *time.Time     `json:"started_at,omitempty"`
	FinishedAt *time.Time     `json:"finished_at,omitempty"`
	Error      string         `json:"error,omitempty"`
}
