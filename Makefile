# The course's commands. `make demo` and `make test` are the two that matter.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export PATH := $(abspath $(VENV))/bin:$(PATH)
# Where `make data` may copy MNIST from when there is no network (the team's machines and CI
# have it beside the repository; users do not, and get the offline sample instead).
export COURSE_MNIST_MIRROR ?= $(wildcard $(abspath ../shared/data))

.PHONY: help install sandbox browser build data demo autograde report test test-fast torch-check format lab hub hub-stop hub-destroy hub-add-student hub-remove-student hub-backup hub-restore clean

help:
	@echo "make demo       set up .venv, build the labs, grade the demo class, print the grades"
	@echo "make test       lint and run the test suite (all of it: what CI runs)"
	@echo "make test-fast  lint and run the tests that grade no class and start no real client"
	@echo "make torch-check TORCH=2.12.0   the claims tests and every lab on that torch (or oldest)"
	@echo "make build      solutions/*.py -> labs/ (the student release)"
	@echo "make data       prepare MNIST in data/cache (works offline)"
	@echo "make autograde  grade everything under submitted/ -> gradebook, feedback/, grades.csv"
	@echo "make report     the class report (report/index.html) and grades-wide.csv for the LMS"
	@echo "make lab        open JupyterLab on labs/"
	@echo "make hub        the course on a JupyterHub here: accounts, exchange, course (docs/hub.md)"
	@echo "make hub-stop   stop the hub, keep the term (Ctrl-C does too; make hub resumes it)"
	@echo "make hub-destroy  remove the term: accounts, homes, exchange, gradebook (docs/hub.md)"
	@echo "make hub-add-student NAME=dgl-ada FIRST=Ada LAST=Lovelace   a student joins the term"
	@echo "make hub-remove-student NAME=dgl-ada                         a student leaves it"
	@echo "make hub-backup [TO=file]   the term in one archive (/srv/dgl-hub-backups/)"
	@echo "make hub-restore FROM=file  a term from a backup, on a machine with none"

# The virtual environment is (re)made when pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing into $(VENV) (a few minutes the first time; log: $(VENV)/install.log)"
	@$(PY) -m pip install --disable-pip-version-check --no-compile -e '.[dev]' > $(VENV)/install.log 2>&1 \
	  || { tail -n 30 $(VENV)/install.log; echo "pip install failed: see $(VENV)/install.log"; exit 1; }
	@# pip compiles one module at a time; compileall uses every core (a file it cannot
	@# compile, such as torch's test module written for Python 3.12, pip skips as well).
	@# Packages' own test suites (a fifth of the code: pandas', sympy's, scipy's) are left
	@# out: nothing the course runs imports them (matched below site-packages only, wherever
	@# the checkout is)
	@$(PY) -m compileall -q -j 0 -x '/site-packages/.+/tests?/' $$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	  >> $(VENV)/install.log 2>&1 || true
	@touch $(STAMP)

install: $(STAMP)

# Grading runs each notebook in a bubblewrap sandbox (graders/sandbox/sandbox.py).
sandbox:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing bubblewrap (the grading sandbox)"; \
	    apt-get install -y -qq bubblewrap >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null && apt-get install -y -qq bubblewrap >/dev/null; }; \
	  else echo "grading needs bubblewrap: run 'sudo apt-get install bubblewrap'"; exit 1; fi; }

# tests/clients/test_browser.py drives Debian's chromium (headless); without it that test is skipped.
browser:
	@command -v chromium >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing chromium (for the browser test)"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 \
	      || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	      || echo "could not install chromium: the browser test will be skipped"; \
	  else echo "no chromium ('sudo apt-get install chromium'): the browser test will be skipped"; fi; }

build: install
	$(PY) -m graders.build

data: install
	$(PY) -m data.mnist

demo: build sandbox
	$(PY) -m graders.build.demo run

autograde: install sandbox
	$(PY) -m graders.grade

# Reads gradebook.db and grading-log.jsonl only: run it after any (re)grading.
report: install
	$(PY) -m graders.report

# The tests run in parallel, one pytest-xdist worker per core (at most 4: past that, the few
# long groups of tests decide the time); tests/xdist_groups.py keeps the tests that share a
# fixture in one worker and hands out the slow ones first. `TEST_WORKERS=0 make test` runs
# them one after another. `make test-fast` leaves out the tests marked slow (pyproject.toml:
# those that grade a class or run a real client): minutes, not half an hour.
TEST_WORKERS ?= auto
PYTEST = $(PY) -m pytest -n $(TEST_WORKERS) --maxprocesses 4 --dist loadgroup
test: install sandbox browser
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PYTEST) --durations=25

test-fast: install sandbox
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PYTEST) -m "not slow" --durations=10

# The claims tests and every lab (blank and solved, in JupyterLab in chromium where there is
# one, else the solutions through nbclient) on one torch, in a fresh environment with the
# README's packages: .scratch/torch-$(TORCH), kept for the next run of the same TORCH.
# TORCH is a version (2.12.0) or oldest/newest of pyproject.toml's range (tests/student/
# torch_check.py). pip's configured torch cap, if any, is lifted for it. Not part of `make test`:
# a torch other than the machine's cached one is a download of 3-4 GB (torch and its CUDA
# packages), and the 22 browser runs take about as long as the rest of the suite.
TORCH ?= oldest
torch-check: install browser
	COURSE_TORCH=$(TORCH) $(PY) -m pytest -p no:xdist -p no:cacheprovider tests/student/torch_check.py --durations=5

format: install
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

lab: install
	$(VENV)/bin/jupyter lab $(if $(filter 0,$(shell id -u)),--allow-root) labs/

# The course on a real JupyterHub on this machine, as root (hub/, docs/hub.md): an instructor
# and HUB_STUDENTS Unix accounts, nbgrader's exchange, the labs in HUB_LABS built as the
# instructor; prints the address and the accounts. Ctrl-C or `make hub-stop` stops it and keeps
# the term (the next `make hub` resumes it); `make hub-destroy` removes the term.
hub: install sandbox
	$(PY) -m hub start

hub-stop:
	$(PY) -m hub stop

hub-destroy:
	$(PY) -m hub destroy

hub-add-student:
	$(PY) -m hub add-student "$(NAME)" --first="$(FIRST)" --last="$(LAST)" $(if $(EMAIL),--email="$(EMAIL)")

hub-remove-student:
	$(PY) -m hub remove-student "$(NAME)"

hub-backup:
	$(PY) -m hub backup $(if $(TO),--to="$(TO)")

hub-restore:
	$(PY) -m hub restore "$(FROM)"

clean:
	rm -rf build autograded feedback gradebook.db grades.csv grades-wide.csv grading-log.jsonl timings.csv report .pytest_cache
