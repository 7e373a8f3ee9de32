"""Typed views of the API's JSON answers. Each keeps the whole answer as ``raw``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pandas as pd


def _int(d: Mapping[str, Any], *keys: str, default: int = 0) -> int:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
            return int(v)
    return default


def _opt_int(d: Mapping[str, Any], key: str) -> int | None:
    v = d.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v:
        return int(v)
    return None


def _str(d: Mapping[str, Any], *keys: str) -> str:
    for k in keys:
        v = d.get(k)
        if isinstance(v, str):
            return v
    return ""


_FRACTION = re.compile(r"(\.\d+)")


def parse_time(v: Any) -> datetime | None:
    """A timestamp of the API as an aware UTC datetime; None when absent or unreadable.

    Accepts ISO 8601 with ``Z`` or an offset and any number of fraction
    digits (kinflow sends microseconds and ``+00:00``); a time without an
    offset is taken as UTC.
    """
    if not isinstance(v, str) or not v.strip():
        return None
    text = v.strip().replace("Z", "+00:00").replace("z", "+00:00")
    # Python 3.10's fromisoformat takes exactly 3 or 6 fraction digits.
    text = _FRACTION.sub(lambda m: (m.group(1) + "000000")[:7], text, count=1)
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.astimezone(timezone.utc)


def reset_time(seconds: float) -> datetime:
    """When a quota resets, from the API's seconds-until-reset.

    The API truncates to whole seconds, so now + seconds falls up to a second
    short of the real time (23:59:59.6 for a reset at 00:00): a result within
    a second of a whole minute is that minute.
    """
    t = datetime.now(timezone.utc) + timedelta(seconds=seconds)
    nearest = (t + timedelta(seconds=30)).replace(second=0, microsecond=0)
    return nearest if abs(nearest - t) <= timedelta(seconds=1) else t


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


@dataclass(frozen=True)
class Quota:
    """Today's quota of the key (GET /api/v1/quota/)."""

    limit: int
    used: int
    remaining: int
    resets_in_seconds: int
    reset_at: datetime
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Quota:
        secs = _int(d, "resetsInSeconds")
        return cls(
            limit=_int(d, "limit"),
            used=_int(d, "used"),
            remaining=_int(d, "remaining"),
            resets_in_seconds=secs,
            reset_at=reset_time(secs),
            raw=dict(d),
        )


@dataclass(frozen=True)
class MethodInfo:
    """One method for one target (an entry of GET /api/v1/methods/)."""

    target: str
    id: str
    display_name: str
    input_format: str
    max_seq_len: int | None
    required_columns: list[str]
    raw: dict[str, Any] = field(repr=False)
    #: Whether the method gives an uncertainty with each value (extra result columns).
    gives_uncertainty: bool = False
    #: For a method that answers a range class of this target rather than a value: its
    #: classes (``classes`` in ascending order, ``edges``, ``midpoints``, ``unit``); None otherwise.
    range_classes: dict[str, Any] | None = None

    @property
    def gives_range(self) -> bool:
        """Whether the method answers a range class (a category, not a number) for this target."""
        return self.range_classes is not None


@dataclass(frozen=True)
class EmbeddingProgress:
    """Embedding files of a stage: cached before the job, computed, still to compute."""

    state: str
    total: int
    cached_already: int
    need_computation: int
    computed: int
    remaining: int

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> EmbeddingProgress:
        return cls(
            state=_str(d, "state"),
            total=_int(d, "total"),
            cached_already=_int(d, "cachedAlready", "cached_already"),
            need_computation=_int(d, "needComputation", "need_computation"),
            computed=_int(d, "computed"),
            remaining=_int(d, "remaining"),
        )

    @property
    def done(self) -> int:
        """Files present: cached before the job plus computed for it."""
        return self.cached_already + self.computed


@dataclass(frozen=True)
class StageStatus:
    """One stage (one target and its method) of a job."""

    index: int
    target: str
    method_key: str
    method_name: str
    status: str
    message: str
    predictions_total: int
    predictions_made: int
    embedding: EmbeddingProgress
    #: Predictions served from kinflow's prediction cache (0 where the server has none).
    predictions_cached: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> StageStatus:
        pred = _dict(d.get("prediction"))
        return cls(
            index=_int(d, "index"),
            target=_str(d, "target"),
            method_key=_str(d, "methodKey", "method_key"),
            method_name=_str(d, "methodName", "method_name"),
            status=_str(d, "status"),
            message=_str(d, "message"),
            predictions_total=_int(pred, "predictionsTotal", "predictions_total"),
            predictions_made=_int(pred, "predictionsMade", "predictions_made"),
            embedding=EmbeddingProgress.from_json(_dict(d.get("embedding"))),
            predictions_cached=_int(pred, "predictionsCached", "predictions_cached"),
        )


