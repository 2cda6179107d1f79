"""gzip inflation for the trace readers: zlib's API, ISA-L's speed where it is installed.

python-isal's ``isal_zlib`` is a drop-in for :mod:`zlib` (the same ``decompressobj``,
``unconsumed_tail``, ``unused_data``, ``eof``) and inflates a Kineto trace about 6x as fast
on x86-64 (benchmarks/analyze_speed.py: the decompression-only phase); :mod:`zlib` stands in
where it is not installed. Errors of either are :data:`ERRORS`.
"""

from __future__ import annotations

import os
import types
import zlib
from typing import Any

_impl: types.ModuleType
try:
    from isal import isal_zlib

    _impl = isal_zlib
except ImportError:  # pragma: no cover - isal is a dependency; a platform without a wheel
    _impl = zlib

#: what a corrupt gzip stream raises, whichever inflater reads it
ERRORS: tuple[type[BaseException], ...] = (
    (zlib.error,) if _impl is zlib else (_impl.error, zlib.error))
#: the inflater in use ("isal" or "zlib"), as the analysis-speed benchmark reports it
NAME = "zlib" if _impl is zlib else "isal"


def gzip_member() -> Any:
    """A decompressor of one gzip member (header and trailer checked: ``wbits=31``)."""
    return _impl.decompressobj(wbits=31)


#: the first two bytes of every gzip member (RFC 1952)
MAGIC = b"\x1f\x8b"


def is_gzip(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts as gzip does (by its bytes, not its name); OSError where it
    cannot be read."""
    with open(path, "rb") as f:
        return f.read(2) == MAGIC
