// Package api is kinflow's public HTTP API (Gin): /api/v1, the API-key
// self-service routes under /api/api-key/, and their middleware.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/usermsg"
)

// Pinger reports whether a dependency answers; the Temporal client's
// CheckHealth is adapted to it.
type Pinger func(ctx context.Context) error

// Deps are what the API needs; cmd/kinflow wires them.
type Deps struct {
	Config *config.Config
	Store  *store.Store
	Log    *slog.Logger
	// TemporalHealth reports Temporal reachability for /health/.
	TemporalHealth Pinger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Catalogue is the method catalogue; nil means methods.Default().
	Catalogue *methods.Catalogue
	// Jobs starts the workflow of a newly submitted job.
	Jobs JobStarter
	// GPU reports the GPU service's cached health; nil: configured follows
	// GPU_EMBED_SERVICE_URL and online is false.
	GPU GPUStatus
	// Chemistry checks substrates for /validate/; nil means the Go syntax
	// checks only (no RDKit helper).
	Chemistry *input.Chemistry
	// Metrics is the process's metrics, served on /metrics; nil serves an
	// empty registry and records nothing.
	Metrics *metrics.Metrics
	// Similarity answers /validate/'s runSimilarity and adds mmseqs to
	// /health/'s checks; nil: the similarity field says it is unavailable.
	Similarity *similarity.Service
}

// JobStarter starts the workflow of a job ("prediction:<id>"); an error
// means the job could not be queued.
type JobStarter interface {
	StartJob(ctx context.Context, jobID string) error
}

// Server holds the API's dependencies and its router.
type Server struct {
	deps        Deps
	now         func() time.Time
	log         *slog.Logger
	eng         *gin.Engine
	cat         *methods.Catalogue
	methodsBody methodsBody
	// caps are the caps on prediction units (unitCapsOf).
	caps    input.UnitCaps
	chem    *input.Chemistry
	openapi []byte
	// idemLocks serialise, within this process, the submits that carry the
	// same Idempotency-Key (striped by its hash): the database's primary
	// key decides which one creates the job, but a crowd of transactions
	// waiting on one row lock would hold every pooled connection while
	// the winner waits for one (GORM prepares statements on the pool).
	idemLocks [64]sync.Mutex
	// statuses is the status cache and its per-job watchers
	// (statuswatch.go); statusRate the per-key limit on status reads.
	statuses *statusHub
	// sharing answers unfinished jobs' `sharing` (sharing.go).
	sharing    *sharingBoard
	statusRate *keyRate
	// keys caches status reads' key lookups (keycache.go).
	keys keyCache
	// waitRate is the per-key limit on waiting status reads (long polls,
	// event streams), apart from statusRate (statusrate.go).
	waitRate *keyRate
	// firstReads counts a wait's first read of a job once among its key's
	// waiting reads (statusrate.go).
	firstReads firstReads
	// waits bounds the event streams and held long polls open at once,
	// per key and in all (waits.go).
	waits *waits
	// bodies bounds the request bodies read at once (bodybudget.go); nil:
	// no budget.
	bodies *bodyBudget
	// validateSlots bounds one key's concurrent /validate/ calls
	// (validate_limit.go); nil: no bound.
	validateSlots *keySlots
	// stageCounts keeps the stage counts already read (progress.go): a
	// stage's counts never change once its plan wrote them, so a status
	// read opens the file once per stage, not once per request.
	stageCounts stageCountsCache
	// eta is the running jobs' observed progress and the phases' priors
	// that their time left is estimated from (eta.go).
	eta etaBook
}

