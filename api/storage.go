package api

import (
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// Full storage (issue 33). A submit while the media root has less than
// KINFLOW_MEDIA_MIN_FREE_MB free, or whose writes fail for lack of space
// (the media root's or the database's), answers 503 with Retry-After and
// charges nothing; /health/ names the full store; the service recovers by
// itself when space returns, since every check reads the file system anew.
// A media root that cannot be written at all (read-only, refused by its
// permissions, failing: fsutil.Unwritable) answers a submit 503 as well,
// "Storage unavailable", refunded, naming no path.

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

// storageChecks adds /health/'s storage checks: "media" is "ok" or "full";
// "database_storage" is "full" for dbFullFor after a database write failed
// for lack of space.
func (s *Server) storageChecks(checks map[string]string) {
	if at := s.dbFullClock().Load(); at != 0 && s.now().Sub(time.Unix(0, at)) < dbFullFor {
		checks["database_storage"] = "full"
	}
	if s.deps.Config == nil || s.deps.Config.MediaRoot == "" {
		return
	}
	checks["media"] = "ok"
	if s.mediaFull() {
		checks["media"] = "full"
	}
}
