# Set-up is part of each target: a fresh clone needs only `make demo`, `make lab` or `make test`.
# Each installs only what it needs: the demo the package alone, the lab JupyterLab (no torch: a class of 80 does not
# download it in the room), the tests the test tools and torch (a large download). One .venv serves them all; a stamp
# file says what is installed.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PIP := $(BIN)/pip install -q -c constraints.txt

.PHONY: demo lab test test-fast docs figures notebooks bench lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.demo: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e .
	touch $@

# The lab needs no torch: notebooks 06 and 12 (real torch.distributed processes, torch programs) and one cell of 07
# do, and say at their first cell how to add it: $(BIN)/pip install -e ".[torch]" -c constraints.txt
$(VENV)/.lab: pyproject.toml constraints.txt Makefile | $(BIN)/python
	$(PIP) -e ".[notebooks]"
	touch $@

# The docs need mkdocs and mkdocstrings only: mkdocstrings reads the sources without importing them.
$(VENV)/.docs: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[docs]"
	touch $@

$(BIN)/.installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) -e ".[dev,torch]"
	touch $@

demo: $(VENV)/.demo
	$(BIN)/python -m simulator demo

lab: $(VENV)/.lab
	$(BIN)/jupyter lab notebooks/

# compileall first: where PYTHONDONTWRITEBYTECODE is set (as on the machines this project runs on), every process the tests start (the
# command line, notebooks' kernels, gloo workers) would otherwise compile the package from source again.
test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir .venv/site
	$(BIN)/python -m compileall -q simulator
	$(BIN)/python -m pytest -n 2 -q

test-fast: $(BIN)/.installed
	$(BIN)/python -m compileall -q simulator
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

# The guides and the API reference (docs/, mkdocs.yml), built strictly: a broken link or reference fails.
docs: $(VENV)/.docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

figures: $(BIN)/.installed
	$(BIN)/python -m simulator figures

notebooks: $(BIN)/.installed
	$(BIN)/python -m tests.notebooks

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/floor.py
	$(BIN)/python benchmarks/engine_throughput.py
	$(BIN)/python benchmarks/pingpong_ceiling.py
	$(BIN)/python benchmarks/ring_allreduce_vs_simpy.py --devices 64 --kept
	$(BIN)/python benchmarks/ring_allreduce_vs_simpy.py --devices 256 --kept
	$(BIN)/python benchmarks/ring_allreduce_vs_simpy.py --devices 1024
	$(BIN)/python benchmarks/message_path_bound.py
	$(BIN)/python benchmarks/checker_cost.py
	$(BIN)/python benchmarks/isolation_cost.py
	$(BIN)/python benchmarks/tp_matmul_overhead.py
	$(BIN)/python benchmarks/scale_3d_step.py
	$(BIN)/python benchmarks/blas_threads.py
	$(BIN)/python benchmarks/buffer_budget.py
	$(BIN)/python benchmarks/whatif_gpt3.py
	$(BIN)/python benchmarks/export_scale.py
	$(BIN)/python benchmarks/torch_ring_prediction.py
	$(BIN)/python benchmarks/torch_step_prediction.py
	$(BIN)/python benchmarks/torch_allreduce_overhead.py
	$(BIN)/python benchmarks/gpu_check.py
	$(BIN)/python benchmarks/view_page_scale.py

lint: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
