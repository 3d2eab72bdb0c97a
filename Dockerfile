# syntax=docker/dockerfile:1
#
# The shaper and producer commands, built static, on a distroless base (no
# shell) as a non-root user:
#
#   docker build -t shaper .
#   docker run --rm -p 8080:8080 -e SHAPER_ADMIN_TOKEN=$(openssl rand -hex 16) shaper
#
# The image serves /etc/shaper/policies.yaml (the example: mount your own
# over it) on 0.0.0.0:8080, which needs SHAPER_ADMIN_TOKEN (or
# SHAPER_ADMIN_LOOPBACK_ONLY=true). The embedded JetStream stores in the
# /data volume and listens on loopback; for consumers outside the container
# set SHAPER_NATS_LISTEN=0.0.0.0:4222 with SHAPER_NATS_TOKEN, or run against
# a NATS cluster with SHAPER_NATS_URL. Every flag of serve is also a
# SHAPER_* variable; the operator commands run with docker exec:
#
#   docker exec <container> shaper status

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/ ./cmd/shaper ./cmd/producer \
    && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/shaper /out/producer /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/data /data
COPY policies.yaml /etc/shaper/policies.yaml
ENV SHAPER_POLICIES=/etc/shaper/policies.yaml \
    SHAPER_HTTP=0.0.0.0:8080 \
    SHAPER_DATA=/data
USER 65532:65532
WORKDIR /data
VOLUME ["/data"]
# 8080: the HTTP API, /metrics and the operator page; 4222: the embedded
# JetStream, when SHAPER_NATS_LISTEN opens it beyond loopback.
EXPOSE 8080 4222
# GET /readyz on SHAPER_HTTP, asked on loopback; start-up may retry its
# streams for up to --start-timeout (2m).
HEALTHCHECK --interval=10s --timeout=5s --start-period=2m --retries=3 \
    CMD ["/usr/local/bin/shaper", "health"]
ENTRYPOINT ["/usr/local/bin/shaper"]
CMD ["serve"]
