"""kinflow_client: the official Python client of the kinflow API.

from kinflow_client import Client, example_frame
client = Client()                       # $KINFLOW_URL, $KINFLOW_API_KEY
job = client.submit(example_frame(), targets="kcat", methods="B")
job.wait()                              # progress bar; rides out outages
df = job.result()                       # a DataFrame
"""

from ._async import AsyncClient, AsyncJob
from ._client import Client, Job
from ._errors import (
    APIConnectionError,
    APIError,
    Conflict,
    ConnectionLost,
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
from ._models import (
    EmbeddingProgress,
    JobStatus,
    JobSummary,
    MethodInfo,
    Overall,
    Quota,
    StageStatus,
    ValidationReport,
)
from ._plot import plot_result
from ._results import example_frame
from ._version import __version__

__all__ = [
    "APIConnectionError",
    "APIError",
    "AsyncClient",
    "AsyncJob",
    "Client",
    "Conflict",
    "ConnectionLost",
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
    "Overall",
    "Quota",
    "QuotaExceeded",
    "ServerError",
    "StageStatus",
    "SyntheticResultWarning",
    "Unauthorized",
    "ValidationReport",
    "WaitTimeout",
    "__version__",
    "example_frame",
    "plot_result",
]
