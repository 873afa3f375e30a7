# ebbdb as a service container:
#   docker build -t ebbdb .
#   docker run -d -p 27017:27017 -v ebbdb-data:/data/db ebbdb
# Extra flags go after the image name and replace CMD, so repeat the defaults:
#   docker run ... ebbdb --bind_ip_all --port 27017 --dbpath /data/db --setParameter ttlMonitorSleepSecs=5
# As the `mongo` image: with MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD (or their
# *_FILE forms, for Docker secrets) set, ebbdb creates that root user in admin if it is missing and
# runs with --auth (it reads the variables itself, so this works whatever CMD is; the password is
# never logged):
#   docker run -d -p 27017:27017 -e MONGO_INITDB_ROOT_USERNAME=admin \
#       -e MONGO_INITDB_ROOT_PASSWORD=secret ebbdb
# tests/test_docker.py lints this file, and runs its install RUN line and its ENTRYPOINT + CMD in a
# fresh virtual environment, so keep the install in one RUN line naming /tmp/ebbdb-src.
FROM python:3.11-slim-trixie

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# A fixed, unprivileged user; the data directory is created here, owned by it, so that a new named
# volume mounted on /data/db starts out writable by the server.
RUN groupadd --system --gid 10001 ebbdb \
    && useradd --system --uid 10001 --gid ebbdb --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin ebbdb \
    && mkdir -p /data/db \
    && chown -R ebbdb:ebbdb /data

# A regular (not editable) install into the image's Python; the source copy goes afterwards.
COPY . /tmp/ebbdb-src
RUN pip install --no-cache-dir /tmp/ebbdb-src && rm -rf /tmp/ebbdb-src

USER 10001:10001
WORKDIR /data
VOLUME ["/data/db"]
EXPOSE 27017

# The ping reads the server's own command line (PID 1's), so it follows the port, the address and
# the TLS mode given after the image name or in a --config file; any failure exits 1.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-m", "ebbdb.server.healthcheck"]

# Exec form: ebbdb is PID 1 and gets docker stop's SIGTERM itself, which shuts it down gracefully
# (requests in flight finish, LMDB is closed cleanly, exit status 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["ebbdb"]
CMD ["--bind_ip_all", "--port", "27017", "--dbpath", "/data/db"]
