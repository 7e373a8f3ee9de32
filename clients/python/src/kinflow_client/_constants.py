"""The client's defaults, in one place, each with the reason for its value."""

from __future__ import annotations

# Where `make run` / `kinflow dev` serves the API.
DEFAULT_BASE_URL = "http://127.0.0.1:8000"

# Environment variables read when Client() is given no base_url / api_key
# (the same names as the Go CLI's).
ENV_URL = "KINFLOW_URL"
ENV_API_KEY = "KINFLOW_API_KEY"

# Environment variables for the request timeout (seconds), the retries of one
# request, and how long Job.wait() rides out an unreachable API (seconds).
# An argument to Client() or with_options() wins over them.
ENV_TIMEOUT = "KINFLOW_TIMEOUT"
ENV_MAX_RETRIES = "KINFLOW_MAX_RETRIES"
ENV_WAIT_OUTAGE = "KINFLOW_WAIT_OUTAGE"

# Per-request timeout in seconds. Uploads of the largest accepted input
# (128 MiB) finish well within a minute on a LAN; every other call is small.
# Connecting gets less: an unreachable host should fail (and be retried) fast.
DEFAULT_TIMEOUT = 60.0
DEFAULT_CONNECT_TIMEOUT = 10.0

# Retries after the first attempt. Five retries with the back-off below span
# about a minute, long enough to ride out an api restart behind a proxy.
DEFAULT_MAX_RETRIES = 5

# Exponential back-off with full jitter (tenacity's wait_random_exponential):
# the first retry waits up to INITIAL_RETRY_DELAY, doubling up to
# MAX_RETRY_DELAY, so many clients retrying at once do not arrive together.
INITIAL_RETRY_DELAY = 0.5
MAX_RETRY_DELAY = 30.0

# The longest server-advised wait (Retry-After, X-RateLimit-Reset) the client
# sleeps through before retrying. A longer one (a daily quota resets at 00:00
# UTC, hours away) is raised at once instead of blocking a script for hours.
MAX_SERVER_ADVISED_WAIT = 120.0

# HTTP statuses after which a read (GET) is retried: rate limiting and the
# answers of a proxy whose upstream is restarting or overloaded.
RETRY_GET_STATUSES = frozenset({429, 502, 503, 504})

# HTTP statuses after which a submit may be retried. 503 is kinflow's "the
# job could not be queued; nothing was charged", always safe. 500, 502 and
# 504 may come after the job was created, so they are retried only with a
# server that honours Idempotency-Key (the retry then returns the same job).
SUBMIT_SAFE_STATUSES = frozenset({503})
SUBMIT_AMBIGUOUS_STATUSES = frozenset({500, 502, 504})

# How long Job.wait() keeps trying while the API cannot be reached or
# answers 5xx (a restart, a deploy, a dropped VPN): ten minutes covers an
# api restart or a whole-stack restart; the job itself keeps running on the
# server throughout, so giving up early only loses the progress bar.
DEFAULT_WAIT_OUTAGE = 600.0

# While the API is unreachable, Job.wait() polls again after an exponential
# back-off with full jitter between these bounds (seconds), so that the
# clients of one notebook server do not all come back at the same instant.
OUTAGE_INITIAL_DELAY = 1.0
OUTAGE_MAX_DELAY = 30.0

# Job polling: the status route reads the database only, so a poll is cheap;
# start at one second for short jobs and grow by half each poll up to ten
# seconds, so a job of hours costs a few hundred requests, not thousands.
POLL_INITIAL_INTERVAL = 1.0
POLL_MAX_INTERVAL = 10.0
POLL_GROWTH = 1.5

# Job.wait() rides the server's long poll when it has one (the status
# carries an ETag): each read sends If-None-Match and asks the server to
# hold it up to LONG_POLL_WAIT seconds for a change (under the server's
# default cap of 60 s and common proxies' idle timeouts), so a wait costs
# one request per change; after a change it pauses LONG_POLL_PACE seconds,
# which bounds the requests of a job whose progress moves fast. Against a
# server without ETags it polls as above.
LONG_POLL_WAIT = 30
LONG_POLL_PACE = 0.25

# Page size asked of GET /api/v1/jobs/: the API's maximum (100), so listing
# many jobs takes few requests.
JOBS_PAGE_SIZE = 100

# How the synthetic backend labels each number it makes (the Source
# columns); used to warn about a CSV result, which has no synthetic flag.
SYNTHETIC_MARKER = b"Synthetic placeholder"
