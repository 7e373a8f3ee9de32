package embedjob

import (
	"context"
	"errors"
	"sync"
)

// Device is a GPU host's turn-taking for its device. Every batch a step
// activity sends to its step program passes through Run:
//
//   - At most Places batches are handed over at once (KINFLOW_GPU_SLOTS).
//     When a place frees, the next batch is chosen by share: the batches
//     of the API key (its fairness key, which the step activity inherits
//     from its job) that has had the fewest turns for its weight go first,
//     first come first served within a key (stride scheduling). A key
//     whose job holds more activity slots than another's has more batches
//     waiting, never more turns: Temporal shares the slots between keys,
//     and this line shares the device. A small job's batch waits for the
//     batches already on the device, never for a large job's remaining
//     ones. A batch for a resident server is handed over once it is in the
//     server's line (Send); the server's window (KINFLOW_STEP_SERVER_AHEAD)
//     bounds what waits there, so a small job's batch waits behind at most
//     that many of a large job's.
//   - Batches of one step key that are waiting when a place frees run as one
//     batch, as far as the step's token budget and sequence cap allow. A
//     public service sees many small jobs at once; on a GPU a batch of three
//     sequences costs about what a full one does, so fifty 3-row jobs cost
//     a few device batches instead of fifty. Each sequence is still computed
//     by its own job's activity: the files decide, and every caller checks
//     its own files after the batch, exactly as after a batch of its own.
//
// A batch waits here only for batches that are running, which need nothing
// the waiter holds: the wait always ends (docs/workflows.md, "Waits").
type Device struct {
	mu sync.Mutex
	// free is how many places are free; line the batches waiting for one,
	// in arrival order.
	free int
	line []*devBatch
	// pass is each share's virtual time: its turns so far, each counted
	// 1/weight; now is the virtual time of the last turn given. A share
	// that comes back after a pause starts at now, not where it left off,
	// so it cannot claim the turns it did not ask for.
	pass map[string]float64
	now  float64
	// waiting are the batches not yet on the device by step key, for the
	// batches they may ride with.
	waiting map[string][]*devBatch
}

// Share is whose work a batch is: the fairness key and weight of the job it
// serves (internal/fairness). The zero Share is one share of its own.
type Share struct {
	Key    string
	Weight float64
}

// devBatch is one caller's batch waiting for the device.
type devBatch struct {
	job BatchJob
	// done receives the outcome once a leader ran this batch with its own.
	done  chan error
	taken bool
	// turn receives once the batch is given a place (granted set).
	turn    chan struct{}
	granted bool
}

// errRunAlone tells a caller whose batch rode with another caller's that
// the leader's context ended mid-batch: it runs its batch again itself.
var errRunAlone = errors.New("the batch this one joined was cancelled")

// NewDevice returns a device with places batches at once (below 1 means 1).
func NewDevice(places int) *Device {
	return &Device{free: max(places, 1), pass: map[string]float64{}, waiting: map[string][]*devBatch{}}
}

// enter puts b in line for a place, or gives it one at once when one is
// free and nobody waits; d.mu is held.
func (d *Device) enter(b *devBatch) {
	if d.free > 0 && len(d.line) == 0 {
		d.free--
		b.granted = true
		b.turn <- struct{}{}
		return
	}
	key := b.job.Share.Key
	queued := false
	for _, o := range d.line {
		if o.job.Share.Key == key {
			queued = true
			break
		}
	}
	if !queued {
		d.pass[key] = max(d.pass[key], d.now)
	}
	d.line = append(d.line, b)
}

// leave takes b out of the line (it was cancelled, or rides with another
// batch); d.mu is held.
func (d *Device) leave(b *devBatch) {
	for i, o := range d.line {
		if o == b {
			d.line = append(d.line[:i], d.line[i+1:]...)
			return
		}
	}
}

// release frees a place: the first waiting batch of the share with the
// least virtual time gets it.
func (d *Device) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.line) == 0 {
		d.free++
		return
	}
	best := 0
	for i, o := range d.line {
		if d.pass[o.job.Share.Key] < d.pass[d.line[best].job.Share.Key] {
			best = i
		}
	}
	b := d.line[best]
	d.line = append(d.line[:best], d.line[best+1:]...)
	key := b.job.Share.Key
	d.now = d.pass[key]
	w := b.job.Share.Weight
	if !(w > 0) {
		w = 1
	}
	d.pass[key] += 1 / w
	if len(d.pass) > 4096 {
		// A key with nothing in line starts at now when it comes back, so
		// forgetting one whose time is behind now changes nothing.
		inLine := map[string]bool{}
		for _, o := range d.line {
			inLine[o.job.Share.Key] = true
		}
		for k := range d.pass {
			if !inLine[k] && d.pass[k] <= d.now {
				delete(d.pass, k)
			}
		}
	}
	b.granted = true
	b.turn <- struct{}{}
}

// sendFunc hands a batch to its step program and returns the channel that
// receives the batch's outcome once (the runner's SendBatch), or an error
// when the batch was not handed over.
type sendFunc func(context.Context, BatchJob) (<-chan error, error)

// Run runs job through run when its turn comes, with the batches of the
// same step that wait beside it (budget and maxSeqs bound the joined
// batch, as PackBatches does): Send with a run that holds the device place
// until the batch is done. A nil Device runs job at once.
func (d *Device) Run(ctx context.Context, job BatchJob, budget, maxSeqs int, run func(context.Context, BatchJob) error) error {
	done, err := d.Send(ctx, job, budget, maxSeqs, func(ctx context.Context, b BatchJob) (<-chan error, error) {
		return settled(run(ctx, b)), nil
	})
	if err != nil {
		return err
	}
	return <-done
}

