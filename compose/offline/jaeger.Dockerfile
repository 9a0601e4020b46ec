# Offline variant (tools/images.py): Jaeger v2, the binary of `make jaeger`.
ARG BASE
FROM ${BASE}
COPY jaeger-* /usr/local/bin/jaeger
RUN install -d -o 10001 -g 10001 /var/lib/jaeger
USER 10001
ENTRYPOINT ["/usr/local/bin/jaeger"]
