"""A scrape of the cached /metrics never says a scan ended whose pilots it does not show yet.

The ledger's families are rendered after a scan ends (outputs/prometheus.Exposition); the
health families are built per scrape. A scrape between the two once showed the new scan's end
beside the old ledger: a client waiting for "the first scan" then found no pilot
(test_export_daemon's factory-dir test, under load)."""

from __future__ import annotations

from pathlib import Path

from gwms_obs import catalogue
from gwms_obs.ingest.config import IngestConfig
from gwms_obs.outputs.prometheus import Exposition
from gwms_obs.pipeline import Ingest
from gwms_obs.simulate.factory import simulate


def _last_scan_and_pilots(expo: Exposition) -> tuple[float, bool]:
    _, body = expo.answer(None, None)
    text = body.decode()
    last = next(ln for ln in text.splitlines() if ln.startswith(catalogue.LAST_SCAN.name + " "))
    return float(last.split()[-1]), f"{catalogue.PILOTS.name}{{" in text


def test_the_served_scan_end_is_the_one_the_ledger_families_show(tmp_path: Path) -> None:
    simulate(tmp_path / "f", 30, seed=2)
    ing = Ingest(IngestConfig(str(tmp_path / "f"), settle_seconds=0, final=True, lost_after_seconds=0))
    expo = Exposition(ing)
    expo.refresh()
    before, pilots = _last_scan_and_pilots(expo)
    assert not pilots
    ing.scan()  # the scan ended; the families are not rendered again yet
    assert ing.health.last_scan_end is not None and ing.health.last_scan_end > before
    assert _last_scan_and_pilots(expo) == (before, False)  # the old scan beside the old ledger
    assert expo.refresh()
    after, pilots = _last_scan_and_pilots(expo)
    assert pilots and after == ing.health.last_scan_end
    # A scan that changes nothing: its end is served at the next refresh, with no render.
    renders = expo.renders
    ing.scan()
    expo.refresh()
    assert expo.renders == renders and _last_scan_and_pilots(expo) == (ing.health.last_scan_end, True)
