# Lakewarden: one image for every piece (web, workers, beat, migrations, the demo lakehouse).
#   deploy/build-image.sh        (make image) builds the wheelhouse on the host, then this file
#   docker build -t lakewarden . also works: without deploy/wheelhouse the packages come from PyPI
# The entry point (deploy/entrypoint.py) takes the role: web | worker --queue light|heavy|NAME |
# beat | migrate | demo | seaweedfs | any other command. Configuration comes only from the
# environment variables of docs/operating/configuration.md.
ARG BASE=docker.io/library/debian:bookworm-slim

# --- wheels: the host-built wheelhouse (deploy/build-image.sh passes WHEELHOUSE, an image holding
# it under /tmp); by default the base's empty /tmp, and the packages come from PyPI.
ARG WHEELHOUSE=docker.io/library/debian:bookworm-slim
FROM ${WHEELHOUSE} AS wheels

# --- build: a virtualenv with the wheels, the compiled decoder ----------------------------------------
FROM ${BASE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv python3-dev gcc libc6-dev zlib1g-dev libdeflate-dev libldap2-dev libsasl2-dev \
 && rm -rf /var/lib/apt/lists/*
# PIP_NO_INDEX=1 (deploy/build-image.sh): every package from the wheelhouse, no registry asked.
ARG PIP_NO_INDEX=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_FIND_LINKS=/wheelhouse
RUN python3 -m venv /opt/lakewarden/venv
COPY requirements.txt /tmp/req/requirements.txt
COPY plugins/lakewarden-lance/requirements.txt /tmp/req/lance.txt
COPY plugins/lakewarden-paimon/requirements.txt /tmp/req/paimon.txt
# requirements.txt less the development tools and the test suite's packages (one filter, in
# deploy/image-excludes.txt), the plugins' libraries pinned exactly, and deploy/image-extras.txt.
COPY deploy/image-excludes.txt /tmp/req/excludes.txt
COPY deploy/image-extras.txt /tmp/req/extras.txt
RUN --mount=type=bind,from=wheels,source=/tmp,target=/wheelhouse \
    set -e; cd /tmp/req; \
    grep -viEf excludes.txt requirements.txt > image.txt; \
    grep -hvE '^\s*(#|$)' lance.txt paimon.txt extras.txt >> image.txt; \
    /opt/lakewarden/venv/bin/pip install -q "setuptools>=69,<81"; \
    /opt/lakewarden/venv/bin/pip install -q --no-deps -r image.txt
COPY scripts/build_native.py /opt/lakewarden/app/scripts/build_native.py
COPY storage/formats/iceberg/_avro_native.c /opt/lakewarden/app/storage/formats/iceberg/_avro_native.c
RUN cd /opt/lakewarden/app && /opt/lakewarden/venv/bin/python scripts/build_native.py

# --- the image: Python, a Java runtime for Spark, no compilers ---------------------------------------
FROM ${BASE}
RUN apt-get update -qq \
 && mkdir -p /usr/share/man/man1 \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 openjdk-17-jre-headless tini ca-certificates libldap-2.5-0 libsasl2-2 libdeflate0 procps \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 && groupadd --system --gid 10001 lakewarden \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/lakewarden --shell /usr/sbin/nologin lakewarden \
 && mkdir -p /var/lib/lakewarden && chown lakewarden:lakewarden /var/lib/lakewarden
COPY --from=build /opt/lakewarden/venv /opt/lakewarden/venv
# The project and its plugins, installed editable as scripts/setup.sh does (the templates and static
# files stay beside the code), and the decoder built above.
COPY . /opt/lakewarden/app
COPY --from=build /opt/lakewarden/app/storage/formats/iceberg/ /opt/lakewarden/app/storage/formats/iceberg/
WORKDIR /opt/lakewarden/app
RUN /opt/lakewarden/venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e . \
 && for plugin in plugins/*/; do /opt/lakewarden/venv/bin/pip install -q --no-index --no-deps --no-build-isolation -e "$plugin"; done \
 && /opt/lakewarden/venv/bin/python -c "import storage.formats.iceberg._avro_native" \
 && /opt/lakewarden/venv/bin/python -m compileall -q console processes storage devtools plugins deploy >/dev/null
ENV PATH=/opt/lakewarden/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DJANGO_SETTINGS_MODULE=console.settings \
    HOME=/var/lib/lakewarden \
    LAKEWARDEN_VAR_DIR=/var/lib/lakewarden \
    LAKEWARDEN_HOST=0.0.0.0 \
    LAKEWARDEN_PORT=8000
WORKDIR /opt/lakewarden/app
USER 10001:10001
VOLUME ["/var/lib/lakewarden"]
EXPOSE 8000
# /healthz for the web role; the other roles answer healthy while their process runs.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["python3", "/opt/lakewarden/app/deploy/entrypoint.py", "healthcheck"]
# tini: PID 1 passes SIGTERM on (gunicorn and Celery then stop warmly) and reaps zombies.
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/lakewarden/venv/bin/python", "/opt/lakewarden/app/deploy/entrypoint.py"]
CMD ["web"]
