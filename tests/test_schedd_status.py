"""monitor/entry_<entry>/schedd_status.xml reader."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.schedd_status import read_schedd_status

FIXTURE = Path(__file__).parent / "fixtures" / "schedd_status_two_frontends.xml"
SRC = "schedd_status"


@pytest.fixture
def entry_dir(tmp_path: Path) -> Path:
    d = tmp_path / "monitor" / "entry_CMS_Vienna"
    d.mkdir(parents=True)
    return d


def test_two_frontends(entry_dir: Path) -> None:
    p = entry_dir / "schedd_status.xml"
    shutil.copy(FIXTURE, p)
    errors = ParseErrors()
    st = read_schedd_status(str(p), errors)
    assert st is not None and not errors.counts
    assert (st.entry, st.updated, st.downtime) == ("CMS_Vienna", 1795328406.0, False)
    assert set(st.frontends) == {"fermilab_okd_gpfe01_frontend", "cms_main_frontend"}
    fe = st.frontends["fermilab_okd_gpfe01_frontend"]
    assert fe.status == {
        "Held": 2,
        "Idle": 7,
        "IdleOther": 0,
        "Pending": 5,
        "Running": 143,
        "RunningCores": 1144,
        "StageIn": 1,
        "StageOut": 0,
        "Wait": 1,
    }
    # Idle is kept raw; it is the sum of the four idle sub-states.
    assert fe.status["Idle"] == sum(fe.status[k] for k in ("Wait", "Pending", "StageIn", "IdleOther"))
    assert fe.requested["MaxGlideins"] == 300 and fe.client_monitor["JobsIdle"] == 4821 and not fe.downtime
    cms = st.frontends["cms_main_frontend"]
    assert cms.downtime and cms.client_monitor["CoresIdle"] == 0
    assert st.total.status["Running"] == 144 and st.total.requested["Idle"] == 16 and not st.total.downtime


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"", "bad_xml"),
        (b"\xff\xfe<garbage", "bad_xml"),
        (b"<glideFactoryEntryQStats><frontends>", "bad_xml"),  # truncated write
        (
            b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "xxxxxxxx"><!ENTITY b "&a;&a;&a;&a;&a;">]>'
            b"<glideFactoryEntryQStats>&b;</glideFactoryEntryQStats>",
            "xml_forbidden",
        ),
        (b"<glideFactoryEntryDescript/>", "bad_root"),
    ],
)
def test_hostile_files(entry_dir: Path, content: bytes, reason: str) -> None:
    p = entry_dir / "schedd_status.xml"
    p.write_bytes(content)
    errors = ParseErrors()
    assert read_schedd_status(str(p), errors) is None
    assert errors.counts == {(SRC, reason): 1}


def test_bad_values_skipped_rest_kept(entry_dir: Path) -> None:
    p = entry_dir / "schedd_status.xml"
    p.write_bytes(
        b'<glideFactoryEntryQStats><updated><timezone name="UTC" unixtime="soon"/></updated>'
        b'<downtime status="True"/><frontends><frontend name="a">'
        b'<Status Running="3.0" Idle="NaN" Held="x" Wait="1"/></frontend><frontend/></frontends>'
        b"</glideFactoryEntryQStats>"
    )
    errors = ParseErrors()
    st = read_schedd_status(str(p), errors)
    assert st is not None and st.downtime and st.updated is None
    assert st.frontends["a"].status == {"Running": 3, "Wait": 1}
    assert errors.counts == {(SRC, "bad_value"): 3, (SRC, "bad_frontend"): 1}


def test_missing_and_huge(entry_dir: Path) -> None:
    errors = ParseErrors()
    assert read_schedd_status(str(entry_dir / "absent.xml"), errors) is None
    p = entry_dir / "schedd_status.xml"
    p.write_bytes(b"<glideFactoryEntryQStats>" + b" " * (17 << 20) + b"</glideFactoryEntryQStats>")
    assert read_schedd_status(str(p), errors) is None
    assert errors.counts == {(SRC, "unreadable"): 1, (SRC, "file_too_large"): 1}
