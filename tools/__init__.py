"""Development tooling for the gwms-obs repository: never shipped in the exporter wheel.

Rendering the Ansible templates for compose and the tests, generating every
committed file, building the wheelhouse, and running the Go binaries the tests
need. These read the source tree (``ROOT``); the product (``exporters/gwms_obs``)
never imports from here.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
