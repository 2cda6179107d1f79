"""Training jobs of a user's own (not the samples), for checking predictions and autofix.

Each module has ``make_job()`` returning ``{"model", "loader", "optimizer", "loss_fn"}`` as
``torch-diagnose autofix benchmarks/jobs/<name>.py:make_job`` takes it. Every job is small
enough to run a few hundred steps in seconds on 2 CPUs, and each plants a different input
pipeline question:

- ``augment_cnn``: per-sample image augmentation (op-heavy) in the training process;
- ``tokenizing``: per-sample pure-Python tokenising (the GIL holds it in one process);
- ``too_many_workers``: more DataLoader workers than the machine has CPUs;
- ``tensor_rows``: in-memory tensor rows with big batches (per-sample indexing + collate);
- ``wide_rows``: dict samples of 24 small tensors parsed from text (a worker hands each
  tensor over on its own);
- ``masked_lm``: a small transformer whose loading is a few percent of the step;
- ``npy_files``: one ``.npy`` file read and augmented per sample, beside a CNN on
  torch's threads (workers and one thread both predicted and timed slower).
"""
