# syntax=docker/dockerfile:1
# catalog: build the wheel and its dependencies in one stage, run as a non-root user in another.
# Deploys: run `catalog migrate upgrade` (same image, CATALOG_DATABASE_URL set) as its own step
# before rolling out new app processes; `serve` refuses a database that is not at head.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/catalog
ENV PATH=/opt/catalog/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md alembic.ini ./
COPY catalog ./catalog
COPY migrations ./migrations
RUN pip install .

FROM python:3.11-slim AS runtime
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --create-home --uid 10001 --shell /usr/sbin/nologin catalog \
    && mkdir -p /var/lib/catalog \
    && chown catalog:catalog /var/lib/catalog
COPY --from=build /opt/catalog /opt/catalog
ENV PATH=/opt/catalog/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CATALOG_HOME=/var/lib/catalog
USER catalog
WORKDIR /var/lib/catalog
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
# tini is PID 1: it reaps zombies and forwards SIGTERM, so shutdown is graceful.
ENTRYPOINT ["tini", "--"]
CMD ["catalog", "serve", "--host", "0.0.0.0", "--port", "8000"]
