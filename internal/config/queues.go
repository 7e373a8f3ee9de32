package config

// Task-queue names: the two base names are keys (KINFLOW_CPU_TASK_QUEUE,
// KINFLOW_GPU_TASK_QUEUE); the queues derived from them are composed here
// only. Recorded histories name them: a change is a workflow change.

// TrackTaskQueue is the task queue of the progress trackers that belong to
// the CPU task queue cpu: their own queue, so that waiting trackers never
// hold a slot that the short and CPU-bound activities of their jobs need
// (docs/workflows.md, "Slot pools and waits").
func TrackTaskQueue(cpu string) string { return cpu + "-track" }

// NoticeTaskQueue is the task queue of the job notices (webhooks) that
// belong to the CPU task queue cpu: their own queue and slots, so that a
// receiver that never answers holds a notice slot for its request timeout,
// never a slot that the CPU-bound steps of any job need (docs/workflows.md).
func NoticeTaskQueue(cpu string) string { return cpu + "-notice" }

// SmallTaskQueue is the small lane of the GPU task queue gpu: small steps
// go there so that they never queue behind the shards of a large job, and
// every GPU host serves it beside gpu (docs/workflows.md, "Slot pools").
func SmallTaskQueue(gpu string) string { return gpu + "-small" }
