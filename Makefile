# The two jobs a newcomer types: `make book` (the main job) and `make test`. Each sets up what it needs.
PY      := .venv/bin/python
MACHINE ?= $(shell $(PY) -m mage machine-name 2>/dev/null || echo local)

.PHONY: venv test test-all test-gpu measure check ceilings rust rust-lint book book-assets book-test regenerate wheels wheels-libraries wheels-models clean

venv: .venv/.stamp
.venv/.stamp: requirements.txt pyproject.toml
	python3 -m venv .venv
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $@

# CPU tests (tests/ and kernels/<op>/tests/) on every core (pytest-xdist); Triton kernels run in its
# interpreter. GPU tests are marked and skip without CUDA. Two tiers: `test` leaves out the tests marked
# slow or book (about 8 minutes on 2 cores); `test-all` is every test (what CI runs; about 20 minutes on 2
# cores, the book's build included).
PYTEST := TRITON_INTERPRET=1 $(PY) -m pytest -q -n auto
test: venv
	$(PYTEST) -m "not slow and not book"

# The book is built first (strict, as `make book`), so no test worker waits on the build.
test-all: venv book
	$(PYTEST)

# On a GPU machine: the GPU tests (tests/ and each operation's folder). A registered implementation
# that cannot run here fails; leave one out by name with MAGE_GPU_EXCLUDE=rust_native,rust_ptx_py.
# MAGE_FAILURE_LOG=FILE appends each random-shape failure (shape and reason) to FILE as it is found.
test-gpu:
	python3 -m pytest -q -m gpu

measure:
	python3 -m mage measure --out data/$(MACHINE)

check: venv
	TRITON_INTERPRET=1 $(PY) -m mage check

ceilings:
	python3 -m mage ceilings --out data/$(MACHINE)

# The Rust kernels: PTX (checked by ptxas for sm_90), libmage_rust.so, rust_native and the Rust tests,
# under kernels/_rust/build/. Needs Debian's rustc-web and rust-web-src; installs nothing.
rust:
	kernels/_rust/build.sh
	kernels/_rust/build/host_tests -q
	kernels/_rust/build/device_tests -q

# rustfmt --check and clippy (warnings denied) over the Rust host and device code. The host crate
# embeds the PTX, so the kernels are built first (cached after the first build).
rust-lint:
	kernels/_rust/build.sh
	kernels/_rust/build.sh --lint

# ---- the book -------------------------------------------------------------------------------------
# The front-end files the book serves itself (offline), once for the whole site so the browser caches them:
# plotly.js (the basic bundle: bar and scatter traces, which is all the figures draw; the version the pinned
# plotly package bundles), require.js, the widget manager and MathJax (from npm), and the book's own loader
# and styles (notes/js/), into _assets/_static/offline/ (ignored). JB1 adds every file
# under the source _static/ to every page, so they live in an extra path that Sphinx copies into the
# output's _static/ instead.
ASSETS := _assets/_static/offline
book-assets: $(ASSETS)/.stamp
$(ASSETS)/.stamp: package.json package-lock.json notes/js/widgets-offline.js notes/js/mage-book.js notes/js/mage-book.css
	npm ci --no-audit --no-fund --ignore-scripts --loglevel=error
	rm -rf _assets && mkdir -p $(ASSETS)/html-manager $(ASSETS)/mathjax
	cp node_modules/requirejs/require.js notes/js/widgets-offline.js notes/js/mage-book.js notes/js/mage-book.css $(ASSETS)/
	cp node_modules/plotly.js-basic-dist-min/plotly-basic.min.js $(ASSETS)/plotly.min.js
	cp node_modules/@jupyter-widgets/html-manager/dist/embed-amd.js \
	   node_modules/@jupyter-widgets/html-manager/dist/*.woff* node_modules/@jupyter-widgets/html-manager/dist/*.ttf \
	   node_modules/@jupyter-widgets/html-manager/dist/*.eot node_modules/@jupyter-widgets/html-manager/dist/*.svg \
	   $(ASSETS)/html-manager/
	cp -r node_modules/mathjax/es5/tex-chtml.js node_modules/mathjax/es5/input node_modules/mathjax/es5/output \
	   node_modules/mathjax/es5/a11y node_modules/mathjax/es5/ui node_modules/mathjax/es5/adaptors $(ASSETS)/mathjax/
	touch $@

# The book from the recorded data (MAGE_DATA, default mage.book.DEFAULT_DATA); strict: a warning or a cell
# error fails it. Ends with each page's weight.
book: venv book-assets
	@$(PY) -m mage.book
	PYTHONPATH="$(CURDIR)" .venv/bin/jupyter-book build . -W --keep-going --all
	@$(PY) -m mage.book.figure_site _build/html
	@echo "The book is in $(CURDIR)/_build/html/ (open $(CURDIR)/_build/html/index.html)"

# The browser test of the built book (builds it first if _build/html is missing).
book-test: venv book-assets
	$(PY) -m pytest -q tests/test_figures.py tests/test_book.py

# On a GPU machine: measure everything into data/<this machine>/, then build the book from it.
regenerate:
	python3 -m mage measure --all --out data/$(MACHINE)
	$(MAKE) book MAGE_DATA=data/$(MACHINE)

# Wheels for executing the pages with nbclient on a GPU machine whose Python lacks notebook packages.
wheels:
	bash notes/wheels.sh

# cuEquivariance and what it needs, for the triangle update's comparison on a GPU machine without them
wheels-libraries:
	MAGE_WHEELS=.whl-lib MAGE_WHEEL_LIST=notes/wheels_libraries.txt bash notes/wheels.sh

# MACE and what importing it needs, for the model chapter's molecular model on such a machine
wheels-models:
	MAGE_WHEELS=.whl-models MAGE_WHEEL_LIST=notes/wheels_models.txt bash notes/wheels.sh

clean:
	rm -rf _build .pytest_cache
