"""The factory simulator (``gwms-obs simulate``): ``factory.simulate`` writes a whole fake factory.

``WRITERS`` names, for every input kind the exporter reads (``catalogue.Source``),
the simulator module that writes it; each module's ``SOURCE`` says the same
from its side.
"""

from __future__ import annotations

from types import ModuleType

from ..catalogue import Source
from .write import (
    completed_jobs,
    condor_event_log,
    descript,
    factory_log,
    frontend_status,
    glidein_err,
    glidein_out,
    schedd_status,
    trace_spool,
)

WRITERS: dict[Source, ModuleType] = {
    module.SOURCE: module
    for module in (
        glidein_out,
        glidein_err,
        completed_jobs,
        condor_event_log,
        schedd_status,
        descript,
        factory_log,
        trace_spool,
        frontend_status,
    )
}
