# allset's image: `docker build -t allset:0.1.0 .`, then point the kustomization at it
# (images: in deploy/kubernetes; see docs/operator-guide.md).
#
# Two stages: the build stage installs allset with both cloud adapters into a virtualenv
# under /opt/allset; the runtime stage is the same slim Python with only that
# virtualenv copied in (no compilers, no pip cache, no source tree), run as a fixed
# non-root user so Kubernetes' runAsNonRoot can verify it.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/allset
WORKDIR /src
# Only what `pip install .` reads (.dockerignore keeps the rest out of the context).
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY provider ./provider
COPY adapters ./adapters
RUN /opt/allset/bin/pip install '.[aws,gcp]' \
 && /opt/allset/bin/allset --help >/dev/null \
 && /opt/allset/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="allset" \
      org.opencontainers.image.description="All-or-nothing, reservation-first Cluster Autoscaler provider for GPU fleets (externalgrpc)" \
      org.opencontainers.image.licenses="Apache-2.0"
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
