"""The test suite is a package: pytest then puts the checkout, not tests/, on sys.path, so
test helpers (tests/datasets.py) cannot shadow installed packages (Hugging Face `datasets`,
which transformers looks for by name)."""
