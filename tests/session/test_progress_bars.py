"""The printed report stands apart from a script's tqdm progress bar (a Hugging Face
Trainer's): the bar is cleared from its line before the report starts, and drawn again
after it, as tqdm's own ``write`` does."""

from __future__ import annotations

import io
import sys

import pytest

from diagnose.session.publish import HEADER, print_apart

tqdm_auto = pytest.importorskip("tqdm.auto")


class _Report:
    def print(self) -> None:
        print("REPORT BODY")


def test_the_report_does_not_start_inside_a_progress_bar(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", out)  # one terminal: the bar and the report mix
    bar = tqdm_auto.tqdm(total=100, file=out, desc="train", mininterval=0, ascii=True)
    try:
        bar.update(5)
        drawn = out.getvalue()
        assert "train" in drawn and not drawn.endswith("\n")  # the bar owns the line
        print_apart(_Report())
        text = out.getvalue()[len(drawn):]
    finally:
        bar.close()
    head, body = text.index(HEADER), text.index("REPORT BODY")
    before, after = text[:head], text[body:]
    # cleared: the bar's line is blanked (carriage return, spaces) before the report...
    assert before.startswith("\r") and "train" not in before
    # ...and drawn again after it, on its own line
    assert "train" in after and "5/100" in after


def test_no_progress_bar_no_change(monkeypatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    print_apart(_Report())
    text = out.getvalue()
    assert text.index(HEADER) < text.index("REPORT BODY") and "\r" not in text
