"""The gzip inflater: ISA-L where installed, zlib otherwise; the readers give the same trace
and the same one-line errors with either."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest

from diagnose.errors import TraceError
from diagnose.trace import inflate, read_trace
from tests import tracebuilder as tb
from tests.readers import trace_difference


@pytest.fixture(params=["installed", "zlib"])
def inflater(request, monkeypatch):
    """Each test runs with the inflater the package picked and with zlib standing in."""
    if request.param == "zlib":
        monkeypatch.setattr(inflate, "_impl", zlib)
        monkeypatch.setattr(inflate, "ERRORS", (zlib.error,))
    return request.param


def _gz_trace(tmp_path, members=1):
    raw = json.dumps(tb.healthy().build(), indent=2).encode()
    cut = len(raw) // members
    parts = [raw[i * cut:(i + 1) * cut if i < members - 1 else None] for i in range(members)]
    p = tmp_path / "t.json.gz"
    p.write_bytes(b"".join(gzip.compress(x) for x in parts))
    plain = tmp_path / "t.json"
    plain.write_bytes(raw)
    return p, plain


def test_isal_is_the_installed_inflater():
    pytest.importorskip("isal")
    assert inflate.NAME == "isal"


@pytest.mark.parametrize("stream", [False, True])
def test_gzip_members_and_trailing_garbage_read_as_the_plain_file(tmp_path, inflater, stream):
    gz, plain = _gz_trace(tmp_path, members=3)
    gz.write_bytes(gz.read_bytes() + b"not gzip")  # ignored, as gzip(1) does
    assert trace_difference(read_trace(plain, stream=False), read_trace(gz, stream=stream)) \
        is None


@pytest.mark.parametrize("stream", [False, True])
def test_corrupt_deflate_data_is_one_trace_error(tmp_path, inflater, stream):
    gz, _ = _gz_trace(tmp_path)
    data = bytearray(gz.read_bytes())
    data[20:60] = b"\xff" * 40  # inside the first deflate block
    gz.write_bytes(bytes(data))
    with pytest.raises(TraceError, match="corrupt gzip data|truncated gzip"):
        read_trace(gz, stream=stream)


def test_a_block_that_ends_inside_the_next_members_magic_loses_nothing(
        tmp_path, inflater, monkeypatch) -> None:
    """The streaming reader reads 1 MB blocks; where one ends right after the first byte
    (0x1f) of the next gzip member, that member is read, not dropped as trailing
    garbage."""
    from diagnose.trace import stream

    raw = json.dumps(tb.healthy().build(), indent=2).encode()
    half = len(raw) // 2
    first, second = gzip.compress(raw[:half]), gzip.compress(raw[half:])
    gz = tmp_path / "t.json.gz"
    gz.write_bytes(first + second)
    monkeypatch.setattr(stream, "BLOCK_BYTES", len(first) + 1)
    text = b"".join(stream._gzip_blocks(gz, 2**40))
    assert text == raw


def test_a_file_is_gzip_by_its_bytes_not_its_name(tmp_path):
    """Every reader asks is_gzip: gzip's magic bytes make a file gzipped, whatever its name;
    a missing file raises OSError (the reader words it)."""
    (packed := tmp_path / "trace.json").write_bytes(gzip.compress(b"[]"))
    (plain := tmp_path / "trace.json.gz").write_bytes(b'{"traceEvents": []}')
    assert inflate.is_gzip(packed) and not inflate.is_gzip(plain)
    with pytest.raises(OSError):
        inflate.is_gzip(tmp_path / "missing.json")
