# Offline variant (tools/images.py): the exporter from its wheelhouse, as the Ansible role installs it.
ARG BASE
FROM ${BASE}
COPY wheelhouse.tar.gz /tmp/
RUN mkdir /tmp/wh && tar -xzf /tmp/wheelhouse.tar.gz -C /tmp/wh --strip-components=1 \
 && python3 -m venv /opt/gwms-obs \
 && /opt/gwms-obs/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wh gwms-obs \
 && { /opt/gwms-obs/bin/pip install -q --no-index --no-cache-dir --find-links /tmp/wh gwms-obs-native 2>/tmp/native.err \
      || grep -q 'No matching distribution' /tmp/native.err; } \
 && rm -rf /tmp/wh /tmp/wheelhouse.tar.gz /tmp/native.err \
 && install -d -o 65534 -g 65534 /factory /state
ENV PATH=/opt/gwms-obs/bin:$PATH
USER 65534
ENTRYPOINT []
