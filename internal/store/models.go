package store

import "time"

// APIUser is one caller IP address: the owner of at most one active key.
type APIUser struct {
	IPAddress string `gorm:"primaryKey;size:64"`
	IsBlocked bool   `gorm:"not null"`
	Notes     string `gorm:"not null"`
	FirstSeen time.Time
	LastSeen  time.Time
}

// TableName implements gorm's Tabler.
func (APIUser) TableName() string { return "api_users" }

// APIKey is one API key. Only its SHA-256 hash and its last 6 characters are
// stored; the full key is shown once, at generation.
type APIKey struct {
	ID        int64  `gorm:"primaryKey;autoIncrement"`
	IPAddress string `gorm:"size:64;not null;index"`
	KeyHash   string `gorm:"size:64;not null;uniqueIndex"`
	KeySuffix string `gorm:"size:6;not null"`
	Label     string `gorm:"size:200;not null"`
	IsActive  bool   `gorm:"not null"`
	// CustomDailyLimit replaces the default quota when set and non-zero.
	CustomDailyLimit *int
	CreatedAt        time.Time
	LastUsedAt       *time.Time
	RevokedAt        *time.Time
	// NotifyURL is the key's default webhook URL; WebhookSecret signs its
	// webhooks (made on first use).
	NotifyURL     string `gorm:"not null;default:''"`
	WebhookSecret string `gorm:"size:80;not null;default:''"`
	// FairnessWeight is the key's share of the task queues against other
	// keys' work of the same class (internal/fairness); nil: the default, 1.
	FairnessWeight *float64
}

// TableName implements gorm's Tabler.
func (APIKey) TableName() string { return "api_keys" }

// QuotaUsage is one key's consumption on one UTC day.
type QuotaUsage struct {
	KeyID int64  `gorm:"primaryKey;autoIncrement:false"`
	Day   string `gorm:"primaryKey;size:10"` // YYYY-MM-DD, UTC
	Used  int64  `gorm:"not null"`
}

// TableName implements gorm's Tabler.
func (QuotaUsage) TableName() string { return "quota_usage" }

// Job is one prediction job.
type Job struct {
	ID             string `gorm:"primaryKey;size:40"`
	KeyID          int64  `gorm:"not null;index"`
	IPAddress      string `gorm:"size:64;not null"`
	Status         string `gorm:"size:16;not null;index"`
	PredictionType string `gorm:"size:32;not null"`
	// Targets (canonical order) and Methods (target → method key, as
	// submitted) are stored as JSON text (a JSON array and object, the
	// columns unchanged since 0001) and decoded once, on read: a row that
	// does not decode is an error of the read.
	Targets                  []string          `gorm:"serializer:json;not null"`
	Methods                  map[string]string `gorm:"serializer:json;not null"`
	KcatMethod               string            `gorm:"size:64;not null"`
	KmMethod                 string            `gorm:"size:64;not null"`
	KcatKmMethod             string            `gorm:"size:64;not null"`
	HandleLongSequences      string            `gorm:"size:16;not null"`
	CanonicalizeSubstrates   bool              `gorm:"not null"`
	IncludeSimilarityColumns bool              `gorm:"not null"`
	UseExperimental          bool              `gorm:"not null"`
	DisableGPUPrecompute     bool              `gorm:"not null"`
	UsePredictionCache       bool              `gorm:"not null"`
	RequestedRows            int               `gorm:"not null"`
	RefundedRows             int               `gorm:"not null"`
	ErrorMessage             string            `gorm:"not null"`
	SubmittedAt              time.Time         `gorm:"not null;index"`
	StartedAt                *time.Time
	CompletedAt              *time.Time
	TotalMolecules           int    `gorm:"not null"`
	MoleculesProcessed       int    `gorm:"not null"`
	InvalidRows              int    `gorm:"not null"`
	TotalPredictions         int    `gorm:"not null"`
	PredictionsMade          int    `gorm:"not null"`
	PredictionsCached        int    `gorm:"not null"`
	InputPath                string `gorm:"not null"`
	OutputPath               string `gorm:"not null"`
	Synthetic                bool   `gorm:"not null"`

	// RefundedCachedRows is how many of RefundedRows were refunded because
	// every prediction of the row came from the prediction cache.
	RefundedCachedRows int `gorm:"not null"`

	// QuotaCreditRows is how many of RequestedRows were not taken from the
	// quota at submit because the prediction cache held them (migration
	// 0010): the submit charged RequestedRows-QuotaCreditRows,
	// and the end of the job refunds only what it charged beyond them.
	QuotaCreditRows int `gorm:"not null"`
	// NotifyURL is where the job's end is announced (webhook.go); empty:
	// nowhere.
	NotifyURL string `gorm:"not null;default:''"`
	// Priority is the job's class (internal/fairness: interactive, normal,
	// bulk), chosen at submit; "" for a job submitted before classes.
	Priority string `gorm:"not null;default:''"`
	// ExpiredAt is when the job's folder was removed after
	// KINFLOW_JOB_RETENTION_DAYS; nil while it is kept.
	ExpiredAt *time.Time
	// InputName is the name the input file was uploaded as (its base name,
	// at most 255 bytes; migration 0017); "" for a JSON submit.
	InputName string `gorm:"not null;default:''"`
}

