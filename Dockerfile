# runsink: SMTP on 1025, HTTP API on 8025, SQLite in the /data volume.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY sink ./sink
COPY api ./api
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin runsink \
    && mkdir -p /data \
    && chown runsink:runsink /data

USER runsink
# Listen on every interface inside the container. The API then needs a bearer token:
# pass RUNSINK_API_TOKEN at run time (start-up refuses without one), or opt out with
# RUNSINK_INSECURE_NO_AUTH=true on a trusted local network only.
ENV RUNSINK_SMTP_HOST=0.0.0.0 \
    RUNSINK_HTTP_HOST=0.0.0.0 \
    RUNSINK_DB=/data/runsink.db
VOLUME ["/data"]
EXPOSE 1025 8025

# No curl in the image: Python's standard library asks /healthz.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('RUNSINK_HTTP_PORT', '8025'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"]

STOPSIGNAL SIGTERM
CMD ["runsink", "serve"]
