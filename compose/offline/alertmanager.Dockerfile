# Offline variant (tools/images.py): Alertmanager from Debian's package, as on a factory host.
ARG BASE
FROM ${BASE}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends prometheus-alertmanager \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o nobody -g nogroup /alertmanager
USER nobody
ENTRYPOINT ["/usr/bin/prometheus-alertmanager"]
