package main

import (
	"context"
	"fmt"

	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/workflows"
)

// dialTemporal connects to the deployment's Temporal dev server, in the
// namespace kinflow's defaults use; cfg is that default configuration.
func dialTemporal(d *loadgen.Dev) (*config.Config, client.Client, error) {
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		return nil, nil, err
	}
	c, err := client.Dial(client.Options{HostPort: d.TemporalAddress, Namespace: cfg.TemporalNamespace, Logger: quietLogger{}})
	if err != nil {
		return nil, nil, fmt.Errorf("connect to Temporal: %w", err)
	}
	return cfg, c, nil
}

// jobHistory is job jobID's workflow history, every event.
func jobHistory(ctx context.Context, c client.Client, jobID string) ([]*historypb.HistoryEvent, error) {
	return loadgen.History(ctx, c, workflows.PredictionWorkflowID(jobID))
}

// waitsLine reads the histories of a burst's jobs and sums them up
// (loadgen.WaitsOf): the median and the largest of each part over the jobs.
func waitsLine(ctx context.Context, d *loadgen.Dev, jobs []loadgen.Job) (string, error) {
	_, c, err := dialTemporal(d)
	if err != nil {
		return "", fmt.Errorf("waits: %w", err)
	}
	defer c.Close()
	var all []loadgen.Waits
	for _, j := range jobs {
		if j.ID == "" {
			continue
		}
		events, err := jobHistory(ctx, c, j.ID)
		if err != nil {
			return "", fmt.Errorf("waits: %w", err)
		}
		w := loadgen.WaitsOf(events)
		w.Submit = j.Submit
		all = append(all, w)
	}
	return loadgen.SummarizeWaits(all), nil
}
