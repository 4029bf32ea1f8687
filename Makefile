# The course's commands. Each one creates .venv first when it is missing or out of date
# (for anyone but .venv's owner, it says so and uses .venv as it is).
#   make lab     JupyterLab on notebooks/        make test    the whole test suite
#   make check   ruff, then the unit tier (tests/unit, not the slow ones), for contributors: about 75 s on 2 cores
#   make install create .venv or bring it up to date with pyproject.toml and constraints.txt
#   make build   regenerate release/, notebooks/, solutions/ from source/*.py
#   make grade ASSIGNMENT=03_backward            grade submitted/*/ASSIGNMENT
#   make report ASSIGNMENT=03_backward           class report of its last grading (build/reports/)
#   make bench   widget latency                  make bench-grade   grading speed (both rewrite docs/benchmarks.md)
#   make clean   regenerable files only: never submitted/, autograded/, feedback/ or the gradebook
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ASSIGNMENT ?= 03_backward
LAB_ARGS ?=
# Two test processes (pytest-xdist), a file each at a time: module fixtures (a server, a graded class) run once.
# Files go out in the order tests/conftest.py sorts them (slowest tier first), not xdist's (by number of tests).
TEST_WORKERS ?= 2
REPORT_ARGS ?=

.PHONY: lab test check build grade report bench bench-grade clean install

# pip first, at constraints.txt's version (a venv's own can be years old, and slow to resolve). -qq for the
# project: pip >= 25 shows build-backend warnings even with -q (setuptools' notice on every editable
# install); errors still show.
# The course's own packages are installed editable: compileall writes their bytecode once, here, so that
# no grading process compiles them again (sandboxes never write bytecode; nor does anything where
# PYTHONDONTWRITEBYTECODE is set). Best effort: a checkout this user cannot write is compiled in memory.
define install_venv
test -x $(PY) || $(PYTHON) -m venv $(VENV)
$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt pip
$(PY) -m pip install -qq --disable-pip-version-check -c constraints.txt -e ".[dev]"
$(PY) -m compileall -q grader normlab > /dev/null || true
$(lab_settings)
touch $(STAMP)
endef

# The course's JupyterLab settings (tools/jupyterlab/overrides.json: no "get notified about official Jupyter
# news?" pop-up, no update checks), where JupyterLab reads an environment's defaults:
# <venv>/share/jupyter/lab/settings/overrides.json. Installed by `make install` and again by `make lab`.
define lab_settings
mkdir -p $(VENV)/share/jupyter/lab/settings && cp tools/jupyterlab/overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json || true
endef

install:
	$(install_venv)

# pip runs only as .venv's owner, and only if that user can write it. Anyone else (an
# instructor on a hub using a course's shared venv, root in someone's course) would fail,
# backtrack for minutes, or leave files the owner cannot replace: they get .venv as it is.
VENV_LOCKED := $(shell if test -e $(VENV); then test -O $(VENV) && test -w $(VENV) || echo yes; \
                 for d in $(wildcard $(VENV)/lib/python3*/site-packages); do test -w $$d || echo yes; done; fi)
ifneq ($(VENV_LOCKED),)
$(STAMP): pyproject.toml constraints.txt
	@echo "make: $(VENV) is out of date, but only its owner ($$(ls -ld $(VENV) | awk '{print $$3}')) can update it, with 'make install'. Going on with it as it is."
else
$(STAMP): pyproject.toml constraints.txt
	$(install_venv)
endif

# JupyterLab refuses to run as root (containers, CI) unless told it is deliberate.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	@$(lab_settings)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)
	bash tools/ensure-chromium
	bash tools/ensure-proxy
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=15

# check lints first (ruff, configured in pyproject.toml [tool.ruff]; a finding stops it before the tests).
# test does not lint: a style finding never hides the suite's results; run make check before committing.
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) -m pytest tests/unit -m "not slow" -q -n $(TEST_WORKERS) --dist loadfile

build: $(STAMP)
	$(PY) -m grader build

grade: $(STAMP)
	$(PY) -m grader grade $(ASSIGNMENT)

report: $(STAMP)
	$(PY) -m grader report $(ASSIGNMENT) $(REPORT_ARGS)

bench: $(STAMP)
	$(PY) -m normlab.bench_widget --mode both --markdown docs/benchmarks.md

bench-grade: $(STAMP)
	$(PY) -m grader bench-grade --markdown docs/benchmarks.md

# A course directory holds a class's work: submitted/ (collected), build/gradebook.db (the
# grades). Nothing here ever deletes either.
clean:
	rm -rf build/grading build/grades.csv source/*/*.ipynb .pytest_cache test-artifacts
