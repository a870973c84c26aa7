# syntax=docker/dockerfile:1
# The sluice image: one static binary for every role (sluice controlplane|broker|dev, and the CLI).
#   docker build --build-arg VERSION=v0.1.0 -t sluice:v0.1.0 .
# No image is published: for a cluster, tag it with your registry and push it there
# (infra/helm/sluice/README.md, The image).
# The build line is the Makefile's `build` recipe (infra/compose's TestDockerfile checks that they
# agree, and runs it).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/sluicemq/sluice/cmd/sluice/cli.version=${VERSION}" -o /out/sluice ./cmd/sluice
# The data folder and the TLS certificates' folder (docker-compose.tls.yml), owned by the runtime
# user, so that a named volume mounted there starts owned by it.
RUN mkdir -p /out/data /out/certs

# distroless static: no shell or package manager, CA certificates (for S3 over https) and tzdata,
# and a passwd entry for nonroot (65532), so the process never runs as root.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
COPY --from=build --chown=65532:65532 /out/data /var/lib/sluice
COPY --from=build --chown=65532:65532 /out/certs /etc/sluice/certs
ENV SLUICE_DATA_DIR=/var/lib/sluice
WORKDIR /var/lib/sluice
USER 65532:65532
# No shell in the image, so the probe is sluice itself: GET /readyz on $SLUICE_METRICS_ADDR (the
# operator listener; without it the roles' default ports 9644 and 9643). Kubernetes ignores this
# and uses the chart's probes.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["sluice", "healthcheck"]
ENTRYPOINT ["sluice"]
CMD ["--help"]