@dataclass(frozen=True)
class Overall:
    """The whole job in one place (the status's ``overall``): what the bar, ``status`` and the web page show."""

    #: Percent of the whole job, 0 to 100.
    percent: float
    #: Seconds left; None until the server can estimate it (queued, or no
    #: measured rate yet: "estimating…"), 0 when finished.
    eta_seconds: int | None
    #: queued, preparing, embedding, predicting, finishing, completed or failed.
    phase: str
    #: The job's input rows.
    rows: int
    #: The 1-based active stage (None before stages exist) and the number of stages.
    stage: int | None
    stages: int
    #: The whole state as one sentence, e.g. "60% · stage 2 of 2 (Km, Method E): … · about 40 s left."
    text: str

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Overall:
        p = d.get("percent")
        return cls(
            percent=float(p) if isinstance(p, (int, float)) and not isinstance(p, bool) else 0.0,
            eta_seconds=_opt_int(d, "etaSeconds"),
            phase=_str(d, "phase"),
            rows=_int(d, "rows"),
            stage=_opt_int(d, "stage"),
            stages=_int(d, "stages"),
            text=_str(d, "text"),
        )


@dataclass(frozen=True)
class JobStatus:
    """A job's status (GET /api/v1/status/{id}/). ``raw`` is the whole payload."""

    job_id: str
    status: str
    submitted_at: datetime | None
    elapsed_seconds: int
    queue_position: int | None
    stages: list[StageStatus]
    active_stage_index: int | None
    completed_stage_count: int
    total_stage_count: int
    predictions_total: int
    predictions_made: int
    embedding: EmbeddingProgress | None
    error: str | None
    synthetic: bool
    raw: dict[str, Any] = field(repr=False)
    #: When the job finished (Completed), UTC.
    completed_at: datetime | None = None
    #: On a finished job: rows charged to the key's daily quota at submit.
    rows_charged: int | None = None
    #: On a finished job: rows given back (no full prediction, or every
    #: prediction from kinflow's prediction cache).
    rows_refunded: int | None = None
    #: On a finished job: of the refunded rows, those served wholly from the cache.
    cached_rows_refunded: int | None = None
    #: The whole job (kinflow's ``overall``: percent, ETA, one sentence); None from a server without it.
    overall: Overall | None = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobStatus:
        prog = _dict(d.get("progress"))
        stages_raw: Any = d.get("progressStages")
        if not isinstance(stages_raw, list):
            stages_raw = prog.get("stages")
        if not isinstance(stages_raw, list):
            stages_raw = []
        emb = prog.get("embedding")
        err = d.get("error")
        charge = _dict(d.get("charge"))
        return cls(
            job_id=_str(d, "jobId"),
            status=_str(d, "status"),
            submitted_at=parse_time(d.get("submittedAt")),
            elapsed_seconds=_int(d, "elapsedSeconds"),
            queue_position=_opt_int(d, "queuePosition"),
            stages=[StageStatus.from_json(s) for s in stages_raw if isinstance(s, dict)],
            active_stage_index=_opt_int(d, "activeStageIndex"),
            completed_stage_count=_int(d, "completedStageCount"),
            total_stage_count=_int(d, "totalStageCount"),
            predictions_total=_int(prog, "predictionsTotal"),
            predictions_made=_int(prog, "predictionsMade"),
            embedding=EmbeddingProgress.from_json(emb) if isinstance(emb, dict) else None,
            error=err if isinstance(err, str) else None,
            synthetic=d.get("synthetic") is True,
            raw=dict(d),
            completed_at=parse_time(d.get("completedAt")),
            rows_charged=_opt_int(charge, "rowsCharged"),
            rows_refunded=_opt_int(charge, "rowsRefunded"),
            cached_rows_refunded=_opt_int(charge, "cachedRowsRefunded"),
            overall=Overall.from_json(d["overall"]) if isinstance(d.get("overall"), dict) else None,
        )

    def __repr__(self) -> str:
        # Short: a notebook shows it after job.wait(); the fields hold the rest.
        parts = [f"job_id={self.job_id!r}", f"status={self.status!r}"]
        if self.overall is not None and self.overall.text:
            parts.append(repr(self.overall.text))
        for s in self.stages:
            parts.append(f"{s.target}·{s.method_key}: {s.status} {s.predictions_made}/{s.predictions_total} rows")
        if self.error:
            parts.append(f"error={self.error!r}")
        if self.rows_refunded:
            parts.append(f"rows_refunded={self.rows_refunded} of {self.rows_charged}")
        if self.synthetic:
            parts.append("synthetic=True")
        return f"JobStatus({', '.join(parts)})"

    @property
    def done(self) -> bool:
        """Whether the job reached a final status (Completed or Failed)."""
        return self.status in ("Completed", "Failed")

    @property
    def charge_line(self) -> str | None:
        """On a finished job, what it cost: "charged N rows, refunded R (C from the prediction cache)"."""
        if self.rows_charged is None:
            return None
        line = f"charged {self.rows_charged} rows, refunded {self.rows_refunded or 0}"
        if self.cached_rows_refunded:
            line += f" ({self.cached_rows_refunded} from the prediction cache)"
        return line + f": {self.rows_charged - (self.rows_refunded or 0)} rows from the daily quota"

    @property
    def active_stage(self) -> StageStatus | None:
        """The running stage, if any."""
        i = self.active_stage_index
        if i is not None and 0 <= i < len(self.stages):
            return self.stages[i]
        return None