// Send hands job to send when its turn comes, joined with the batches of
// the same step that wait beside it, and returns the channel of its
// outcome. The place on the device is held until send returns: a resident
// server's send returns once the batch is in the server's line (up to
// KINFLOW_STEP_SERVER_AHEAD batches), so the next batch's turn comes while
// this one computes; a one-shot program's send returns when it is done. A
// batch that rode with another caller's returns once that batch is done. A
// nil Device sends job at once.
func (d *Device) Send(ctx context.Context, job BatchJob, budget, maxSeqs int, send sendFunc) (<-chan error, error) {
	if d == nil {
		return send(ctx, job)
	}
	for {
		done, err := d.sendOnce(ctx, job, budget, maxSeqs, send)
		if !errors.Is(err, errRunAlone) || ctx.Err() != nil {
			return done, err
		}
	}
}

// settled is a channel that holds err.
func settled(err error) <-chan error {
	c := make(chan error, 1)
	c <- err
	return c
}

// rode is the outcome of a batch that another caller ran with its own: a
// rider sends its batch again itself when that caller was cancelled.
func rode(err error) (<-chan error, error) {
	if errors.Is(err, errRunAlone) {
		return nil, err
	}
	return settled(err), nil
}

func (d *Device) sendOnce(ctx context.Context, job BatchJob, budget, maxSeqs int, send sendFunc) (<-chan error, error) {
	me := &devBatch{job: job, done: make(chan error, 1), turn: make(chan struct{}, 1)}
	d.mu.Lock()
	d.waiting[job.StepKey] = append(d.waiting[job.StepKey], me)
	d.enter(me)
	d.mu.Unlock()

	select {
	case <-me.turn:
	case err := <-me.done:
		// Another caller ran this batch with its own; a place given to it
		// meanwhile goes to the next in line.
		d.mu.Lock()
		granted := me.granted
		d.mu.Unlock()
		if granted {
			d.release()
		}
		return rode(err)
	case <-ctx.Done():
		d.mu.Lock()
		taken, granted := me.taken, me.granted
		if !taken {
			d.remove(me)
		}
		if !granted {
			d.leave(me)
		}
		d.mu.Unlock()
		if granted {
			d.release()
		}
		if taken {
			// The batch is running on our behalf: its files are ours.
			return rode(<-me.done)
		}
		return nil, ctx.Err()
	}
	d.mu.Lock()
	if me.taken {
		// A leader took this batch between our turn and the lock.
		d.mu.Unlock()
		d.release()
		return rode(<-me.done)
	}
	d.remove(me)
	riders := d.gather(me, budget, maxSeqs)
	d.mu.Unlock()

	done, err := send(ctx, joinRiders(job, riders))
	d.release()
	if err != nil {
		done = settled(err)
	}
	if len(riders) == 0 {
		return done, err
	}
	out := make(chan error, 1)
	go func() {
		err := <-done
		for _, r := range riders {
			if ctx.Err() != nil {
				r.done <- errRunAlone
			} else {
				r.done <- err
			}
		}
		out <- err
	}()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// joinRiders is job with the sequences of the batches riding with it.
func joinRiders(job BatchJob, riders []*devBatch) BatchJob {
	if len(riders) == 0 {
		return job
	}
	joined := job
	joined.Items = append([]SeqItem(nil), job.Items...)
	seen := map[string]bool{}
	for _, it := range joined.Items {
		seen[it.SeqID] = true
	}
	for _, r := range riders {
		for _, it := range r.job.Items {
			if !seen[it.SeqID] {
				seen[it.SeqID] = true
				joined.Items = append(joined.Items, it)
			}
		}
		r.job.Log.Printf("BATCH_JOINED job_id=%s step=%s batch=%d with_job=%s with_batch=%d", r.job.JobID, r.job.StepKey, r.job.Index, job.JobID, job.Index)
	}
	job.Log.Printf("BATCH_JOIN job_id=%s step=%s batch=%d riders=%d seq_count=%d", job.JobID, job.StepKey, job.Index, len(riders), len(joined.Items))
	return joined
}

// remove drops b from the waiting list; d.mu is held.
func (d *Device) remove(b *devBatch) {
	l := d.waiting[b.job.StepKey]
	for i, o := range l {
		if o == b {
			d.waiting[b.job.StepKey] = append(l[:i], l[i+1:]...)
			break
		}
	}
	if len(d.waiting[b.job.StepKey]) == 0 {
		delete(d.waiting, b.job.StepKey)
	}
}

// gather takes, in arrival order, the waiting batches of lead's step that
// fit beside it within budget tokens (padded: the longest sequence times
// the count, BatchCost) and maxSeqs sequences (0: no cap); d.mu is held.
func (d *Device) gather(lead *devBatch, budget, maxSeqs int) []*devBatch {
	var riders []*devBatch
	items := append([]SeqItem(nil), lead.job.Items...)
	var rest []*devBatch
	for _, o := range d.waiting[lead.job.StepKey] {
		next := append(items, o.job.Items...)
		if BatchCost(next) <= budget && (maxSeqs <= 0 || len(next) <= maxSeqs) {
			o.taken = true
			if !o.granted {
				d.leave(o)
			}
			riders = append(riders, o)
			items = next
			continue
		}
		rest = append(rest, o)
	}
	if len(rest) == 0 {
		delete(d.waiting, lead.job.StepKey)
	} else {
		d.waiting[lead.job.StepKey] = rest
	}
	return riders
}
