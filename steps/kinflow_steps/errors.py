"""Errors the protocol loop tells apart."""


class ConfigError(Exception):
    """The host's configuration cannot run the step (a missing weights path, a missing
    package): reported before ``ready``, and the program exits non-zero."""


class BatchError(Exception):
    """This batch cannot be done (a bad sequence, a missing binding-site row); the
    program answers ``error`` and stays up."""


class NonFiniteError(BatchError):
    """A model output holds a NaN or an infinity: the batch answers ``error`` naming
    the sequences and writes nothing (a non-finite vector must never be cached)."""
