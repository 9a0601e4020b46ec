"""Reader for the factory's ``descript.xml`` files (``Descript2XML`` in GlideinWMS).

Entry level, ``monitor/entry_<entry>/descript.xml``::

    <glideFactoryEntryDescript><updated>..</updated>
       <entry name="X"><attributes .../><descript .../><params .../></entry>
    </glideFactoryEntryDescript>

Factory level, ``monitor/descript.xml``: ``<glideFactoryDescript>`` with
``<factory .../>``, ``<frontends>`` and ``<entries><entry name="X">`` holding
the same three elements (the entry ``descript`` minus DowntimesFile, EntryName
and Schedd).

Also home of the small safe-XML helper the other monitor-file readers share.
"""

from __future__ import annotations

import os
import re
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from ..catalogue import Source
from ..model import EntryDescript
from ..parse_errors import ParseErrors
from . import files

MAX_XML = 32 << 20  # real files are KB (entry) to a few MB (factory with 1000s of entries)

_SRC = Source.DESCRIPT.value
# The writer declares ISO-8859-1 but encodes the text as UTF-8.
_DECL_ENCODING = re.compile(rb"""^(\s*<\?xml[^>]*?encoding=)(["'])[^"']*\2""")


def load_xml(
    path: str, source: str, errors: ParseErrors, max_bytes: int = MAX_XML, *, root: str | None = None
) -> Element | None:
    """Parse one monitor XML file safely; count and return None on any problem.

    Only a regular file is read (inside ``root``, when given; see
    :mod:`gwms_obs.sources.files`), up to the size it had when opened.
    """
    f = files.open_or_record(path, errors, source, root=root)
    if f is None:
        return None
    try:
        with f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        errors.record(source, "unreadable", path, None, files.describe(e))
        return None
    if len(data) > max_bytes:
        errors.record(source, "file_too_large", path, None, f"> {max_bytes} bytes")
        return None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        pass  # really Latin-1 (or garbage): trust the declaration
    else:
        data = _DECL_ENCODING.sub(rb"\1\2UTF-8\2", data, count=1)
    try:
        return fromstring(data)
    except DefusedXmlException as e:
        # Entities/DTDs never appear in GlideinWMS output: a bomb or a forgery.
        errors.record(source, "xml_forbidden", path, None, repr(e))
    except (ParseError, ValueError) as e:
        errors.record(source, "bad_xml", path, None, str(e))
    return None


def _entry(el: Element) -> EntryDescript | None:
    name = el.get("name")
    if not name:
        return None
    attributes, descript, params = (
        {} if (c := el.find(t)) is None else dict(c.attrib) for t in ("attributes", "descript", "params")
    )
    return EntryDescript(name, attributes.get("GLIDEIN_Site") or None, attributes, params, descript)


def read_descript(path: str, errors: ParseErrors, *, root: str | None = None) -> list[EntryDescript]:
    """The entries described by an entry-level or factory-level descript.xml (inside ``root``, when given)."""
    doc = load_xml(path, _SRC, errors, root=root)
    if doc is None:
        return []
    if doc.tag == "glideFactoryEntryDescript":
        els = doc.findall("entry")
    elif doc.tag == "glideFactoryDescript":
        els = doc.findall("entries/entry")
    else:
        errors.record(_SRC, "bad_root", path, None, doc.tag[:100])
        return []
    out: list[EntryDescript] = []
    for el in els:
        e = _entry(el)
        if e is None:
            errors.record(_SRC, "bad_entry", path, None, "entry without a name")
        else:
            out.append(e)
    if doc.tag == "glideFactoryEntryDescript" and not out:
        errors.record(_SRC, "bad_entry", path, None, "no entry element")
    return out


def entry_from_dir(path: str) -> str | None:
    """``.../monitor/entry_<entry>/<file>`` -> ``<entry>``."""
    d = os.path.basename(os.path.dirname(path))
    return d[len("entry_") :] if d.startswith("entry_") and len(d) > len("entry_") else None
