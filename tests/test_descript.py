"""descript.xml reader, entry level (real file) and factory level."""

from __future__ import annotations

import shutil
from pathlib import Path

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.descript import read_descript

FIXTURE = Path(__file__).parent / "fixtures" / "descript_entry_el6_osg34.xml"
SRC = "descript"


def test_real_entry_descript(tmp_path: Path) -> None:
    p = tmp_path / "descript.xml"
    shutil.copy(FIXTURE, p)
    errors = ParseErrors()
    (e,) = read_descript(str(p), errors)
    assert not errors.counts
    assert (e.entry, e.site) == ("el6_osg34", "el6_osg34")
    assert e.attributes["GLIDEIN_Gatekeeper"] == "fermicloud105.fnal.gov fermicloud105.fnal.gov:9619"
    assert e.descript["PerEntryMaxIdle"] == "2000" and e.params["CONDOR_VERSION"] == "8.6.5"
    assert e.attributes["GLIDEIN_Downtime_Comment"] == ""


def test_factory_descript_lists_entries(tmp_path: Path) -> None:
    p = tmp_path / "descript.xml"
    # Shape of Descript2XML.writeFile without singleEntry; UTF-8 bytes under a Latin-1 declaration.
    p.write_bytes(
        '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n<glideFactoryDescript>\n'
        '   <updated><timezone name="UTC" unixtime="1"/></updated>\n'
        '   <factory FactoryName="f" GlideinName="g"/>\n'
        '   <frontends>\n      <frontend name="fe"><security/></frontend>\n   </frontends>\n'
        "   <entries>\n"
        '      <entry name="A"><attributes GLIDEIN_Site="Zürich"/><descript Gatekeeper="ce"/><params/></entry>\n'
        '      <entry name="B"><attributes/></entry>\n'
        "      <entry><attributes/></entry>\n"
        "   </entries>\n</glideFactoryDescript>".encode()
    )
    errors = ParseErrors()
    es = read_descript(str(p), errors)
    assert [(e.entry, e.site) for e in es] == [("A", "Zürich"), ("B", None)]
    assert es[0].descript == {"Gatekeeper": "ce"} and es[1].params == {}
    assert errors.counts == {(SRC, "bad_entry"): 1}


def test_hostile(tmp_path: Path) -> None:
    p = tmp_path / "descript.xml"
    errors = ParseErrors()
    p.write_bytes(
        b'<!DOCTYPE d [<!ENTITY e SYSTEM "file:///etc/passwd">]><glideFactoryEntryDescript>&e;'
        b"</glideFactoryEntryDescript>"
    )
    assert read_descript(str(p), errors) == []
    p.write_bytes(b"<glideFactoryEntryDescript><entry name='x'>")
    assert read_descript(str(p), errors) == []
    p.write_bytes(b"<other/>")
    assert read_descript(str(p), errors) == []
    p.write_bytes(b"<glideFactoryEntryDescript/>")
    assert read_descript(str(p), errors) == []
    assert read_descript(str(tmp_path / "none.xml"), errors) == []
    assert errors.counts == {
        (SRC, "xml_forbidden"): 1,
        (SRC, "bad_xml"): 1,
        (SRC, "bad_root"): 1,
        (SRC, "bad_entry"): 1,
        (SRC, "unreadable"): 1,
    }
