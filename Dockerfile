# syntax=docker/dockerfile:1
#
# lockgate container image: a static binary on distroless, run as non-root.
#
#   docker build -t lockgate:dev --build-arg VERSION=$(git describe --tags --always) .
#   docker run --rm -p 50050:50050 lockgate:dev                     # serve --backend raft
#   docker run --rm lockgate:dev node --id 1 --bootstrap ...        # any subcommand
#
# Every setting is also an environment variable (LOCKGATE_<FLAG_NAME>); the
# image sets LOCKGATE_DATA_DIR=/data, a volume owned by the runtime user.
# docs/operations.md ("Containers") describes the image and docker-compose.yml.

ARG GO_VERSION=1.26

# ---- build: a static (CGO_ENABLED=0) binary, version stamped like `make build`
FROM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so that a source change does not re-download them.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath \
      -ldflags "-s -w -X github.com/lockgate/lockgate/internal/cli.Version=${VERSION} -X github.com/lockgate/lockgate/internal/cli.Commit=${COMMIT}" \
      -o /out/lockgate ./cmd/lockgate \
 && /out/lockgate version \
 && mkdir -p /out/data

# ---- runtime: no shell, no package manager, no root
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/lockgate /lockgate
# A named volume mounted on /data starts as a copy of this directory, so the
# non-root user owns it. (No VOLUME instruction: the stateless gateways would
# each get an anonymous volume; mount a named one where there is state.)
COPY --from=build --chown=65532:65532 /out/data /data
# 65532 is distroless's "nonroot" user.
USER 65532:65532
ENV LOCKGATE_DATA_DIR=/data
# 50050: lockgate serve's gateway; 50050+id: a raftlock node's API;
# 8080+id: a raftlock node's Raft transport; 8000: the fenced store.
EXPOSE 50050 8000
# No curl in the image: the binary probes its own /healthz. Services that
# listen elsewhere (nodes on 50050+id, the store on 8000) override this, as
# docker-compose.yml does, or set LOCKGATE_URL (healthcheck --url).
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/lockgate", "healthcheck"]
ENTRYPOINT ["/lockgate"]
CMD ["serve", "--listen", "0.0.0.0:50050"]
