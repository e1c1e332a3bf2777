# Set-up is part of each target: a fresh clone needs only `make demo` or `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast figures bench lint clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e ".[dev,torch]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/python -m simulator demo

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 -q

test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -n 2 -q -m "not slow"

figures: $(BIN)/.installed
	$(BIN)/python -m simulator figures

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/floor.py
	$(BIN)/python benchmarks/engine_throughput.py
	$(BIN)/python benchmarks/ring_allreduce_vs_simpy.py
	$(BIN)/python benchmarks/tp_matmul_overhead.py
	$(BIN)/python benchmarks/scale_3d_step.py
	$(BIN)/python benchmarks/whatif_gpt3.py
	$(BIN)/python benchmarks/export_scale.py
	$(BIN)/python benchmarks/torch_ring_prediction.py
	$(BIN)/python benchmarks/torch_allreduce_overhead.py
	$(BIN)/python benchmarks/view_page_scale.py

lint: $(BIN)/.installed
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
