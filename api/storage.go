package api

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/mediaroot"
)

// Full storage. A submit while the media root has less than
// KINFLOW_MEDIA_MIN_FREE_MB free, or whose writes fail for lack of space
// (the media root's or the database's), answers 503 with Retry-After and
// charges nothing; /health/ names the full store; the service recovers by
// itself when space returns, since every check reads the file system anew.
// A media root that cannot be written at all (read-only, refused by its
// permissions, failing: fsutil.Unwritable) answers a submit 503 as well,
// "Storage unavailable", refunded, naming no path.

// A media root that is not there with the identity this process started
// with (mediaroot: renamed away, a lost mount, another root at its path)
// refuses submits the same way, before anything is charged, and answers
// result reads 503 "Storage unavailable" with Retry-After instead of a
// 500; /health/ names it ("media": "missing", "foreign", "unmarked" or
// "unreadable") and fails, since reads fail too. It recovers by itself
// once the root is back: the identity is read anew every second.

// storageRetryAfter is the Retry-After of a submit refused for full
// storage, in seconds: freeing space takes an operator minutes.
const storageRetryAfter = 120

// storageFullMessage is the answer to a submit refused for full storage.
const storageFullMessage = "Storage full: the server cannot store new jobs right now. Nothing was charged; please retry later."

// storageUnavailableMessage is the answer to a submit whose input could not
// be written because the media root cannot be written at all (read-only,
// permissions, I/O errors: fsutil.Unwritable). It names no path: the log
// line of the request has the error.
const storageUnavailableMessage = "Storage unavailable: the server cannot store new jobs right now. Nothing was charged; please retry later."

// mediaReadRetryAfter is the Retry-After of a result read refused for an
// unavailable media root, in seconds: a remount is often quick.
const mediaReadRetryAfter = 30

// mediaUnavailableReadMessage is the answer to a result read while the
// media root is unavailable. It names no path.
const mediaUnavailableReadMessage = "Storage unavailable: the server cannot read job results right now. Please retry later."

// media is the open media root of this process (mediaroot.Open at the
// role's start), or nil when none was opened (tests that do not).
func (s *Server) media() *mediaroot.Root { return mediaroot.Lookup(s.mediaRoot()) }

// mediaAway reports the media root's identity check: nil when it is there
// with the identity this process started with (or none was opened), else
// the mediaroot error. now skips the check's one-second reuse, to tell
// whether a failure that just happened was the root's.
func (s *Server) mediaAway(now bool) error {
	r := s.media()
	if r == nil {
		return nil
	}
	if now {
		return r.CheckNow()
	}
	return r.Check()
}

// refuseMediaRead answers 503 for a read of a job's files while the media
// root is unavailable.
func refuseMediaRead(c *gin.Context) {
	c.Header("Retry-After", strconv.Itoa(mediaReadRetryAfter))
	abortError(c, http.StatusServiceUnavailable, mediaUnavailableReadMessage)
}

// mediaFull reports whether the media root has less free space than
// KINFLOW_MEDIA_MIN_FREE_MB. A media root that cannot be read is not
// called full here: the write that follows tells.
func (s *Server) mediaFull() bool {
	cfg := s.deps.Config
	if cfg == nil || cfg.MediaRoot == "" || cfg.MediaMinFreeBytes <= 0 {
		return false
	}
	free, _, err := fsutil.FreeBytes(cfg.MediaRoot)
	return err == nil && free < uint64(cfg.MediaMinFreeBytes) //nolint:gosec // positive
}

// refuseStorageFull answers 503 storage full with Retry-After.
func refuseStorageFull(c *gin.Context) {
	c.Header("Retry-After", strconv.Itoa(storageRetryAfter))
	abortError(c, http.StatusServiceUnavailable, storageFullMessage)
}

// refuseStorageUnavailable answers 503 storage unavailable with
// Retry-After: an operator's fix (a remount, an owner) takes minutes too.
func refuseStorageUnavailable(c *gin.Context) {
	c.Header("Retry-After", strconv.Itoa(storageRetryAfter))
	abortError(c, http.StatusServiceUnavailable, storageUnavailableMessage)
}

// dbFullFor is how long /health/ names the database full after a write
// of a submit failed for lack of space: nothing else tells the API how
// full the database's disk is.
const dbFullFor = time.Minute

// dbFullAt holds, per server, when a database write last failed for lack
// of space (unix nanoseconds).
var dbFullAt sync.Map // *Server → *atomic.Int64

func (s *Server) dbFullClock() *atomic.Int64 {
	v, _ := dbFullAt.LoadOrStore(s, new(atomic.Int64))
	return v.(*atomic.Int64)
}

// noteDatabaseFull records that a database write failed for lack of space.
func (s *Server) noteDatabaseFull() { s.dbFullClock().Store(s.now().UnixNano()) }

// storageChecks adds /health/'s storage checks: "media" is "ok", "full",
// or the kind of an unavailable root (mediaroot: "missing", "foreign",
// "unmarked", "unreadable"); "database_storage" is "full" for dbFullFor
// after a database write failed for lack of space. It reports whether the
// media root is unavailable: that fails the probe, full storage does not.
func (s *Server) storageChecks(checks map[string]string) (down bool) {
	if at := s.dbFullClock().Load(); at != 0 && s.now().Sub(time.Unix(0, at)) < dbFullFor {
		checks["database_storage"] = "full"
	}
	if s.deps.Config == nil || s.deps.Config.MediaRoot == "" {
		return false
	}
	checks["media"] = "ok"
	if err := s.mediaAway(false); err != nil {
		kind := mediaroot.Kind(err)
		if kind == "" {
			kind = mediaroot.KindUnreadable
		}
		checks["media"] = kind
		return true
	}
	if s.mediaFull() {
		checks["media"] = "full"
	}
	return false
}
