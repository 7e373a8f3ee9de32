package main

import (
	"context"
	"fmt"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/workflows"
)

// waitsLine reads the histories of a burst's jobs and sums them up
// (loadgen.WaitsOf): the median and the largest of each part over the jobs.
func waitsLine(ctx context.Context, d *loadgen.Dev, jobs []loadgen.Job) (string, error) {
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		return "", err
	}
	c, err := client.Dial(client.Options{HostPort: d.TemporalAddress, Namespace: cfg.TemporalNamespace, Logger: quietLogger{}})
	if err != nil {
		return "", fmt.Errorf("waits: connect to Temporal: %w", err)
	}
	defer c.Close()
	var all []loadgen.Waits
	for _, j := range jobs {
		if j.ID == "" {
			continue
		}
		var events []*historypb.HistoryEvent
		it := c.GetWorkflowHistory(ctx, workflows.PredictionWorkflowID(j.ID), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return "", fmt.Errorf("waits: history of job %s: %w", j.ID, err)
			}
			events = append(events, e)
		}
		w := loadgen.WaitsOf(events)
		w.Submit = j.Submit
		all = append(all, w)
	}
	return loadgen.SummarizeWaits(all), nil
}
