# Offline variant (tools/images.py): the mail sink the tests use (tools/mailsink.py), Mailpit's port and API subset.
ARG BASE
FROM ${BASE}
RUN apt-get update -q && apt-get install -y -q --no-install-recommends python3-aiosmtpd \
 && rm -rf /var/lib/apt/lists/*
COPY mailsink.py /opt/mailsink/mailsink.py
USER nobody
ENTRYPOINT ["python3", "/opt/mailsink/mailsink.py", "--smtp", "0.0.0.0:1025", "--http", "0.0.0.0:8025"]
