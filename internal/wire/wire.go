// Package wire holds the JSON shapes the server (api) writes and the Go
// client (internal/client) reads: GET /jobs/'s page and entries, and the
// status's `overall`, `similarity` and `charge` objects. One definition, so
// the two sides cannot drift; the client re-exports them under its names.
package wire

// JobsPage is GET /api/v1/jobs/'s answer: one page of the key's jobs.
type JobsPage struct {
	Jobs []Job `json:"jobs"`
	// NextCursor, when not null, is passed as ?cursor= for the next page.
	NextCursor *string `json:"nextCursor"`
}

// Job is one entry of GET /api/v1/jobs/.
type Job struct {
	JobID       string            `json:"jobId"`
	Status      string            `json:"status"`
	Targets     []string          `json:"targets"`
	Methods     map[string]string `json:"methods"`
	Rows        int               `json:"rows"`
	SubmittedAt string            `json:"submittedAt"`
	StartedAt   *string           `json:"startedAt"`
	CompletedAt *string           `json:"completedAt"`
	StatusURL   string            `json:"statusUrl"`
	ResultURL   string            `json:"resultUrl,omitempty"`
	Synthetic   bool              `json:"synthetic,omitempty"`
	// Expired is set once the job's files and result were removed after
	// KINFLOW_JOB_RETENTION_DAYS; it has no resultUrl then.
	Expired bool `json:"expired,omitempty"`
	// InputName is the name the input file was uploaded as; absent for a
	// job submitted as JSON (or before names were kept).
	InputName string `json:"inputName,omitempty"`
}

// Overall is kinflow's `overall` object of /status/: the whole job in the
// user's units (rows, sequences), one percentage, an ETA and one line of
// text that the web page, the CLI and the Python client all show. The
// embedding objects (counted in files) stay as the detail.
type Overall struct {
	// Percent of the whole job, 0–100 with one decimal: the mean of the
	// stages' fractions; a stage that embeds counts its embedding and its
	// predictions half each, else its predictions only.
	Percent float64 `json:"percent"`
	// ETASeconds is the time left, estimated per phase from the rates the
	// server measured and from what earlier jobs of the same methods took
	// (api/eta.go); null while it cannot be estimated (queued, before any
	// phase of the job has a rate, or while a phase to come has nothing to
	// go by), 0 when the job is finished.
	ETASeconds *int64 `json:"etaSeconds"`
	// Phase is queued, preparing, embedding, predicting, finishing,
	// completed or failed.
	Phase string `json:"phase"`
	// Rows are the job's input rows.
	Rows int `json:"rows"`
	// Sequences are the distinct sequences of the active (else last)
	// stage; null until its plan is made.
	Sequences *int `json:"sequences"`
	// Stage is the 1-based active stage; null before stages exist.
	Stage  *int `json:"stage"`
	Stages int  `json:"stages"`
	// Text is the whole state as one line.
	Text string `json:"text"`
}

// SimilarityNote is kinflow's `similarity` object of /status/ and the
// source of the result's `columnNotes`: what the two similarity columns
// hold, or why they are blank (reported, never silently blank).
type SimilarityNote struct {
	// State is "done" (the columns are filled) or "not_configured" (the
	// method has no dataset, or it is not installed: the columns are blank).
	State   string   `json:"state"`
	Method  string   `json:"method"`
	Dataset string   `json:"dataset,omitempty"`
	Unit    string   `json:"unit"`
	Columns []string `json:"columns"`
	// Message is one sentence for the user.
	Message string `json:"message"`
}

// Charge is the status's `charge`: what a finished job cost its key —
// rowsCharged at submit, rowsRefunded at the end (rows without a full
// prediction, and rows whose every prediction came from the prediction
// cache), cachedRowsRefunded of them for the cache.
type Charge struct {
	RowsCharged        int `json:"rowsCharged"`
	RowsRefunded       int `json:"rowsRefunded"`
	CachedRowsRefunded int `json:"cachedRowsRefunded"`
}

// Sharing is the status's `sharing` of an unfinished job: the class it is
// served in and the other keys' unfinished work it shares the queues with
// (of its class, or of a class served before it), read at most a couple of
// seconds before. The queues take turns between keys of one class, so this
// is the work the job's turns alternate with, not a line it waits behind
// in full. Like the clock fields it moves under the same ETag.
type Sharing struct {
	// Class is interactive, normal or bulk (docs/api.md, "When the service
	// is busy"); empty for a job submitted before classes.
	Class string `json:"class"`
	// OtherKeys, OtherJobs and OtherRows count the other keys' unfinished
	// jobs (waiting and running) of this class or one served before it.
	OtherKeys int   `json:"otherKeys"`
	OtherJobs int64 `json:"otherJobs"`
	OtherRows int64 `json:"otherRows"`
	// Text is one line of it, for people.
	Text string `json:"text"`
}

// RangeClasses describes one result column that holds range classes (a
// method that answers a class, not a value): the classes' texts in
// ascending order, each one's midpoint, and the columns beside it. The JSON
// result's `rangeClasses` maps the column's name to it; /methods/ gives a
// method's per target (Column empty there).
type RangeClasses struct {
	Target             string    `json:"target"`
	Unit               string    `json:"unit"`
	Edges              []float64 `json:"edges"`
	Classes            []string  `json:"classes"`
	Midpoints          []float64 `json:"midpoints"`
	MidpointColumn     string    `json:"midpointColumn"`
	ExperimentalColumn string    `json:"experimentalColumn"`
}
