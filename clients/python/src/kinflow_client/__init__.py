"""kinflow_client: the official Python client of the kinflow API.

from kinflow_client import Client
client = Client()                       # $KINFLOW_URL, $KINFLOW_API_KEY
job = client.submit(df, targets="kcat", methods="B")
job.wait()                              # progress bar
result = job.result()                   # a DataFrame
"""

from ._client import Client, Job
from ._errors import (
    APIConnectionError,
    APIError,
    Conflict,
    Forbidden,
    InvalidInput,
    JobFailed,
    KinflowError,
    NotFound,
    QuotaExceeded,
    ServerError,
    SyntheticResultWarning,
    Unauthorized,
    WaitTimeout,
)
from ._models import EmbeddingProgress, JobStatus, JobSummary, MethodInfo, Quota, StageStatus, ValidationReport
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APIError",
    "Client",
    "Conflict",
    "EmbeddingProgress",
    "Forbidden",
    "InvalidInput",
    "Job",
    "JobFailed",
    "JobStatus",
    "JobSummary",
    "KinflowError",
    "MethodInfo",
    "NotFound",
    "Quota",
    "QuotaExceeded",
    "ServerError",
    "StageStatus",
    "SyntheticResultWarning",
    "Unauthorized",
    "ValidationReport",
    "WaitTimeout",
    "__version__",
]
