# Offline variant (tools/images.py): the controller from the exporter's wheelhouse with the
# controller extra, as the Ansible role installs it.
ARG BASE
FROM ${BASE}
COPY wheelhouse.tar.gz /tmp/
RUN mkdir /tmp/wh && tar -xzf /tmp/wheelhouse.tar.gz -C /tmp/wh --strip-components=1 \
 && python3 -m venv /opt/gwms-obs \
 && /opt/gwms-obs/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wh "gwms-obs[controller]" \
 && rm -rf /tmp/wh /tmp/wheelhouse.tar.gz \
 && install -d -o 65534 -g 65534 /state
ENV PATH=/opt/gwms-obs/bin:$PATH
USER 65534
ENTRYPOINT []
