# The monitoring controller, installed from this repository as on a factory host (a wheel
# with the controller extra into a venv); the same sources as the exporter's image.
FROM python:3.11-slim
COPY . /src
RUN python -m venv /opt/gwms-obs && /opt/gwms-obs/bin/pip install --no-cache-dir "/src[controller]" && rm -rf /src \
 && install -d -o 65534 -g 65534 /state
ENV PATH=/opt/gwms-obs/bin:$PATH
USER 65534
ENTRYPOINT []
