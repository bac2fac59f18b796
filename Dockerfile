# syntax=docker/dockerfile:1
# Build: docker build -t chronicle .
# Run:   docker run -p 8080:8080 -v chronicle-data:/data chronicle
# The image runs as distroless's nonroot user, uid:gid 65532:65532: a bind
# mount for /data must be writable by it (chown 65532:65532 DIR), or run
# with --user set to the directory's owner. .dockerignore keeps .git and any
# local ./data out of the build context.
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/chronicle-proxy/chronicle/proxy.Version=${VERSION}" \
      -o /out/chronicle ./cmd/chronicle \
 && mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/chronicle /usr/local/bin/chronicle
COPY --from=build /src/config.example.yaml /etc/chronicle/config.yaml
COPY --from=build --chown=nonroot:nonroot /out/data /data
USER nonroot:nonroot
ENV CHRONICLE_CONFIG=/etc/chronicle/config.yaml \
    CHRONICLE_LISTEN=0.0.0.0:8080 \
    CHRONICLE_DATA=/data
EXPOSE 8080
VOLUME /data
# No shell or curl on distroless: the binary checks itself (GET /healthz on
# the port of CHRONICLE_LISTEN).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
  CMD ["/usr/local/bin/chronicle", "healthcheck", "--timeout", "3s"]
ENTRYPOINT ["/usr/local/bin/chronicle"]
CMD ["serve"]
