"""``numbers.floats`` gives, bit for bit, the floats msgspec decodes from the same texts,
and the chunked readers (which read ``ts`` through it) the whole read's time column."""

from __future__ import annotations

import json
import random
import re

import msgspec
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diagnose.trace import numbers, read_trace, stream
from tests import tracebuilder as tb
from tests.readers import InProcessExecutor
from tests.readers import small_chunks as tiny_pieces

_FLOATS = msgspec.json.Decoder(list[float])
_RAWS = msgspec.json.Decoder(list[msgspec.Raw])


def _raws(texts: list[bytes]) -> list[msgspec.Raw]:
    """The texts as the chunk decoder hands them over (``b""``: the field was absent)."""
    got = _RAWS.decode(b"[" + b",".join(t or b"0" for t in texts) + b"]")
    return [r if t else msgspec.Raw(b"") for r, t in zip(got, texts, strict=True)]


def _msgspec(texts: list[bytes]) -> np.ndarray:
    out = np.full(len(texts), np.nan)
    have = [i for i, t in enumerate(texts) if t]
    if have:
        out[have] = _FLOATS.decode(b"[" + b",".join(texts[i] for i in have) + b"]")
    return out


def assert_bitwise(texts: list[bytes]) -> None:
    got, want = numbers.floats(_raws(texts)), _msgspec(texts)
    bad = np.flatnonzero(got.view(np.int64) != want.view(np.int64))
    assert not len(bad), [(texts[i], got[i], want[i]) for i in bad[:5]]


def _text(rng: random.Random) -> bytes:
    """A JSON number in one of the forms traces hold, or one the fast paths leave alone."""
    c = rng.random()
    if c < 0.3:  # a time in microseconds since the epoch, a few fraction digits
        k = rng.randrange(0, 4)
        whole = 1712195495520936 + rng.randrange(10**6)
        return f"{whole}.{rng.randrange(10**k):0{k}d}".encode() if k else str(whole).encode()
    if c < 0.5:  # any split of 1-19 digits into whole and fraction, bounds of each path
        k = rng.randrange(1, 20)
        e = rng.randrange(0, 20 - k)
        whole = rng.choice([rng.randrange(10**e, 10**(e + 1)), 2 * 10**k, 2 * 10**k - 1,
                            2**53 - 1, 2**53, 2**53 + 1])
        return f"{whole}.{rng.randrange(10**k):0{k}d}".encode()
    if c < 0.6:  # halfway between two float64s: left to msgspec
        return str(rng.randrange(2**53, 2**60) * 2 + 1).encode()
    if c < 0.7:
        return f"-{rng.randrange(10**9)}.{rng.randrange(10**6)}".encode()
    if c < 0.8:
        return repr(rng.uniform(-1e6, 1e6)).encode()
    return rng.choice([b"0", b"-0", b"0.0", b"-0.0", b"1e5", b"-1.5E-3", b"", b"7",
                       b"9007199254740993", b"18446744073709551615", b"18446744073709551616",
                       b"12345678901234567890.5", b"0.000000000000000000001"])


@pytest.mark.parametrize("seed", range(20))
def test_mixed_texts_read_as_msgspec_reads_them(seed):
    rng = random.Random(seed)
    assert_bitwise([_text(rng) for _ in range(rng.randrange(1, 300))])


@pytest.mark.parametrize("fmt", ["{:.1f}", "{:.3f}", "{:.0f}", "{!r}"])
def test_one_layout_reads_as_msgspec(fmt):
    """The usual chunk: every ts written alike (the texts form a matrix)."""
    rng = random.Random(7)
    assert_bitwise([fmt.format(1712195495520936 + rng.randrange(10**7) / 8).encode()
                    for _ in range(500)])


def test_without_extended_precision_the_rest_goes_to_msgspec(monkeypatch):
    monkeypatch.setattr(numbers, "_EXTENDED", False)
    rng = random.Random(3)
    assert_bitwise([_text(rng) for _ in range(500)])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: repr(x).encode()),
    st.integers(-10**20, 10**20).map(lambda i: str(i).encode()),
    st.tuples(st.integers(0, 10**17), st.integers(0, 10**6)).map(
        lambda t: f"{t[0]}.{t[1]}".encode()),
    st.just(b"")), min_size=1, max_size=40))
def test_any_number_reads_as_msgspec(texts):
    assert_bitwise(texts)


@pytest.mark.parametrize("bad", [b'"12.5"', b"null", b"[1, 2]", b"true", b'"a b"', b"{}"])
def test_not_a_number_is_not_streamable(bad):
    """As the typed decode refused such a ts, the chunk is not read: the caller reads the
    whole document (NotNumbers is a NotStreamable)."""
    with pytest.raises(stream.NotStreamable):
        numbers.floats(_raws([b"1.5", bad, b"2"]))


def test_ts_as_text_in_a_trace_falls_back_whole(tmp_path):
    doc = tb.healthy().build()
    doc["traceEvents"][5]["ts"] = str(doc["traceEvents"][5]["ts"])
    p = tmp_path / "odd.json"
    p.write_text(json.dumps(doc, indent=2))
    with pytest.raises(stream.NotStreamable):
        stream.read_streaming(p, 2**40)
    assert len(read_trace(p, stream=True)) == len(read_trace(p, stream=False))


@pytest.mark.parametrize("decimals", [None, 1, 3])
def test_chunked_reads_give_the_whole_reads_time_column_bit_for_bit(tmp_path, decimals):
    """A builder trace moved to epoch times (16 integer digits, as torch.profiler writes
    them): the streaming and parallel reads' ts equal the whole read's, bit for bit."""
    from diagnose.trace import parallel

    doc = tb.launch_bound(kernels=60, steps=3).build()
    for i, e in enumerate(doc["traceEvents"]):
        if isinstance(e.get("ts"), int | float):
            e["ts"] = 1712195495520936 + e["ts"] + (i % 8) / 8
    text = json.dumps(doc, indent=2)
    if decimals is not None:  # fixed fraction digits, as Kineto writes them
        text = re.sub(r'"ts": ([0-9.]+)', lambda m: f'"ts": {float(m[1]):.{decimals}f}', text)
    p = tmp_path / "epoch.json"
    p.write_text(text)
    whole = read_trace(p, stream=False)
    with tiny_pieces():
        reads = [stream.read_streaming(p, 2**40),
                 parallel.read_parallel(p, 2**40, 3, pool=InProcessExecutor())]
    for got in reads:
        assert got.ts.view(np.int64).tolist() == whole.ts.view(np.int64).tolist()
