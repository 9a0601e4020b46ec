# Offline variant (tools/images.py): Thanos, the binary of `make thanos`; one image for the
# sidecar, the store gateway and the query (compose names the component).
ARG BASE
FROM ${BASE}
COPY thanos-* /usr/local/bin/thanos
RUN install -d -o nobody -g nogroup /bucket
USER nobody
ENTRYPOINT ["/usr/local/bin/thanos"]
