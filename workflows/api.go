// Package workflows holds kinflow's Temporal workflows: PredictionWorkflow (one
// job) and EmbedJob (one remote GPU embedding job), with the names, IDs and
// payload types other packages use.
package workflows

import (
	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/gpujob"
)

// Workflow type names, stable across releases: histories refer to them.
const (
	PredictionWorkflowName = "PredictionWorkflow"
	EmbedJobWorkflowName   = gpujob.WorkflowName
)

// Search attributes kept current for the Temporal UI.
var (
	SearchAttrJobID  = temporal.NewSearchAttributeKeyKeyword("JobId")
	SearchAttrMethod = temporal.NewSearchAttributeKeyKeyword("Method")
	SearchAttrStage  = temporal.NewSearchAttributeKeyKeyword("Stage")
)

// StatusQuery is the query name both workflows answer with their status.
const StatusQuery = gpujob.StatusQuery

// PredictionWorkflowID is the workflow ID of a prediction job.
func PredictionWorkflowID(jobID string) string { return "prediction:" + jobID }

// EmbedJobWorkflowID is the workflow ID of a GPU embedding job.
func EmbedJobWorkflowID(gpuJobID string) string { return gpujob.WorkflowID(gpuJobID) }

// Aliases of the GPU job contract, kept here for the packages that name them
// through workflows.
type (
	// EmbedJobInput is gpujob.Input.
	EmbedJobInput = gpujob.Input
	// EmbedWork is gpujob.Work.
	EmbedWork = gpujob.Work
	// StepInput is gpujob.StepInput.
	StepInput = gpujob.StepInput
	// StepResult is gpujob.StepResult.
	StepResult = gpujob.StepResult
	// EmbedJobStatus is gpujob.Status.
	EmbedJobStatus = gpujob.Status
)
