"""descript.xml: the factory's configuration of each entry (monitor/entry_<e>/) and of the factory (monitor/)."""

from __future__ import annotations

from collections.abc import Sequence

from ...catalogue import Source
from ..formats import updated_block, xml_attrs
from ..scenario import CLIENTS, FACTORY, GLIDEIN_NAME, MAX_IDLE, EntrySpec

SOURCE = Source.DESCRIPT
FILE = "descript.xml"
_HEAD = '<?xml version="1.0" encoding="ISO-8859-1"?>\n\n'


def _entry_xml_parts(spec: EntrySpec) -> tuple[str, str, str]:
    cpus = spec.cpus[0] if len(spec.cpus) == 1 else "auto"
    mem = spec.memory_mb if spec.memory_mb is not None else spec.cpus[0] * spec.mem_per_core
    attrs: list[tuple[str, object]] = [
        ("GLIDEIN_Site", spec.site),
        ("GLIDEIN_ResourceName", spec.site),
        ("GLIDEIN_CPUS", cpus),
        ("GLIDEIN_ESTIMATED_CPUS", spec.cpus[0]),
        ("GLIDEIN_MaxMemMBs", mem),
        # GLIDEIN_ToDie = start + this: no pilot of the entry outlives it (plus its shutdown)
        ("GLIDEIN_Max_Walltime", int((spec.lifetime_h[1] + 2) * 3600)),
        ("GLIDEIN_Gatekeeper", f"{spec.gatekeeper} {spec.gatekeeper}:9619"),
        ("GLIDEIN_GridType", "condor"),
        ("GLIDEIN_SlotsLayout", "partitionable"),
        ("GLIDEIN_Supported_VOs", "CMS,Fermilab,OSGVO"),
        ("GLIDEIN_TrustDomain", "grid"),
        ("GLIDEIN_Verbosity", "std"),
        ("GLIDEIN_WorkDir", "Condor"),
        ("USE_CCB", "True"),
    ]
    if spec.gpus != (0,):
        attrs.append(("GLIDEIN_Resource_Slots", f"GPUs,{max(spec.gpus)},type=main"))
    descript: list[tuple[str, object]] = [
        ("AuthMethod", "scitoken"),
        ("DefaultPerFrontendMaxGlideins", 5000),
        ("DefaultPerFrontendMaxHeld", 50),
        ("DefaultPerFrontendMaxIdle", 100),
        ("Gatekeeper", f"{spec.gatekeeper} {spec.gatekeeper}:9619"),
        ("GridType", "condor"),
        ("PerEntryMaxGlideins", 10000),
        ("PerEntryMaxHeld", 1000),
        ("PerEntryMaxIdle", 2000),
        ("StartupDir", "Condor"),
        ("SubmitCluster", 10),
        ("SubmitSlotsLayout", "partitionable"),
        ("TrustDomain", "grid"),
        ("Verbosity", "std"),
    ]
    params: list[tuple[str, object]] = [
        ("CONDOR_ARCH", "default"),
        ("CONDOR_OS", "auto"),
        ("CONDOR_VERSION", "23.0.8"),
        ("GLIDEIN_Max_Idle", MAX_IDLE),
        ("GLIDEIN_Report_Failed", "NEVER"),
    ]
    return xml_attrs(attrs), xml_attrs(descript), xml_attrs(params)


def _entry_elements(spec: EntrySpec, indent: str) -> str:
    """An entry's <attributes/>, <descript/> and <params/> elements, each on its own line."""
    attributes, descript, params = _entry_xml_parts(spec)
    return f"{indent}<attributes {attributes}/>\n{indent}<descript {descript}/>\n{indent}<params {params}/>\n"


def entry_descript(spec: EntrySpec, now: int) -> bytes:
    """An entry's monitor/entry_<e>/descript.xml (<glideFactoryEntryDescript>)."""
    return (
        f"{_HEAD}<glideFactoryEntryDescript>\n{updated_block(now)}\n"
        f'   <entry name="{spec.name}">\n{_entry_elements(spec, " " * 6)}'
        "   </entry>\n</glideFactoryEntryDescript>"
    ).encode()


def factory_descript(entries: Sequence[EntrySpec], now: int) -> bytes:
    """Factory-level monitor/descript.xml (<glideFactoryDescript>, Descript2XML)."""
    factory = xml_attrs(
        [
            ("AdvertiseDelay", 5),
            ("FactoryName", FACTORY),
            ("GlideinName", GLIDEIN_NAME),
            ("LoopDelay", 60),
            ("PubKeyType", "RSA"),
            ("WebURL", "http://gfactory-2.opensciencegrid.org/factory/stage"),
        ]
    )
    parts = [f"{_HEAD}<glideFactoryDescript>\n{updated_block(now)}\n   <factory {factory}/>\n   <entries>\n"]
    for spec in entries:
        parts.append(f'      <entry name="{spec.name}">\n{_entry_elements(spec, " " * 9)}      </entry>\n')
    parts.append("   </entries>\n   <frontends>\n")
    for c in sorted(CLIENTS.values(), key=lambda c: c.log_name):
        parts.append(f'      <frontend name="{c.log_name}" ident="{c.client_name.split(".")[0]}"/>\n')
    parts.append("   </frontends>\n</glideFactoryDescript>")
    return "".join(parts).encode()
