"""The pipelined step server (steps/README.md, "The pipelined server"): the device never waits on the host.

A batch's forward passes (a host batch split by KINFLOW_STEPS_TOKS_PER_BATCH, and the
passes of the batches the host sent ahead) go through three stages at once:

1. the compute thread (the caller's) runs pass n+1's forward pass and its reductions
   on the device and starts their copy to the host (kinflow_steps.device.Transfer);
2. a small writer pool (KINFLOW_STEPS_WRITERS threads) waits for pass n's copy,
   encodes its files and writes, fsyncs and hashes each under its hidden temp name
   (cache_io.stage_bytes);
3. ``commit``, in batch order, merges the batch's manifest records and renames its
   files into place once every pass of the batch is staged, then the caller answers.

So the write protocol (temp file in the final folder, fsync, record with size,
mtime_ns and SHA-256 in manifest.json under its lock, then the rename) and
its all-or-nothing rule for a non-finite batch are the serial server's, and a kill at
any point leaves only hidden temp files, which nothing reads.

Memory is bounded by KINFLOW_STEPS_PIPELINE_DEPTH: at most that many forward passes
are between the start of their forward pass and the end of their staging (their
device results, pinned host buffers and encoded bytes); the compute thread waits for
a slot before the next pass. Depth 1 turns the overlap off: the same code, one pass
at a time.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from kinflow_steps.batch import Batch, Seq
from kinflow_steps.errors import BatchError, ConfigError, NonFiniteError
from kinflow_steps.writer import HostPart, Writer

#: Forward passes in flight. 3 = one in the forward pass, one being copied to the host,
#: one being written: the pipeline's three stages each busy. More buys nothing once
#: the host keeps up (the device is then the bottleneck) and costs a batch's results
#: each (84 MB of pinned memory for a 16,384-token ESM-2 residue batch).
DEFAULT_DEPTH = 3
#: Writer threads. 2: one stages a pass's files while the next pass's copy is awaited;
#: fsync and SHA-256 release the GIL, so more threads mostly contend for the disk.
DEFAULT_WRITERS = 2


def setting(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        v = int(raw) if raw else default
    except ValueError as exc:
        raise ConfigError(f"{name}={raw!r} is not an integer") from exc
    if v < 1:
        raise ConfigError(f"{name}={v}: want 1 or more")
    return v


class Planned(Protocol):
    """What the pipeline needs of a step (kinflow_steps.base.Step): its batch's forward
    passes and each pass run to its host part. The step classes use the pipeline, so
    the pipeline names only this, not them."""

    def plan(self, b: Batch) -> tuple[list[list[tuple[Seq, dict[str, str]]]], list[str]]: ...

    def forward(self, b: Batch, group: list[tuple[Seq, dict[str, str]]]) -> HostPart: ...


@dataclass
class Ticket:
    """A batch on its way through the pipeline: per forward pass, in order, the future
    of its host part or the problem its forward pass raised."""

    batch: Batch
    problems: list[str]
    parts: list[Future | str] = field(default_factory=list)
    #: a fatal error of the compute stage (out of memory, a non-finite pass)
    fatal: BaseException | None = None
    #: set when a host part fails the whole batch: its later passes are skipped
    failed: threading.Event = field(default_factory=threading.Event)


class Pipeline:
    """The three stages of a step's batches (module doc). ``submit`` runs on the compute
    thread, ``commit`` on the thread that answers, in batch order."""

    def __init__(self, step: Planned, depth: int | None = None, writers: int | None = None):
        self.step = step
        self.depth = depth or setting("KINFLOW_STEPS_PIPELINE_DEPTH", DEFAULT_DEPTH)
        self.writers = writers or setting("KINFLOW_STEPS_WRITERS", DEFAULT_WRITERS)
        self.slots = threading.Semaphore(self.depth)
        self.pool = ThreadPoolExecutor(max_workers=self.writers, thread_name_prefix="kinflow-writer")
        self.lock = threading.Lock()
        #: forward passes between their slot's acquire and release, and the most seen
        self.in_flight = 0
        self.max_in_flight = 0
        #: seconds in each stage, summed (the CPU overlap benchmark reads them): forward
        #: passes, host parts (copy waits, encoding, staging), records and renames
        self.forward_s = 0.0
        self.host_s = 0.0
        self.commit_s = 0.0

    def _acquire(self) -> None:
        self.slots.acquire()
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _release(self) -> None:
        with self.lock:
            self.in_flight -= 1
        self.slots.release()

    def submit(self, b: Batch) -> Ticket:
        """Plan the batch and run its forward passes, each handed to the writer pool
        as soon as it is done; BatchError when the manifest itself is wrong."""
        groups, problems = self.step.plan(b)
        t = Ticket(b, problems)
        for group in groups:
            if t.failed.is_set():
                break
            self._acquire()
            start = time.monotonic()
            try:
                host = self.step.forward(b, group)
            except NonFiniteError as exc:
                self._release()
                t.fatal = exc
                break
            except BatchError as exc:
                self._release()
                t.parts.append(str(exc))
                continue
            except BaseException as exc:
                self._release()
                t.fatal = exc
                break
            finally:
                self.forward_s += time.monotonic() - start
            t.parts.append(self.pool.submit(self._host, t, host))
        return t

    def _host(self, t: Ticket, host: HostPart) -> tuple[Writer, str | None]:
        w = Writer(stage_at_put=True)
        start = time.monotonic()
        try:
            host(w)
            return w, None
        except NonFiniteError:
            w.discard()
            t.failed.set()
            raise
        except BatchError as exc:
            return w, str(exc)
        except BaseException:
            w.discard()
            t.failed.set()
            raise
        finally:
            with self.lock:
                self.host_s += time.monotonic() - start
            self._release()

    def commit(self, t: Ticket) -> int:
        """Wait for every pass of t, then record and publish its files (or, when one
        failed the batch, discard them all and raise that error); BatchError with the
        problems after the files that could be written. Returns the files written."""
        staged = Writer()
        problems = list(t.problems)
        fatal: BaseException | None = None
        for part in t.parts:
            if isinstance(part, str):
                problems.append(part)
                continue
            try:
                w, msg = part.result()
            except BaseException as exc:
                fatal = fatal or exc
                continue
            staged.absorb(w)
            if msg:
                problems.append(msg)
        fatal = fatal or t.fatal
        if fatal is not None:
            staged.discard()
            raise fatal
        start = time.monotonic()
        try:
            staged.commit()
        finally:
            self.commit_s += time.monotonic() - start
        if problems:
            raise BatchError("; ".join(problems))
        return staged.written

    def run(self, b: Batch) -> int:
        return self.commit(self.submit(b))

    def stats(self) -> str:
        return (
            f"pipeline depth {self.depth}, {self.writers} writer(s): forward {self.forward_s:.3f}s, "
            f"host {self.host_s:.3f}s, commit {self.commit_s:.3f}s, most passes in flight {self.max_in_flight}"
        )

    def close(self) -> None:
        self.pool.shutdown(wait=True)
