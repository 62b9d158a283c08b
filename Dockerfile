# A quart-mesh node in a container (docs/operations.md, "Running in a container").
#
#   docker build -t quart-mesh .
#   docker run -d --name mesh --restart on-failure --init --stop-timeout 60 \
#     -p 127.0.0.1:8000:8000 -v mesh-data:/data \
#     -e MESH_PUBLIC_URL=https://chat.example.org quart-mesh
#
# One container per data volume: a node on SQLite (the default) holds an
# exclusive lock on its data folder, and more than one worker process
# (MESH_WORKERS) needs PostgreSQL (MESH_DATABASE_URL).

# --- build: install the package from this source tree into a virtualenv ---
FROM python:3.11-slim-bookworm AS build

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

RUN python -m venv /opt/quart-mesh

WORKDIR /src
COPY pyproject.toml README.md ./
COPY quart_mesh ./quart_mesh
# the postgres extra adds the PostgreSQL driver (psycopg), so one image serves either store
RUN /opt/quart-mesh/bin/pip install ".[postgres]"

# --- run: the same base image, the virtualenv, a user of its own ---
FROM python:3.11-slim-bookworm

# The uid and gid are fixed so that the volume's owner is known in advance
# (chown a bind mount to 10001:10001) and the same on every host.
RUN groupadd --system --gid 10001 mesh \
    && useradd --system --uid 10001 --gid mesh --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin mesh \
    && mkdir /data \
    && chown mesh:mesh /data \
    && chmod 0700 /data

COPY --from=build /opt/quart-mesh /opt/quart-mesh

# MESH_HOST: inside the container the node must listen on every interface to
# be reachable through a published port; publish it on 127.0.0.1 of the host
# when a reverse proxy on the host is the only way in.
# MESH_PORT: change the port here (-e MESH_PORT=...), not with --port, so the
# health check below follows it.
ENV PATH=/opt/quart-mesh/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MESH_DATA_DIR=/data \
    MESH_HOST=0.0.0.0 \
    MESH_PORT=8000

USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8000

# Liveness: GET /api/health/live answers 200 while the process and its event
# loop answer, without asking the store. Not readiness (/api/health/ready):
# what acts on an unhealthy container (Swarm, autoheal) restarts it, and a
# restart does not bring a database back or free a disk; a load balancer
# should ask /api/health/ready itself (docs/operations.md). Slim images have
# no curl: Python's urllib, with proxies from the environment ignored. A
# refused connection, a timeout or a 503 all raise, so the command exits 1
# (unhealthy).
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; r.build_opener(r.ProxyHandler({})).open('http://127.0.0.1:' + os.environ.get('MESH_PORT', '8000') + '/api/health/live', timeout=4)"]

# Exec form: the node is the container's main process and gets the stop
# signal itself (SIGTERM: a graceful shutdown, docs/operations.md).
STOPSIGNAL SIGTERM
ENTRYPOINT ["quart-mesh"]
CMD ["serve"]