// TableName implements gorm's Tabler.
func (Job) TableName() string { return "jobs" }

// JobStage is one (target, method) stage of a job, with its counters and the
// embedding progress of its cache plan.
type JobStage struct {
	JobID              string `gorm:"primaryKey;size:40"`
	Index              int    `gorm:"primaryKey;autoIncrement:false;column:stage_index"`
	Target             string `gorm:"size:16;not null"`
	MethodKey          string `gorm:"size:64;not null"`
	MethodName         string `gorm:"size:200;not null"`
	Status             string `gorm:"size:16;not null"`
	StartedAt          *time.Time
	CompletedAt        *time.Time
	Message            string `gorm:"not null"`
	MoleculesTotal     int    `gorm:"not null"`
	MoleculesProcessed int    `gorm:"not null"`
	InvalidRows        int    `gorm:"not null"`
	PredictionsTotal   int    `gorm:"not null"`
	PredictionsMade    int    `gorm:"not null"`
	PredictionsCached  int    `gorm:"not null"`
	EmbeddingEnabled   bool   `gorm:"not null"`
	EmbeddingState     string `gorm:"size:16;not null"`
	EmbeddingTotal     int    `gorm:"not null"`
	EmbeddingCached    int    `gorm:"not null"`
	EmbeddingNeed      int    `gorm:"not null"`
	EmbeddingComputed  int    `gorm:"not null"`
	EmbeddingUpdatedAt *time.Time
	// CountRows, CountUnits and CountSequences are the stage's counts
	// (jobfiles.StageCounts), recorded by its first plan; nil before it,
	// and for a stage planned by a worker that wrote them to counts.json.
	CountRows      *int
	CountUnits     *int
	CountSequences *int
}

// TableName implements gorm's Tabler.
func (JobStage) TableName() string { return "job_stages" }

// JobEvent is one recorded transition of a job; kind "gpu_precompute" events
// carry the attempted, usedGpu, completed and failed flags and a reason,
// and are served as gpuPrecompute events.
type JobEvent struct {
	ID         int64     `gorm:"primaryKey;autoIncrement"`
	JobID      string    `gorm:"size:40;not null;index"`
	StageIndex int       `gorm:"not null"`
	Kind       string    `gorm:"size:32;not null;index"`
	MethodKey  string    `gorm:"size:64;not null"`
	Target     string    `gorm:"size:16;not null"`
	Attempted  bool      `gorm:"not null"`
	UsedGPU    bool      `gorm:"not null"`
	Completed  bool      `gorm:"not null"`
	Failed     bool      `gorm:"not null"`
	Reason     string    `gorm:"not null"`
	Message    string    `gorm:"not null"`
	CreatedAt  time.Time `gorm:"not null;index"`
	// Key names the event within its workflow run (run id and sequence);
	// AddEvent stores an event with a key once. Empty: no key (events from
	// before keys).
	Key string `gorm:"column:event_key;size:80;not null;default:''"`
}

// TableName implements gorm's Tabler.
func (JobEvent) TableName() string { return "job_events" }

// Sequence is one row of the sequence map: seq_id ↔ sequence, stable for ever.
// Uniqueness of the text is enforced through its full SHA-256 (a btree index on
// 10,000-residue text would exceed Postgres's index row limit); lookups compare
// the full sequence as well.
type Sequence struct {
	ID         string `gorm:"primaryKey;size:64"`
	Seq        string `gorm:"not null"`
	SHA256     string `gorm:"column:sha256;size:64;not null;uniqueIndex"`
	Len        int    `gorm:"not null;index"`
	CreatedAt  time.Time
	LastSeenAt time.Time
	UsesCount  int64 `gorm:"not null"`
}

// TableName implements gorm's Tabler.
func (Sequence) TableName() string { return "sequences" }
