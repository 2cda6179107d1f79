"""pin_memory is in place where the loader already pins its batches: by its setting (a live
capture), or, in a saved trace, by pinned host-to-device copies beside the pageable ones;
the step's small tensors are then what to fix (``device_tensors``)."""

from __future__ import annotations

from diagnose.fixes import FIXES


def test_pin_memory_in_place_by_the_loaders_setting_or_the_copies() -> None:
    pin = FIXES["pin_memory"]
    assert pin.instead == ("device_tensors",)
    assert "already pins" in pin.in_place({"dataloader_pin_memory": True})
    assert pin.in_place({"dataloader_pin_memory": False, "memcpy_h2d_pinned_count": 5}) is None
    assert "5 host-to-device copies" in pin.in_place({"memcpy_h2d_pinned_count": 5})
    assert pin.in_place({"memcpy_h2d_pinned_count": 0}) is None
    assert pin.in_place({}) is None
