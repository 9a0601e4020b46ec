# Our collector distribution, built with ocb from the same pinned manifest as `make otelcol`.
FROM golang:1.26 AS build
WORKDIR /src
COPY otel-collector/builder-config.yaml otel-collector/builder-config.yaml
RUN v=$(sed -n 's/^  version: *//p' otel-collector/builder-config.yaml) \
 && go install go.opentelemetry.io/collector/cmd/builder@v$v \
 && builder --config otel-collector/builder-config.yaml
FROM debian:bookworm-slim
# wget: the compose healthcheck; the queue dir owned by the user the collector runs as
RUN apt-get update -q && apt-get install -y -q --no-install-recommends wget && rm -rf /var/lib/apt/lists/* \
 && install -d -o 10001 -g 10001 /var/lib/otelcol /var/lib/otelcol/queue
COPY --from=build /src/build/otelcol-gwms/otelcol-gwms /usr/local/bin/otelcol-gwms
USER 10001
ENTRYPOINT ["/usr/local/bin/otelcol-gwms"]