@dataclass(frozen=True)
class ValidationReport:
    """What the API says about input rows before a submit: what would be skipped, row by row.

    Rows are numbered as the API numbers them: 1 is the first data row
    after the header, counting only rows that are not entirely empty.
    """

    row_count: int
    invalid_substrates: list[dict[str, Any]]
    invalid_proteins: list[dict[str, Any]]
    length_violations: dict[str, int]
    length_limits: dict[str, int | None]
    similarity: dict[str, Any] | None
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ValidationReport:
        def rows(v: Any) -> list[dict[str, Any]]:
            return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []

        lv = _dict(d.get("lengthViolations"))
        ll = _dict(d.get("lengthLimits"))
        sim = d.get("similarity")
        return cls(
            row_count=_int(d, "rowCount"),
            invalid_substrates=rows(d.get("invalidSubstrates")),
            invalid_proteins=rows(d.get("invalidProteins")),
            length_violations={k: int(v) for k, v in lv.items() if isinstance(v, (int, float))},
            length_limits={k: (int(v) if isinstance(v, (int, float)) else None) for k, v in ll.items()},
            similarity=sim if isinstance(sim, dict) else None,
            raw=dict(d),
        )

    @property
    def problems(self) -> int:
        """How many rows (substrate or protein entries) the report flags."""
        return len(self.invalid_substrates) + len(self.invalid_proteins)

    @property
    def ok(self) -> bool:
        """True when no row is flagged (length violations are handled by handle_long_sequences)."""
        return self.problems == 0

    def to_frame(self) -> pd.DataFrame:
        """The flagged rows as a table: row, kind (substrate/protein), value, reason."""
        recs: list[dict[str, Any]] = []
        for kind, entries in (("substrate", self.invalid_substrates), ("protein", self.invalid_proteins)):
            for e in entries:
                recs.append({"row": e.get("row"), "kind": kind, "value": e.get("value"), "reason": e.get("reason")})
        frame: pd.DataFrame = pd.DataFrame.from_records(recs, columns=["row", "kind", "value", "reason"])
        return frame

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The server's findings in plain language, rows in order (``row``, ``column``,
        ``level``, ``text``); empty from a server that does not write them."""
        v = self.raw.get("messages")
        return [m for m in v if isinstance(m, dict) and isinstance(m.get("text"), str)] if isinstance(v, list) else []

    def summary(self) -> str:
        """One line per finding: the server's own sentences when it writes them, else one per flagged row."""
        lines = [f"{self.row_count} rows"]
        if self.messages:
            lines += [str(m["text"]) for m in self.messages]
            if self.ok:
                lines.append("no row problems")
            return "\n".join(lines)
        for e in self.invalid_proteins:
            lines.append(f"row {e.get('row')}: protein: {e.get('reason')}")
        for e in self.invalid_substrates:
            lines.append(f"row {e.get('row')}: substrate: {e.get('reason')}: {e.get('value')}")
        for k, n in sorted(self.length_violations.items()):
            if n > 0:
                lines.append(f"method {k}: {n} sequence(s) longer than its limit")
        if self.ok:
            lines.append("no row problems")
        return "\n".join(lines)


@dataclass(frozen=True)
class JobSummary:
    """One of the key's jobs, as GET /api/v1/jobs/ lists it."""

    job_id: str
    status: str
    targets: list[str]
    methods: dict[str, str]
    rows: int | None
    submitted_at: datetime | None
    started_at: datetime | None
    completed_at: datetime | None
    synthetic: bool
    raw: dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> JobSummary:
        targets = d.get("targets")
        methods = d.get("methods")
        rows = d.get("rows", d.get("rowCount"))
        return cls(
            job_id=_str(d, "jobId", "id"),
            status=_str(d, "status"),
            targets=[t for t in targets if isinstance(t, str)] if isinstance(targets, list) else [],
            methods={k: v for k, v in methods.items() if isinstance(v, str)} if isinstance(methods, dict) else {},
            rows=int(rows) if isinstance(rows, (int, float)) and not isinstance(rows, bool) else None,
            submitted_at=parse_time(d.get("submittedAt")),
            started_at=parse_time(d.get("startedAt")),
            completed_at=parse_time(d.get("completedAt")),
            synthetic=d.get("synthetic") is True,
            raw=dict(d),
        )
