"""A real Grafana (container) loads our provisioning and runs every panel query through its API.

Runs on a Docker engine found or started by tools/docker_engine.py; where no
Grafana image is loaded and no registry answers (as on the CI machine) it is
skipped with the reason printed (`pytest -rs`). Grafana and Prometheus
share the host network so the provisioned datasource URL is the real one.
"""

from __future__ import annotations

import base64
import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dashboards import gen
from dashboards.gen import lint
from dashboards.gen.board import GRAFANA_VERSION
from dashboards.gen.names import DATASOURCE_PROMETHEUS
from tests.support.servers import free_port, have, prometheus, wait_for
from tools import docker_engine
from tools.render import render

IMAGE = f"grafana/grafana:{GRAFANA_VERSION}.0"


def _image_reason() -> str | None:
    """None when the Grafana image is here or can be pulled; else why not (no registry here)."""
    import docker

    client = docker.from_env(timeout=120)
    try:
        client.images.get(IMAGE)
        return None
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(IMAGE)
    except docker.errors.APIError as e:
        return f"no Grafana image: {IMAGE} is not loaded and cannot be pulled ({str(e)[:160]})"
    return None


pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(not have("prometheus"), reason="Debian prometheus not installed"),
]


def _api(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    req = urllib.request.Request(
        url + path,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(b"admin:admin").decode(),
        },
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def grafana(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from testcontainers.core.container import DockerContainer

    with (
        docker_engine.engine(tmp_path_factory.mktemp("dockerd") / "dockerd.log") as e,
        pytest.MonkeyPatch.context() as mp,
    ):
        for k, v in e.env().items():
            mp.setenv(k, v)
        mp.setenv("TESTCONTAINERS_RYUK_DISABLED", "true")  # the reaper is an image too; the context stops it
        why = _image_reason()
        if why:
            pytest.skip(why)
        yield from _grafana(tmp_path_factory, DockerContainer)


def _grafana(tmp_path_factory: pytest.TempPathFactory, DockerContainer: Any) -> Iterator[str]:
    work = tmp_path_factory.mktemp("grafana")
    prom_port, port = free_port(), free_port()
    prov = work / "provisioning"
    (prov / "datasources").mkdir(parents=True)
    (prov / "dashboards").mkdir()
    (prov / "datasources" / "gwms-obs.yml").write_text(
        render("grafana", "datasources.yml.j2", grafana_prometheus_url=f"http://127.0.0.1:{prom_port}")
    )
    (prov / "dashboards" / "gwms-obs.yml").write_text(
        render("grafana", "dashboards.yml.j2", grafana_dashboards_dir="/var/lib/grafana/dashboards/gwms-obs")
    )
    boards = work / "boards"
    boards.mkdir()
    for rel, text in gen.render_all().items():
        if rel.startswith("dashboards/grafana/"):
            (boards / Path(rel).name).write_text(text)
    cfg = (
        "global: {scrape_interval: 1s}\n"
        f"scrape_configs: [{{job_name: prometheus, static_configs: [{{targets: ['127.0.0.1:{prom_port}']}}]}}]\n"
    )
    with prometheus(work / "prom", cfg, port=prom_port):
        c = (
            DockerContainer(IMAGE)
            .with_env("GF_SERVER_HTTP_ADDR", "127.0.0.1")
            .with_env("GF_SERVER_HTTP_PORT", str(port))
            .with_volume_mapping(str(prov), "/etc/grafana/provisioning", "ro")
            .with_volume_mapping(str(boards), "/var/lib/grafana/dashboards/gwms-obs", "ro")
            .with_kwargs(network_mode="host")
        )
        with c:
            url = f"http://127.0.0.1:{port}"
            wait_for("Grafana", lambda: _api(url, "/api/health").get("database") == "ok", 120, 1)
            yield url
    shutil.rmtree(work, ignore_errors=True)


def test_every_panel_query_runs_through_grafana(grafana: str) -> None:
    n = 0
    for rel, text in gen.render_all().items():
        if not rel.startswith("dashboards/grafana/"):
            continue
        uid = json.loads(text)["uid"]
        doc = _api(grafana, f"/api/dashboards/uid/{uid}")["dashboard"]  # provisioned, not posted by us
        for p in doc["panels"]:
            for t in p.get("targets", []):  # a row has none
                expr = lint.substitute(t["expr"], {"entry": ".*", "client": ".*", "site": ".*"})
                body = {
                    "queries": [{"refId": t["refId"], "datasource": {"uid": DATASOURCE_PROMETHEUS}, "expr": expr}],
                    "from": "now-5m",
                    "to": "now",
                }
                res = _api(grafana, "/api/ds/query", body)
                assert "error" not in res["results"][t["refId"]], (uid, p["title"], res)
                n += 1
    assert n > 50
