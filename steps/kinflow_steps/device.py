"""What crosses from the device to the host, and how (steps/README.md, "The pipelined server").

A forward pass leaves, per layer, a device tensor holding every sequence's residue rows
(a padded [B, T, D] batch or the unpadded [T, D] run of sequences laid end to end).
``DeviceReps`` says where each sequence's residue rows and BOS/CLS row are in it, so
that the reductions run on the device and only what a file holds crosses:

* a mean or a binding-site-weighted mean is a [D] vector per sequence, summed on the
  device in float64 (``torch.index_add_`` over the residue rows): at least as exact as
  the float64 host mean that the equivalence tests use, whatever order the device adds
  in (steps/tests/test_pipeline.py compares the two; on CUDA the proof is gpu_suite's
  ``device_reduce`` rows);
* a CLS row is one [D] vector per sequence;
* a residue-level family crosses as one contiguous [rows, D] float32 block per layer
  and batch, cut into per-sequence matrices on the host.

Every sequence's rows are also checked for NaN and infinities on the device: a [B]
flag crosses, so the non-finite rule (nothing written for such a batch) is unchanged.

``Transfer`` starts the copies: on CUDA into pinned host buffers, non-blocking, on a
copy stream of their own, with an event the host thread waits on, so that the next
forward pass runs while they copy; elsewhere the tensors already live on the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


def to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    """A small host tensor (indexes, weights) on dev without waiting for the device: on
    CUDA through pinned memory and a non-blocking copy, since a copy from pageable memory
    would block this thread until the forward pass queued before it is done."""
    if dev.type == "cuda":
        return t.pin_memory().to(dev, non_blocking=True)
    return t.to(dev)


@dataclass
class DeviceReps:
    """A forward pass's representations on the device.

    reps: per layer asked, the device tensor; index: a tuple of index tensors that
    picks every residue row of every sequence, sequences in order (``rep[index]`` is
    [R, D]); seg: [R] the sequence each such row belongs to; cls: a tuple of index
    tensors picking each sequence's BOS/CLS row ([B, D]); rows: residue rows kept per
    sequence."""

    reps: dict[Any, torch.Tensor]
    index: tuple[torch.Tensor, ...]
    seg: torch.Tensor
    cls: tuple[torch.Tensor, ...]
    rows: list[int]

    @staticmethod
    def padded(reps: dict[Any, torch.Tensor], rows: list[int], first: int) -> DeviceReps:
        """Residues of row b at rep[b, first : first + rows[b]] of [B, T, D] tensors;
        the CLS row at rep[b, 0]."""
        dev = next(iter(reps.values())).device
        b_idx = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor(rows, dtype=torch.long))
        t_idx = torch.cat([torch.arange(first, first + n) for n in rows]) if rows else torch.zeros(0, dtype=torch.long)
        b_idx, t_idx = to_device(b_idx, dev), to_device(t_idx, dev)
        cls = (torch.arange(len(rows), device=dev), torch.zeros(len(rows), dtype=torch.long, device=dev))
        return DeviceReps(reps, (b_idx, t_idx), b_idx, cls, list(rows))

    @staticmethod
    def flat(reps: dict[Any, torch.Tensor], rows: list[int], starts: list[int]) -> DeviceReps:
        """Sequences end to end in [T, D] tensors: sequence i's BOS at starts[i], its
        residues the rows[i] rows after it."""
        dev = next(iter(reps.values())).device
        idx = torch.cat([torch.arange(a + 1, a + 1 + n) for a, n in zip(starts, rows, strict=True)])
        seg = torch.repeat_interleave(torch.arange(len(rows)), torch.tensor(rows, dtype=torch.long))
        cls = (to_device(torch.tensor(starts, dtype=torch.long), dev),)
        return DeviceReps(reps, (to_device(idx, dev),), to_device(seg, dev), cls, list(rows))

    def residues(self, layer: Any) -> torch.Tensor:
        """[R, D] residue rows of layer, sequences in order (one contiguous tensor)."""
        return self.reps[layer][self.index]

    def cls_rows(self, layer: Any) -> torch.Tensor:
        return self.reps[layer][self.cls].float()


def reduce_means(res: torch.Tensor, seg: torch.Tensor, rows: list[int], weights: torch.Tensor | None) -> torch.Tensor:
    """Per-sequence means of res [R, D] (seg: [R] sequence of each row), in float64:
    the plain mean, or with weights ([R] float64, each sequence's already normalised
    to sum 1) the weighted sum. Returns [B, D] float64."""
    b = len(rows)
    acc = torch.zeros(b, res.shape[-1], dtype=torch.float64, device=res.device)
    x = res.to(torch.float64)
    if weights is not None:
        return acc.index_add_(0, seg, x * weights[:, None])
    acc.index_add_(0, seg, x)
    n = to_device(torch.tensor(rows, dtype=torch.float64), res.device).clamp_min(1)
    return acc / n[:, None]


def nonfinite_flags(res: torch.Tensor, seg: torch.Tensor, b: int) -> torch.Tensor:
    """[B] bool: whether any residue row of each sequence holds a NaN or an infinity."""
    bad = (~torch.isfinite(res)).any(dim=-1).to(torch.int32)
    return torch.zeros(b, dtype=torch.int32, device=res.device).index_add_(0, seg, bad) > 0


_COPY_STREAMS: dict[Any, Any] = {}


def copy_stream(device: torch.device) -> Any:
    """The one copy stream of a CUDA device (created at first use)."""
    s = _COPY_STREAMS.get(device)
    if s is None:
        s = torch.cuda.Stream(device=device)
        _COPY_STREAMS[device] = s
    return s


class Transfer:
    """Device→host copies of a batch's tensors, started at once; ``wait`` returns them
    as NumPy arrays. On CUDA: pinned host buffers, ``copy_(non_blocking=True)`` on the
    device's copy stream after the compute stream's work so far, an event recorded
    after them (the device tensors are kept alive for the copy stream with
    ``record_stream``); the host thread that calls ``wait`` blocks on that event, never
    the thread that runs the next forward pass. Elsewhere the tensors are on the host
    already and cross as they are."""

    def __init__(self, tensors: dict[str, torch.Tensor]):
        self.event = None
        first = next(iter(tensors.values()), None)
        if first is None or first.device.type != "cuda":
            self.host = {k: t.detach().cpu() for k, t in tensors.items()}
            return
        dev = first.device
        stream = copy_stream(dev)
        stream.wait_stream(torch.cuda.current_stream(dev))
        self.host = {}
        with torch.cuda.stream(stream):
            for k, t in tensors.items():
                buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                buf.copy_(t, non_blocking=True)
                t.record_stream(stream)
                self.host[k] = buf
            self.event = torch.cuda.Event()
            self.event.record(stream)

    def wait(self) -> dict[str, np.ndarray]:
        if self.event is not None:
            self.event.synchronize()
        return {k: v.numpy() for k, v in self.host.items()}
