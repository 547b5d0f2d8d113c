# syntax=docker/dockerfile:1
# kvcap container image: `docker build -t kvcap .`
#
# Stage 1 installs the dependencies and kvcap into a virtual environment; stage 2 copies only that environment
# and the application files into a fresh slim image that runs as a non-root user.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

RUN python -m venv /opt/venv
ENV PATH="/opt/venv/bin:$PATH"

WORKDIR /app

# Dependencies first, from pyproject.toml alone, so code changes do not invalidate this layer.
COPY pyproject.toml README.md ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
    && pip install -r /tmp/requirements.txt

COPY service/ service/
COPY migrations/ migrations/

# An editable install keeps the package at /app: `kvcap migrate` finds Alembic's scripts in <project root>/migrations
# (service/db/migrate.py), which a plain wheel install into site-packages would leave behind.
RUN pip install --no-deps -e . \
    && python -c "from service.db.migrate import MIGRATIONS; assert (MIGRATIONS / 'env.py').is_file(), MIGRATIONS"


FROM python:3.11-slim AS runtime

LABEL org.opencontainers.image.title="kvcap" \
      org.opencontainers.image.description="Capacity planner for vLLM serving on Kubernetes" \
      org.opencontainers.image.source="https://github.com/kvcap/kvcap" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH="/opt/venv/bin:$PATH"

RUN groupadd --system --gid 10001 kvcap \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kvcap

COPY --from=build /opt/venv /opt/venv
COPY --from=build /app /app

WORKDIR /app
USER 10001:10001

EXPOSE 8000

# Plain HTTP on 8000 (docker/compose). Kubernetes serves HTTPS on 8443 and uses its own probes instead.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

ENTRYPOINT ["kvcap"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
