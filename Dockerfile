# syntax=docker/dockerfile:1
# Three stages:
#   build  a compiler and the project's build requirements: compiles the native matcher
#          (Cython + C++) into a wheel; nothing of it reaches the images below.
#   app    the API and the admin commands (`topicstore serve`, `topicstore migrate`, ...),
#          installed from that wheel (no compiler in the image).
#   spark  the same plus a Java runtime: Spark master, worker and `topicstore route` driver.
#          Spark's executors run our matcher in their Python workers, so driver and executors
#          must share the Python version and the project; one image gives them both.

FROM python:3.11-slim AS build

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# g++ for the compiled parts, matcher/_native.pyx and app/_answers.pyx (the same Debian and
# Python as the runtime: same ABI).
RUN apt-get update \
    && apt-get install -y --no-install-recommends g++ \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 --user-group builder
USER builder
WORKDIR /home/builder/src
COPY --chown=builder:builder . .
# Build isolation fetches setuptools and Cython ([build-system] requires).
RUN pip wheel --no-deps --wheel-dir /home/builder/wheels .


FROM python:3.11-slim AS app

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN useradd --create-home --uid 10001 --user-group topicstore

COPY --from=build /home/builder/wheels /tmp/wheels
RUN pip install /tmp/wheels/*.whl && rm -rf /tmp/wheels

USER topicstore
WORKDIR /home/topicstore
# The embedded default (one DuckDB file) works as is; compose points it at PostgreSQL.
ENV TOPICSTORE_DATABASE_URL=duckdb:////home/topicstore/data/topicstore.duckdb \
    TOPICSTORE_PORT=8080
EXPOSE 8080

# /healthz: the process answers (readiness, /readyz, is for the load balancer to judge).
# python:slim has no curl; the standard library does the request.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2).status != 200)"]

# The service refuses to start without TOPICSTORE_ADMIN_TOKEN (set it at run time).
CMD ["topicstore", "serve", "--host", "0.0.0.0"]


FROM app AS spark

USER root
# Debian's default JRE (17 on bookworm, 21 on trixie): Spark 4 runs on both.
RUN apt-get update \
    && apt-get install -y --no-install-recommends default-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && install -d -o topicstore -g topicstore /data
USER topicstore
# pyspark (a dependency of the project) ships Spark itself: spark-class runs the master and
# the worker. Executors start this image's Python, which has the project installed.
# A container's home does not outlive it: a local `topicstore route` here would record
# Spark's class archive (~25 s, ~170 MB) on every run and never map it. Mount a volume
# and name it in TOPICSTORE_SPARK_CLASS_ARCHIVE to keep one; on the cluster it is unused.
ENV PYSPARK_PYTHON=python \
    PYSPARK_DRIVER_PYTHON=python \
    SPARK_WORKER_DIR=/home/topicstore/spark-work \
    TOPICSTORE_SPARK_CLASS_ARCHIVE=off
# The app's check asks the API for /healthz; no API runs here.
HEALTHCHECK NONE
# /data: the job's input and output, shared by the driver and the executors (a volume).
EXPOSE 7077 8080
CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
