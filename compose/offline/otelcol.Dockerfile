# Offline variant (tools/images.py): our collector distribution, the binary of `make otelcol`.
ARG BASE
FROM ${BASE}
COPY otelcol-gwms-* /usr/local/bin/otelcol-gwms
RUN install -d -o 10001 -g 10001 /var/lib/otelcol /var/lib/otelcol/queue
USER 10001
ENTRYPOINT ["/usr/local/bin/otelcol-gwms"]
