package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/loadgen"
)

// fairEnv is the shape of the fairness runs: one GPU slot, the synthetic
// GPU host at 20 ms a sequence, every step on the GPU queue proper, so
// every job's embeddings wait their turn for the one slot.
var fairEnv = []string{"KINFLOW_GPU_SLOTS=1", "GPU_EMBED_SYNTHETIC_DELAY_MS=20", "KINFLOW_GPU_SMALL_STEP_SEQS=0"}

// fairRows is the rows of each job of the fairness runs.
const fairRows = 150

// fairness measures one key's job behind another key's backlog of
// b.fair jobs, on a deployment started first come first served
// (KINFLOW_FAIRNESS=false) and on one with fairness: B's time ÷ its time
// alone, how many of A's jobs it overtook, and A's throughput beside
// (A's and B's rows per second ÷ A's alone). Then, with fairness, two keys
// of weights 1 and 2 with a backlog each: the jobs each had done when the
// first backlog ended.
func (b *bench) fairness(ctx context.Context) error {
	fmt.Printf("fairness: %d jobs of %d rows for key A, then one for key B (%s)\n", b.fair, fairRows, strings.Join(fairEnv, " "))
	for _, on := range []bool{false, true} {
		env := append(append(append([]string(nil), b.env...), fairEnv...), fmt.Sprintf("KINFLOW_FAIRNESS=%t", on))
		d, err := loadgen.StartDev(ctx, loadgen.DevOptions{Kinflow: b.kinflow, TemporalCLI: b.temporal, Workers: 1, Env: env})
		if err != nil {
			return err
		}
		err = b.fairRun(ctx, d, on)
		d.Stop()
		if err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) fairRun(ctx context.Context, d *loadgen.Dev, on bool) error {
	mode := "first come, first served"
	if on {
		mode = "fair by key"
	}
	a, err := loadgen.NewTenant(ctx, d.BaseURL, "A", "127.0.0.2")
	if err != nil {
		return err
	}
	bt, err := loadgen.NewTenant(ctx, d.BaseURL, "B", "127.0.0.3")
	if err != nil {
		return err
	}
	// A's backlog alone: its throughput when nobody else asks.
	start := time.Now()
	alone, err := loadgen.SubmitBacklog(ctx, a, b.fair, fairRows, uint64(time.Now().UnixNano()), start, b.poll)
	if err != nil {
		return err
	}
	aloneWall := loadgen.FairResult{Backlog: alone}.BacklogWall()
	r, err := loadgen.RunFairness(ctx, a, bt, b.fair, fairRows, time.Second, b.poll)
	if err != nil {
		return err
	}
	if err := r.Check(); err != nil {
		return err
	}
	rowsAlone := float64(b.fair*fairRows) / aloneWall.Seconds()
	wall := max(r.BacklogWall(), r.WithBacklog.Ended-r.Backlog[0].Submitted)
	rowsBeside := float64((b.fair+1)*fairRows) / wall.Seconds()
	fmt.Printf("  %-25s %s; rows/s of A alone %.0f, of A and B together %.0f (×%.2f)\n", mode+":", r.Summary(), rowsAlone, rowsBeside, rowsBeside/rowsAlone)
	if !on {
		return nil
	}
	light, err := loadgen.NewTenant(ctx, d.BaseURL, "C", "127.0.0.4")
	if err != nil {
		return err
	}
	heavy, err := loadgen.NewTenant(ctx, d.BaseURL, "D", "127.0.0.5")
	if err != nil {
		return err
	}
	if _, err := d.Run(ctx, "key", "weight", heavy.Suffix(), "2"); err != nil {
		return err
	}
	w, err := loadgen.RunWeighted(ctx, light, heavy, b.fair, fairRows, b.poll)
	if err != nil {
		return err
	}
	fmt.Printf("  %-25s key D (weight 2) had %d jobs done, key C (weight 1) %d, when the first backlog ended (×%.2f)\n", "weights 1 and 2:", w.HeavyDone, w.LightDone, w.Ratio())
	return nil
}
