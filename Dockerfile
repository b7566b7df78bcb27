# syntax=docker/dockerfile:1
# mysql-lb container image.
#
#   docker build -t mysql-lb .
#   docker run -p 4040:4040 -v $PWD/my.yaml:/etc/mysql-lb/mysql-lb.yaml:ro mysql-lb
#
# The built-in /etc/mysql-lb/mysql-lb.yaml is the documented example (its backends are
# 127.0.0.1, i.e. the container itself): mount your own file over it, or add flags after the
# image name, e.g. `--proxy-backend-addresses db1:3306,db2:3306`. Flags given to `docker run`
# replace the CMD below, so keep `--proxy-address 0.0.0.0:4040` when you add others: inside a
# container the default 127.0.0.1 is unreachable from outside.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
# Cache mounts keep the registry and build artefacts between builds (BuildKit).
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && install -m 0755 target/release/mysql-lb /usr/local/bin/mysql-lb

FROM debian:bookworm-slim
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mysql-lb \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin mysql-lb
COPY --from=build /usr/local/bin/mysql-lb /usr/local/bin/mysql-lb
COPY config/mysql-lb.yaml /etc/mysql-lb/mysql-lb.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it (deploy/kubernetes runs it as 10001).
USER 10001:10001
# 4040: MySQL clients; 4041: admin/metrics HTTP.
EXPOSE 4040 4041
ENTRYPOINT ["mysql-lb", "--config", "/etc/mysql-lb/mysql-lb.yaml"]
CMD ["--proxy-address", "0.0.0.0:4040"]
