// Package gpujob is the contract of one GPU embedding job: the EmbedJob
// workflow's input, the work file that carries SEED-SPEC §4.2's submit payload
// by reference, the step activities' input and result, and the status the
// GPU service API reports. The backend, the workflows and the GPU host all use
// it; it depends on nothing.
package gpujob

import "time"

// WorkflowName is the EmbedJob workflow type.
const WorkflowName = "EmbedJob"

// StatusQuery is the query name EmbedJob answers with its Status.
const StatusQuery = "status"

// WorkflowID is the workflow ID of a GPU embedding job (its id is the 32-hex
// GPU job id of the GPU service API).
func WorkflowID(gpuJobID string) string { return "embed:" + gpuJobID }

// Input is the input of the EmbedJob workflow. It carries SEED-SPEC
// §4.2's submit fields; the large ones (step_work, seq_id_to_seq) travel by
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
}

// Work is the content of Input.WorkFile: exactly §4.2's submit
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
}

// StepResult reports one step's outcome.
type StepResult struct {
	StepKey string `json:"step_key"`
	// Requested is the number of sequences the step was given.
	Requested int `json:"requested"`
	// Written counts files written by this run; Existing those already there.
	Written  int `json:"written"`
	Existing int `json:"existing"`
	// Missing lists expected files that are absent after the step (seq_id: path).
	Missing []string `json:"missing,omitempty"`
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
