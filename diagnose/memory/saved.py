"""Tensors saved for backward in the tracked step, as the tracker files them: the bytes
each module's saved activations hold (:class:`Release` takes a freed storage's off), and
what a graph still holds (:class:`Packed`, the object autograd keeps for a saved
activation: its end is the graph's hold ending)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Release:
    """A saved activation's storage freed: its bytes leave its module's running total."""

    alive: dict[str, int]
    creator: str
    nbytes: int

    def __call__(self, _ref: Any) -> None:
        self.alive[self.creator] = self.alive.get(self.creator, 0) - self.nbytes


def by_creator(records: list[tuple[int, str, frozenset[str]]]) -> dict[str, int]:
    """Saved bytes by the module that made them, from (bytes, creator, savers) records."""
    out: dict[str, int] = {}
    for nbytes, creator, _ in records:
        out[creator] = out.get(creator, 0) + nbytes
    return out


class Packed:
    """A saved activation as autograd holds it: the tensor, detached (a saved output's
    grad_fn is the node that saves it: held here, a cycle through C++ that Python's
    collector never frees), in a wrapper that lives as long as some graph holds it. The first hold of a storage adds its bytes to ``held`` (by the
    module that made it) and the last one's end takes them off, so what is left as the
    step ends is what graphs kept past it (ME005), not what the loop's own variables do."""

    __slots__ = ("__weakref__", "t")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t

    @classmethod
    def holding(cls, t: torch.Tensor, recs: list[list[Any]], held: dict[str, int]) -> Packed:
        for rec in recs:
            if rec[4] == 0:
                held[rec[1]] = held.get(rec[1], 0) + rec[0]
            rec[4] += 1
        packed = cls(t.detach())
        weakref.finalize(packed, let_go, recs, held)
        return packed


def let_go(recs: list[list[Any]], held: dict[str, int]) -> None:
    """A graph's hold on saved storages ended (see :class:`Packed`)."""
    for rec in recs:
        rec[4] -= 1
        if rec[4] == 0:
            held[rec[1]] = held.get(rec[1], 0) - rec[0]


def unpack(t: Any) -> torch.Tensor:
    """The saved tensor backward asks for (a :class:`Packed` or, where the tracker filed
    nothing, the tensor itself)."""
    return t.t if isinstance(t, Packed) else t
