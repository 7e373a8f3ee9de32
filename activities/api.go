// Package activities holds the CPU activities of a prediction job, one per
// step of a prediction job: PrepareInput, BuildPlan, GPUHealth, TrackProgress,
// Predict, Cleanup, Finalize, and the bookkeeping the workflow records as it
// goes (RecordEvent, MarkStage). The embedding step activities themselves
// (one per step key) are the GPU host's, registered on the CPU queue too for
// local computation.
//
// Every activity is idempotent: it checks what exists before working and
// writes files atomically, so a retry after a crash never double-counts.
package activities

import (
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/gpuhealth"
)

// Error types of the CPU activities. The first four are errors that
// retrying cannot fix: the workflow fails the job at once with their
// message. ErrPlan is BuildPlan's failure, retried by the activity's policy.
const (
	ErrInvalidInput  = "InvalidInput"
	ErrUnknownMethod = "UnknownMethod"
	ErrJobNotFound   = "JobNotFound"
	ErrPrediction    = "PredictionFailed"
	ErrPlan          = "PlanFailed"
)

// JobRef names a job.
type JobRef struct {
	JobID string `json:"job_id"`
}

// StageRef names one stage of a job.
type StageRef struct {
	JobID      string `json:"job_id"`
	StageIndex int    `json:"stage_index"`
}

// Policy is the part of the worker's configuration the workflow decides
// with; it travels through PrepareInput's result so that workflow code stays
// deterministic (a changed environment never changes a replay).
type Policy struct {
	GPUConfigured     bool   `json:"gpu_configured"`
	FailClosed        bool   `json:"fail_closed"`
	JobTimeoutSeconds int    `json:"job_timeout_seconds"`
	GPUTaskQueue      string `json:"gpu_task_queue"`
	CPUTaskQueue      string `json:"cpu_task_queue"`
	// HeartbeatSeconds is the heartbeat timeout of long activities.
	HeartbeatSeconds int `json:"heartbeat_seconds"`
	// ShardSeqs is KINFLOW_STEP_SHARD_SEQS (0 in histories from before it:
	// embedjob.DefaultShardSeqs).
	ShardSeqs int `json:"shard_seqs,omitempty"`
	// SmallJobRows is KINFLOW_SMALL_JOB_ROWS: a job of at most this many
	// rows runs Predict and the annotations as local activities (0: never,
	// as in histories from before it).
	SmallJobRows int `json:"small_job_rows,omitempty"`
	// GPUSmallStepSeqs is KINFLOW_GPU_SMALL_STEP_SEQS (0: no small lane,
	// as in histories from before it).
	GPUSmallStepSeqs int `json:"gpu_small_step_seqs,omitempty"`
	// TrackTaskQueue is the progress trackers' own task queue
	// (config.TrackTaskQueue(CPUTaskQueue)); empty in histories from before it.
	TrackTaskQueue string `json:"track_task_queue,omitempty"`
	// TrackMinFiles is KINFLOW_TRACK_MIN_FILES: a stage missing fewer files
	// runs no tracker (its post-check records the count).
	TrackMinFiles int `json:"track_min_files,omitempty"`
	// OutageRideOutSeconds is KINFLOW_OUTAGE_RIDE_OUT_SECONDS: how long the
	// bookkeeping steps retry through an outage (0 in histories from
	// before it).
	OutageRideOutSeconds int `json:"outage_ride_out_seconds,omitempty"`
	// CacheFolders is KINFLOW_CACHE_FOLDERS, handed to the GPU and local
	// steps so that a host of another naming refuses them (empty in
	// histories from before it: kinflow).
	CacheFolders string `json:"cache_folders,omitempty"`
	// NoticeTaskQueue is the job notices' own task queue
	// (config.NoticeTaskQueue(CPUTaskQueue)); empty in histories from
	// before it: the workflow derives it from CPUTaskQueue.
	NoticeTaskQueue string `json:"notice_task_queue,omitempty"`
}

// TrackTaskQueue is config.TrackTaskQueue under the name the workflow code
// calls it by (the queue names are composed in internal/config only).
func TrackTaskQueue(cpu string) string { return config.TrackTaskQueue(cpu) }

// NoticeTaskQueue is config.NoticeTaskQueue under the name the workflow
// code calls it by.
func NoticeTaskQueue(cpu string) string { return config.NoticeTaskQueue(cpu) }

// StageInfo describes one (target, method) stage.
type StageInfo struct {
	Index       int    `json:"index"`
	Target      string `json:"target"`
	MethodKey   string `json:"method_key"`
	Profile     string `json:"profile"`
	GPUEligible bool   `json:"gpu_eligible"`
	// ValidRows is the number of rows the method will predict.
	ValidRows int `json:"valid_rows"`
}