// New builds the router with every route and middleware.
func New(d Deps) *Server {
	gin.SetMode(gin.ReleaseMode)
	s := &Server{deps: d, now: d.Now, log: d.Log}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	s.cat = d.Catalogue
	if s.cat == nil {
		s.cat = methods.Default()
	}
	s.caps = unitCapsOf(d.Config)
	s.methodsBody = buildMethodsBody(s.cat, s.caps)
	s.methodsBody.Synthetic = d.Config != nil && d.Config.PredictionEngine == "synthetic"
	s.chem = d.Chemistry
	if s.chem == nil {
		s.chem = input.NewChemistry(nil, s.log)
	}
	s.openapi = openAPIJSON()
	s.statuses = newStatusHub(statusCacheTTL(d.Config), s.loadStatusSnap)
	if d.Store != nil {
		s.statuses.queue = newQueueBoard(d.Store.PendingSubmitTimes, d.Store.QueuePosition)
		s.sharing = newSharingBoard(d.Store.UnfinishedWorkByKey)
		d.Store.OnJobChange(s.statuses.changed)
		s.statuses.complete = d.Store.SeesAllWrites
	}
	s.statusRate = newKeyRate(statusReadsPerSecond(d.Config))
	s.waitRate = newKeyRate(statusReadsPerSecond(d.Config))
	perKey, all := 256, 4096
	if d.Config != nil && d.Config.WaitsPerKey > 0 && d.Config.WaitsMax > 0 {
		perKey, all = d.Config.WaitsPerKey, d.Config.WaitsMax
	}
	all, warn := waitsBudget(all)
	if warn != "" {
		s.log.Warn("api.waits_budget", "problem", warn)
	}
	var usable func(context.Context, []string) (map[string]bool, error)
	if d.Store != nil {
		usable = d.Store.UsableKeyHashes
	}
	s.waits = newWaits(perKey, all, usable, s.log)
	if d.Metrics != nil {
		refused, err := d.Metrics.RegisterWaits(s.waits.held, all)
		if err != nil {
			s.log.Warn("api.waits_metrics", "error", err)
		}
		s.waits.refused = refused
	}
	if d.Config != nil && d.Config.BodyBudgetBytes > 0 {
		s.bodies = &bodyBudget{cap: d.Config.BodyBudgetBytes}
	}
	if d.Config != nil && d.Config.ValidatePerKey > 0 {
		s.validateSlots = &keySlots{max: d.Config.ValidatePerKey, busy: map[int64]int{}}
	}
	e := gin.New()
	// Routes answer with and without the trailing slash (registered twice),
	// never with a redirect that a POST client would not follow.
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = true
	e.ContextWithFallback = true
	_ = e.SetTrustedProxies(nil) // the caller IP is computed by clientIP, never by Gin
	e.Use(s.requestID, boundHeaders, s.observe, s.recoverJSON, s.accessLog, s.cors, s.releaseBody)
	e.NoRoute(func(c *gin.Context) { abortError(c, http.StatusNotFound, "Not found.") })
	e.NoMethod(func(c *gin.Context) { abortError(c, http.StatusMethodNotAllowed, "Method not allowed.") })

	v1 := e.Group("/api/v1")
	anyMethod(v1, "/health", s.health)
	anyMethod(v1, "/methods", s.methodsList)
	handle(v1, http.MethodGet, "/gpu/status", s.gpuStatus)
	v1.GET("/openapi.json", s.openAPI)

	authed := v1.Group("", s.authenticate)
	anyMethod(authed, "/quota", s.quota)
	anyMethod(authed, "/validate", s.postOnly(s.validate))
	anyMethod(authed, "/submit", s.postOnly(s.submit))
	// Status reads are limited per key before the key is even looked up,
	// so that a polling storm costs no database round trip.
	anyMethod(v1, "/status/:id", s.limitStatusReads, s.authenticateStatus, s.status)
	handle(v1, http.MethodGet, "/status/:id/events", s.limitStatusReads, s.authenticateStatus, s.statusEvents)
	anyMethod(authed, "/result/:id", s.result)
	handle(authed, http.MethodGet, "/jobs", s.jobsList)
	handle(authed, http.MethodGet, "/webhook", s.webhookSettings)
	handle(authed, http.MethodPost, "/webhook", s.webhookSettings)

	keys := e.Group("/api/api-key")
	keys.GET("", s.keyStatus)
	keys.GET("/", s.keyStatus)
	handle(keys, http.MethodPost, "/generate", s.generateKey)
	handle(keys, http.MethodPost, "/revoke", s.revokeKey)

	// Prometheus scrapes /metrics without a key (restrict it at the proxy).
	handle(e.Group(""), http.MethodGet, "/metrics", s.metricsHandler())

	registerWeb(e) // the browser page at / and /static/ (not part of the REST API)
	s.eng = e
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.eng.ServeHTTP(w, r) }

// Engine exposes the router (route listing in tests).
func (s *Server) Engine() *gin.Engine { return s.eng }

// postOnly answers a non-POST with 405 after authentication has run, as the
// contract orders it for /validate/ and /submit/.
func (s *Server) postOnly(h gin.HandlerFunc) gin.HandlerFunc {
	return func(c *gin.Context) {
		if c.Request.Method != http.MethodPost {
			c.Header("Allow", http.MethodPost)
			abortError(c, http.StatusMethodNotAllowed, "Method not allowed.")
			return
		}
		h(c)
	}
}

