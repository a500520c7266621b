# syntax=docker/dockerfile:1
# catalog: build the wheel and its dependencies in one stage, run as a non-root user in another.
# Deploys: run `catalog migrate upgrade` (same image, CATALOG_DATABASE_URL set) as its own step
# before rolling out new app processes; `serve` refuses a database that is not at head.
#
# Dependencies are pinned by constraints.txt (scripts/refresh-constraints.sh regenerates it):
# PIP_CONSTRAINT applies to the build backend's isolated environment as well as to the install.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/src/constraints.txt
RUN python -m venv /opt/catalog
ENV PATH=/opt/catalog/bin:$PATH
WORKDIR /src
COPY constraints.txt pyproject.toml README.md alembic.ini ./
COPY catalog ./catalog
COPY migrations ./migrations
RUN pip install .

FROM python:3.11-slim AS runtime
# libnss-wrapper lets the embedded PostgreSQL's initdb run as a user id with no passwd entry
# (`docker run --user 12345`, OpenShift): catalog.db.embedded preloads it for initdb alone.
# tini and it are not version-pinned: Debian replaces a package version within a release (security fixes),
# so a pinned apt version breaks the build; the Python dependencies are the ones pinned.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini libnss-wrapper \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 catalog \
    && useradd --system --uid 10001 --gid 10001 --create-home --shell /usr/sbin/nologin catalog \
    && mkdir -p /var/lib/catalog \
    && chown catalog:catalog /var/lib/catalog
COPY --from=build /opt/catalog /opt/catalog
ENV PATH=/opt/catalog/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CATALOG_HOME=/var/lib/catalog
# The data directory: the embedded PostgreSQL's files (when CATALOG_DATABASE_URL is unset) and the
# generated secret key and admin token. Mount a volume here, or they are lost with the container.
VOLUME ["/var/lib/catalog"]
# Numeric, so an orchestrator can verify "not root" without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/catalog
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status != 200)"]
# tini is PID 1: it reaps zombies and forwards SIGTERM, so shutdown is graceful.
ENTRYPOINT ["tini", "--"]
# A request through the container's address carries that address (or the name clients use) in its
# Host header: list it in CATALOG_ALLOWED_HOSTS (and browser origins in CATALOG_ALLOWED_ORIGINS),
# or /mcp answers 421. README, "Deploying".
CMD ["catalog", "serve", "--host", "0.0.0.0", "--port", "8000"]
