# ci-autoscaler: one small image that watches GitHub Actions queues and scales runner pools.
#
#   docker build -t ci-autoscaler:0.1.0 .
#   docker run --read-only -v ci-autoscaler-state:/var/lib/ci-autoscaler \
#     -v "$PWD/config.yaml:/etc/ci-autoscaler/config.yaml:ro" -p 9464:9464 ci-autoscaler:0.1.0
#
# tests/e2e/test_dockerfile.py replays the builder's RUN steps and the entry point in a
# clean virtualenv, so keep every path in the RUN steps behind the ENV variables below.

# The base image by digest, so every build starts from the same bytes. This digest of
# python:3.11-slim (a multi-arch index) was read from two public repositories that pin it;
# it could not be checked against Docker Hub from where it was written (no registry access
# there). Check it before a release, and when moving it on:
#   docker buildx imagetools inspect python:3.11-slim
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

# ---------------------------------------------------------------- builder: wheel -> venv
FROM ${PYTHON_IMAGE} AS builder

ENV PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VENV=/opt/ci-autoscaler \
    WHEELS=/tmp/wheels

WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY autoscaler ./autoscaler

# The dependencies from the lock file only (every version pinned, every file's hash
# checked: make lock writes it from pyproject.toml), then the package's wheel without
# dependencies of its own; pip check proves the lock covers what the wheel needs.
RUN python -m venv "$VENV" \
    && "$VENV/bin/python" -m pip install --no-cache-dir --require-hashes --no-deps \
       -r requirements.lock \
    && python -m pip wheel --no-cache-dir --no-deps --wheel-dir "$WHEELS" . \
    && "$VENV/bin/python" -m pip install --no-cache-dir --no-deps "$WHEELS"/ci_autoscaler-*.whl \
    && "$VENV/bin/python" -m pip check \
    && "$VENV/bin/ci-autoscaler" --help >/dev/null

# ---------------------------------------------------------------- final: the venv only
FROM ${PYTHON_IMAGE}

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown

LABEL org.opencontainers.image.title="ci-autoscaler" \
      org.opencontainers.image.description="Watches GitHub Actions queues per runner type, alerts on-call, and scales EC2 Auto Scaling groups of self-hosted runners." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim"

# Nothing is written outside /var/lib/ci-autoscaler (a mounted volume): no bytecode, no
# pip cache, temporary files and HOME on the volume. Run with a read-only root filesystem.
ENV VENV=/opt/ci-autoscaler \
    PATH=/opt/ci-autoscaler/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/var/lib/ci-autoscaler \
    TMPDIR=/var/lib/ci-autoscaler \
    HEALTHCHECK_URL=http://127.0.0.1:9464/healthz

RUN groupadd --system --gid 10001 ci-autoscaler \
    && useradd --system --uid 10001 --gid ci-autoscaler --no-create-home \
       --home-dir /var/lib/ci-autoscaler --shell /usr/sbin/nologin ci-autoscaler \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/ci-autoscaler \
    && install -d -o 10001 -g 10001 -m 0750 /etc/ci-autoscaler

COPY --from=builder /opt/ci-autoscaler /opt/ci-autoscaler

VOLUME ["/var/lib/ci-autoscaler"]
WORKDIR /var/lib/ci-autoscaler
USER 10001:10001

# /metrics, /healthz and /readyz (config: listen, default 0.0.0.0:9464).
EXPOSE 9464

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['HEALTHCHECK_URL'], timeout=4)"]

ENTRYPOINT ["ci-autoscaler"]
CMD ["run", "--config", "/etc/ci-autoscaler/config.yaml"]
