# syntax=docker/dockerfile:1
# kvcap container image: `docker build -t kvcap .`
#
# Stage 1 installs the locked dependencies (requirements.lock: every package pinned, with hashes when the lock has
# them) and kvcap's own wheel into a virtual environment; stage 2 copies only that environment into a fresh slim
# image that runs as a non-root user and never writes outside /tmp, so it runs with a read-only root filesystem
# (the Helm chart and deploy/kubernetes mount an emptyDir at /tmp).

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"

WORKDIR /src

# Dependencies first, from the lock file alone, so code changes do not invalidate this layer. --no-deps: the lock
# is complete, nothing unpinned gets in.
COPY requirements.lock ./
RUN pip install --no-deps -r requirements.lock

# kvcap itself as a regular (non-editable) wheel: the migrations and the built-in catalog are package data, which
# the throwaway `kvcap migrate` against SQLite proves before the image is finished.
COPY pyproject.toml README.md ./
COPY service/ service/
RUN pip install --no-deps . \
    && python -m compileall -q /opt/venv/lib \
    && KVCAP_DATABASE_URL=sqlite:////tmp/build-check.db kvcap migrate \
    && rm -f /tmp/build-check.db


FROM python:3.11-slim AS runtime

LABEL org.opencontainers.image.title="kvcap" \
      org.opencontainers.image.description="Capacity planner for vLLM serving on Kubernetes" \
      org.opencontainers.image.source="https://github.com/kvcap/kvcap" \
      org.opencontainers.image.licenses="Apache-2.0"

# Bytecode was compiled at build time and is never written at run time; HOME points at the writable /tmp.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    PATH="/opt/venv/bin:$PATH"

RUN groupadd --system --gid 10001 kvcap \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kvcap

COPY --from=build /opt/venv /opt/venv

WORKDIR /tmp
USER 10001:10001

EXPOSE 8000

# Plain HTTP on 8000 (docker/compose). Kubernetes serves HTTPS on 8443 and uses its own probes instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

ENTRYPOINT ["kvcap"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