// trustedProxies are the peers whose X-Forwarded-For is believed.
func (s *Server) trustedProxies() []netip.Prefix {
	if s.deps.Config == nil {
		return nil
	}
	return s.deps.Config.TrustedProxies
}

// anyMethod registers h for every method on path and path + "/".
func anyMethod(g *gin.RouterGroup, path string, h ...gin.HandlerFunc) {
	g.Any(path, h...)
	g.Any(path+"/", h...)
}

// handle registers h for one method on path and path + "/".
func handle(g *gin.RouterGroup, method, path string, h ...gin.HandlerFunc) {
	g.Handle(method, path, h...)
	g.Handle(method, path+"/", h...)
}

// errorBody is every error's JSON body.
type errorBody struct {
	Error string `json:"error"`
}

func abortError(c *gin.Context, status int, msg string) {
	c.AbortWithStatusJSON(status, errorBody{Error: msg})
}

const requestIDKey = "request_id"

// statusClientClosed is the status recorded for a request whose client
// disconnected before the answer (nginx's 499); nobody reads the answer.
const statusClientClosed = 499

// MaxHeaderBytes is the HTTP server's bound on a request's header block
// (http.Server.MaxHeaderBytes; larger gets 431 from net/http itself), and
// maxHeaderValue the bound on one header's value (431 from boundHeaders):
// nginx's defaults (four buffers of 8 KiB). Go's own default, 1 MiB, let 16
// connections sending 900 KB headers slow every other client's reads a
// hundredfold and grow the process by 580 MB.
const (
	MaxHeaderBytes = 32 << 10
	maxHeaderValue = 8 << 10
)

// boundHeaders answers 431 to a request with a header value longer than
// maxHeaderValue, before anything reads it.
func boundHeaders(c *gin.Context) {
	for name, vs := range c.Request.Header {
		for _, v := range vs {
			if len(v) > maxHeaderValue {
				abortError(c, http.StatusRequestHeaderFieldsTooLarge, fmt.Sprintf(
					"The request header %s is longer than %d bytes.", name, maxHeaderValue))
				return
			}
		}
	}
	c.Next()
}

func (s *Server) requestID(c *gin.Context) {
	id := strings.TrimSpace(c.GetHeader("X-Request-ID"))
	if id == "" || len(id) > 200 {
		id = strings.ReplaceAll(uuid.NewString(), "-", "")
	}
	c.Set(requestIDKey, id)
	c.Header("X-Request-ID", id)
	c.Next()
}

// recoverJSON turns a panic into a logged 500 with a JSON body that names the
// request id and nothing internal.
func (s *Server) recoverJSON(c *gin.Context) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "request_id", c.GetString(requestIDKey), "path", c.Request.URL.Path, "panic", r)
			abortError(c, http.StatusInternalServerError, "Internal server error (request id "+c.GetString(requestIDKey)+").")
		}
	}()
	c.Next()
}

func (s *Server) accessLog(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.log.Debug("http.request", "request_id", c.GetString(requestIDKey), "method", c.Request.Method,
		"path", c.Request.URL.Path, "status", c.Writer.Status(), "duration_ms", time.Since(start).Milliseconds())
}

// internalError logs err with the request id and answers a generic 500.
func (s *Server) internalError(c *gin.Context, what string, err error) {
	rid := c.GetString(requestIDKey)
	if c.Request.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away mid-request: not an error of the service.
		// 499 is the access logs' usual "client closed request".
		s.log.Debug(what, "request_id", rid, "error", err, "client_gone", true)
		c.AbortWithStatus(statusClientClosed)
		return
	}
	s.log.Error(what, "request_id", rid, "error", err)
	if usermsg.DatabaseDown(err) {
		// Name the failing part, nothing of its address: the details are
		// in the log line above, under the request id. A client may retry.
		c.Header("Retry-After", "5")
		abortError(c, http.StatusServiceUnavailable, "The database was unreachable (request id "+rid+"); try again shortly.")
		return
	}
	abortError(c, http.StatusInternalServerError, "Internal server error (request id "+rid+").")
}

// isoformat renders t as Python's isoformat() of a UTC-aware datetime:
// YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00, the fraction omitted when zero.
func isoformat(t time.Time) string {
	t = t.UTC().Truncate(time.Microsecond)
	if t.Nanosecond() == 0 {
		return t.Format("2006-01-02T15:04:05+00:00")
	}
	return t.Format("2006-01-02T15:04:05.000000+00:00")
}
