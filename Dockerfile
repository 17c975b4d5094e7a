# allset's image: `docker build --build-arg ALLSET_COMMIT=$(git rev-parse HEAD) -t allset:0.1.0 .`,
# then point the kustomization at it (images: in deploy/kubernetes; see docs/operator-guide.md).
#
# Two stages: the build stage installs allset with both cloud adapters into a virtualenv
# under /opt/allset; the runtime stage is the same slim Python with only that
# virtualenv copied in (no compilers, no pip cache, no source tree), run as a fixed
# non-root user so Kubernetes' runAsNonRoot can verify it.
#
# Reproducible from the commit: the base is pinned by digest (python:3.11-slim as
# docker-library/repo-info recorded it: Python 3.11.15 on Debian trixie, built 5 August
# 2026; the digest is the multi-platform index), and every dependency is installed from
# requirements/image.lock (scripts/lock) with its hashes checked. Refresh both on purpose,
# together with the CHANGELOG.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/allset
WORKDIR /src
# The dependencies first, in a layer of their own that a change of allset's code keeps:
# exactly the lock's versions, each file checked against the lock's hashes.
COPY requirements/image.lock ./requirements/
RUN /opt/allset/bin/pip install --no-deps --require-hashes -r requirements/image.lock
# Only what `pip install .` reads (.dockerignore keeps the rest out of the context).
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY provider ./provider
COPY adapters ./adapters
# The commit the image is built from: `allset --version` and allset_build_info show it.
ARG ALLSET_COMMIT=unknown
# allset itself, built with the base image's own setuptools (pinned by the digest) rather
# than one fetched for the build; pip check fails the build if the lock misses a dependency.
RUN printf '%s\n' "${ALLSET_COMMIT}" > provider/COMMIT \
 && python -m pip wheel --no-deps --no-build-isolation --wheel-dir /tmp/dist . \
 && /opt/allset/bin/pip install --no-deps /tmp/dist/allset-*.whl \
 && /opt/allset/bin/pip check \
 && /opt/allset/bin/allset --version \
 && /opt/allset/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
ARG ALLSET_COMMIT=unknown
LABEL org.opencontainers.image.title="allset" \
      org.opencontainers.image.description="All-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets (externalgrpc)" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="${ALLSET_COMMIT}"
RUN groupadd --system --gid 65532 allset \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin allset \
 && install -d -o allset -g allset -m 0750 /var/lib/allset
COPY --from=build /opt/allset /opt/allset
# The license and notices at the place a reader of the image looks for them (the wheel's
# copies are in the virtualenv's allset-*.dist-info/licenses too).
COPY LICENSE NOTICE /usr/share/doc/allset/
# The root filesystem is read-only in the cluster: no bytecode writes at run time (pip
# compiled it at install), and output unbuffered so logs arrive as they happen.
ENV PATH=/opt/allset/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 65532:65532
# gRPC for CA (mTLS), plaintext gRPC health for the kubelet, Prometheus metrics.
EXPOSE 8086 8087 9090
ENTRYPOINT ["allset"]
CMD ["--help"]
