"""Errors raised while lowering a program."""

from __future__ import annotations


class ExportError(Exception):
    """Lowering failed; the message says what, where it came from and what to do."""


class UnsupportedOpError(ExportError):
    """The graph holds an operator that neither the runtime nor any partitioner supports."""
