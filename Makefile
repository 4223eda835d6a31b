# The two jobs a newcomer types: `make book` (the main job) and `make test`. Each sets up what it needs.
PY      := .venv/bin/python
MACHINE ?= $(shell $(PY) -m mage machine-name 2>/dev/null || echo local)
DATA    ?= data/h200

.PHONY: venv test test-gpu measure check ceilings rust book book-test clean

venv: .venv/.stamp
.venv/.stamp: requirements.txt pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# CPU tests; Triton kernels run in its interpreter. GPU tests are marked and skip without CUDA.
test: venv
	TRITON_INTERPRET=1 $(PY) -m pytest -q tests

# On a GPU machine: the GPU tests, then the default measurement into data/<this machine>/.
test-gpu:
	python3 -m pytest -q -m gpu tests

measure:
	python3 -m mage measure --out data/$(MACHINE)

check: venv
	TRITON_INTERPRET=1 $(PY) -m mage check

ceilings:
	python3 -m mage ceilings --out data/$(MACHINE)

clean:
	rm -rf _build .pytest_cache
