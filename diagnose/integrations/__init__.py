"""Callbacks for the trainers people use: ``diagnose.integrations.lightning`` (Lightning)
and ``diagnose.integrations.transformers`` (Hugging Face Trainer): each has
``DiagnoseCallback`` (one profiled window, as ``diagnose``) and ``WatchCallback`` (the
whole run, as ``watch``).

Each module imports its trainer; a missing trainer is one clear error naming the extra
to install (``pip install 'torch-diagnose[lightning]'`` / ``[transformers]``). This package
itself imports nothing heavy.
"""
