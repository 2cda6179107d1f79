# Everything a fresh machine needs: `make test` and `make demo` create .venv,
# install torch (CPU wheel pinned; override with TORCH=...) and the project.
PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv test demo lint clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first and pinned, so nothing later can pull the CUDA wheels.
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

venv: $(STAMP)

# mypy ([tool.mypy] in pyproject.toml) over the whole package, after the import contracts.
test: $(STAMP)
	$(BIN)/lint-imports --no-cache
	$(BIN)/mypy diagnose
	$(BIN)/python -m pytest -q -p no:cacheprovider

demo: $(STAMP)
	$(BIN)/torch-diagnose demo

lint: $(STAMP)
	$(BIN)/ruff check diagnose tests samples benchmarks
	$(BIN)/lint-imports --no-cache

clean:
	rm -rf $(VENV) build dist *.egg-info
