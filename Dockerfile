# runsink: SMTP on 1025, HTTP API on 8025, SQLite in the /data volume, as uid:gid 10001:10001.
# BASE is any Debian-like image with CPython 3.11 (the version the suite runs on), its venv
# module, useradd and groupadd. CI builds on one made from Debian packages (.ci/image/base.sh).
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/runsink/bin:$PATH

# A fixed uid and gid, so a bind mount or a TLS key can be given to exactly this user.
RUN groupadd --system --gid 10001 runsink \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin runsink \
    && mkdir -p /data \
    && chown runsink:runsink /data

# The dependencies first, pinned: this layer is rebuilt only when constraints.txt changes.
COPY constraints.txt /tmp/constraints.txt
RUN python3 -m venv /opt/runsink \
    && /opt/runsink/bin/pip install --requirement /tmp/constraints.txt

COPY pyproject.toml README.md /src/
COPY sink /src/sink
COPY api /src/api
# Nothing left to download: the dependencies and the build backend are installed above.
# Installed, not linked: the sources go once the wheel is in the venv.
RUN pip install --no-deps --no-build-isolation /src \
    && rm -rf /src
WORKDIR /data

USER runsink:runsink
# Listen on every interface inside the container. The API then needs a bearer token:
# pass RUNSINK_API_TOKEN at run time (start-up refuses without one), or opt out with
# RUNSINK_INSECURE_NO_AUTH=true on a trusted local network only.
ENV RUNSINK_SMTP_HOST=0.0.0.0 \
    RUNSINK_HTTP_HOST=0.0.0.0 \
    RUNSINK_DB=/data/runsink.db
VOLUME ["/data"]
EXPOSE 1025 8025

# Ready (the store answers), not merely alive: compose's service_healthy then means "send mail
# now". No curl in the image: Python's standard library asks /readyz. start-period rather than
# start-interval, which Debian's podman and docker-compose 1.29 refuse.
HEALTHCHECK --interval=2s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('RUNSINK_HTTP_PORT', '8025'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/readyz', timeout=2).status == 200 else 1)"]

STOPSIGNAL SIGTERM
CMD ["runsink", "serve"]
