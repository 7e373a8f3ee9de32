// Package workflows holds PredictionWorkflow (one prediction job) with the
// names, IDs and payload types other packages use. The GPU embedding job it
// starts as a child is internal/embedjob's EmbedJob.
package workflows

import (
	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/embedjob"
)

// PredictionWorkflowName is the workflow type of a prediction job, stable
// across releases: histories refer to it.
const PredictionWorkflowName = "PredictionWorkflow"

// Search attributes kept current for the Temporal UI.
var (
	SearchAttrJobID  = temporal.NewSearchAttributeKeyKeyword("JobId")
	SearchAttrMethod = temporal.NewSearchAttributeKeyKeyword("Method")
	SearchAttrStage  = temporal.NewSearchAttributeKeyKeyword("Stage")
)

// StatusQuery is the query name both workflows answer with their status.
const StatusQuery = embedjob.StatusQuery

// PredictionWorkflowID is the workflow ID of a prediction job.
func PredictionWorkflowID(jobID string) string { return "prediction:" + jobID }
