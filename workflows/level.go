package workflows

import "github.com/kinflow/kinflow/internal/embedjob"

// Changes are the ids of every workflow change made under the versioning
// rule (docs/workflows.md), of PredictionWorkflow and EmbedJob, in the order
// they were made. Each new change is added at the end
// (TestEveryChangeIsListed holds the list to the code).
var Changes = []string{
	embedjob.ShardsVersion,
	cleanupMarkVersion,
	pollTimeoutPostCheckVersion,
	trackerQueueVersion,
	recheckAfterReadVersion,
	smallJobLocalVersion,
	embedjob.SmallLaneVersion,
	notifyVersion,
	quietStagesVersion,
	gpuHealthLocalVersion,
	smallJobInlineGPUVersion,
	rideOutVersion,
}

// Level is this build's workflow code level: one more for every change and
// every revision. A newer worker can go on with any run an older one began
// (its changes are behind GetVersion); an older one cannot go on with a run
// a newer one began, so a CPU worker records its level in the database at
// start and one of a lower level refuses to start (store.ClaimWorkflowLevel).
func Level() int { return len(Changes) + Rev }
