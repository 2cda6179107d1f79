"""Renderers of what they are given: text (rich), JSON, HTML (+ plots), compare, and
TensorBoard (event files, trace copies for torch-tb-profiler, the Diagnose tab)."""
