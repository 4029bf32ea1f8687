# The course's commands. Each one creates .venv first when it is missing or out of date.
#   make lab     JupyterLab on notebooks/        make test    the whole test suite
#   make build   regenerate release/, notebooks/, solutions/ from source/*.py
#   make grade ASSIGNMENT=03_backward            grade submitted/*/ASSIGNMENT
#   make bench   widget latency                  make bench-grade   grading speed
#   make clean   regenerable files only: never submitted/, autograded/, feedback/ or the gradebook
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
ASSIGNMENT ?= 03_backward
LAB_ARGS ?=

.PHONY: lab test build grade bench bench-grade clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	touch $(STAMP)

# JupyterLab refuses to run as root (containers, CI) unless told it is deliberate.
ROOT_FLAG := $(if $(filter 0,$(shell id -u)),--allow-root)

lab: $(STAMP)
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(ROOT_FLAG) $(LAB_ARGS)

test: $(STAMP)
	bash tools/ensure-chromium
	$(PY) -m pytest --durations=15

build: $(STAMP)
	$(PY) -m grader build

grade: $(STAMP)
	$(PY) -m grader grade $(ASSIGNMENT)

bench: $(STAMP)
	$(PY) -m normlab.bench_widget

bench-grade: $(STAMP)
	$(PY) -m grader bench-grade

# A course directory holds a class's work: submitted/ (collected), build/gradebook.db (the
# grades). Nothing here ever deletes either.
clean:
	rm -rf build/grading build/grades.csv source/*/*.ipynb .pytest_cache test-artifacts