// PreparedJob is PrepareInput's result.
type PreparedJob struct {
	// AlreadyDone is set when the job was Completed or Failed before: the
	// workflow then does nothing (duplicate guard).
	AlreadyDone bool        `json:"already_done"`
	Rows        int         `json:"rows"`
	Stages      []StageInfo `json:"stages"`
	DisableGPU  bool        `json:"disable_gpu"`
	Policy      Policy      `json:"policy"`
	// Notify is set when the job has a notify URL (a webhook at its end):
	// the workflow of a job without one spends nothing on notices.
	Notify bool `json:"notify,omitempty"`
}

// PlanInput asks for a stage's plan; PostCheck marks a re-plan after
// embedding work.
type PlanInput struct {
	JobID      string `json:"job_id"`
	StageIndex int    `json:"stage_index"`
	PostCheck  bool   `json:"post_check"`
}

// StepCount is one step of a plan with its number of sequences.
type StepCount struct {
	StepKey string `json:"step_key"`
	Count   int    `json:"count"`
}

// PlanSummary is BuildPlan's result: counts only, the plan itself is a file.
type PlanSummary struct {
	// NoPlan is set for a method without shared-cache planning (method J).
	NoPlan bool `json:"no_plan"`
	// NoSequences is set when the stage has no valid sequence to embed.
	NoSequences bool   `json:"no_sequences"`
	Profile     string `json:"profile"`
	Total       int    `json:"total"`
	Cached      int    `json:"cached_already"`
	Need        int    `json:"need_computation"`
	// Complete is set when nothing is left to compute (no missing file and
	// no step work: a method A id can miss only its binding-site row).
	Complete bool        `json:"complete"`
	Steps    []StepCount `json:"steps"`
	// WorkFile is the sparse embedjob.Work of the missing steps (empty when
	// nothing is missing).
	WorkFile string `json:"work_file"`
	// PlanFile is the full plan (JSON) on shared storage.
	PlanFile string `json:"plan_file"`
}

// Health is GPUHealth's result: the GPU service's health as the backend
// sees it, defined with its checker.
type Health = gpuhealth.Health

// Event is one gpuPrecompute transition of a stage, with the fields of an
// event in the status's gpuPrecompute object.
type Event struct {
	JobID      string `json:"job_id"`
	StageIndex int    `json:"stage_index"`
	Attempted  bool   `json:"attempted"`
	UsedGPU    bool   `json:"used_gpu"`
	Completed  bool   `json:"completed"`
	Failed     bool   `json:"failed"`
	Reason     string `json:"reason"`
	Message    string `json:"message,omitempty"`
	// Key names the event within its workflow run (run id and sequence):
	// a retried workflow task records its events again, and each is stored
	// once. Empty in histories from before keys.
	Key string `json:"key,omitempty"`
	// MethodKey and Target name the stage's method, as the workflow knows
	// it (StageInfo): RecordEvent then reads no stage row. Empty in
	// histories from before them: it reads the stage.
	MethodKey string `json:"method_key,omitempty"`
	Target    string `json:"target,omitempty"`
}

// StageMark sets a stage's status (and the job's running stage).
type StageMark struct {
	JobID      string `json:"job_id"`
	StageIndex int    `json:"stage_index"`
	Status     string `json:"status"` // running, completed, failed
	Message    string `json:"message,omitempty"`
	// EmbeddingState, when set, is the stage's embedding state.
	EmbeddingState string `json:"embedding_state,omitempty"`
}

// TrackInput starts a stage's progress tracker over its plan file.
type TrackInput struct {
	JobID      string `json:"job_id"`
	StageIndex int    `json:"stage_index"`
	PlanFile   string `json:"plan_file"`
}

// PredictResult counts a stage's rows.
type PredictResult struct {
	Predicted int  `json:"predicted"`
	Skipped   int  `json:"skipped"`
	Synthetic bool `json:"synthetic"`
	// Recheck, when set, counts the cached files that changed while the
	// method read them: the stage's results are not written
	// yet; the workflow has the files computed again and calls Predict
	// once more, which predicts only their units.
	Recheck int `json:"recheck,omitempty"`
}

// FinalizeInput ends a job.
type FinalizeInput struct {
	JobID   string `json:"job_id"`
	Failed  bool   `json:"failed"`
	Message string `json:"message,omitempty"`
}

// FinalizeResult reports the end state.
type FinalizeResult struct {
	Status   string `json:"status"`
	Refunded int    `json:"refunded"`
}
