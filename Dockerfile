# syntax=docker/dockerfile:1
# Build: docker build -t chronicle .
# Run:   docker run -p 8080:8080 -v chronicle-data:/data chronicle
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
ENTRYPOINT ["/usr/local/bin/chronicle"]
CMD ["serve"]
