"""The simulator's frontend writer writes what GlideinWMS writes: given the values GlideinWMS's own
writers were fed for the fixtures (tools/glideinwms_frontend_fixtures.py), the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gwms_obs.simulate.write import frontend_status as W
from tools import glideinwms_frontend_fixtures as FX

FIXTURES = Path(__file__).parent / "fixtures" / "glideinwms_frontend"
K = FX.UPDATES - 1


def fed_match(group: str, name: str, down: bool) -> W.Match:
    mg = {a: FX.fed(K, group, name, "MatchedGlideins", a) for a in FX.MATCHED_GLIDEINS}
    factory = "@" in name
    return W.Match(
        down=down,
        matched_jobs={a: FX.fed(K, group, name, "MatchedJobs", a) for a in FX.MATCHED_JOBS},
        matched_glideins={a: mg[a] for a in ("Total", "Idle", "Running", "Failed")},
        matched_cores={a: mg[f"{a}Cores"] for a in ("Total", "Idle", "Running")},
        requested={a: FX.fed(K, group, name, "Requested", a) for a in FX.REQUESTED},
        attrs={"GLIDEIN_Site": "Example_Site"} if factory else {},  # PubKeyValue is never logged
        params={"GLIDECLIENT_ReqNode": FX.FACTORY_NODE} if factory else {},
    )


def fed_groups() -> dict[str, W.Group]:
    return {
        group: W.Group(
            jobs={a: FX.fed(K, group, "Jobs", a) for a in FX.JOBS},
            glideins={a: FX.fed(K, group, "Glideins", a) for a in FX.GLIDEINS},
            factories={FX.glideid(e): fed_match(group, FX.glideid(e), d) for e, d in entries},
            states={s: fed_match(group, s, s != "MatchedUp") for s in FX.STATES},
        )
        for group, entries in FX.GROUPS.items()
    }


@pytest.mark.parametrize("group", sorted(FX.GROUPS))
def test_a_group_file_is_byte_for_byte_glideinwms(group: str) -> None:
    want = (FIXTURES / f"group_{group}" / W.FILE).read_bytes()
    assert W.group_xml(FX.update_time(K), fed_groups()[group]).decode() == want.decode()


def test_the_frontend_wide_file_is_byte_for_byte_glideinwms() -> None:
    want = (FIXTURES / W.FILE).read_bytes()
    assert W.frontend_xml(FX.update_time(K), fed_groups()).decode() == want.decode()


def test_the_descript_is_byte_for_byte_glideinwms() -> None:
    want = (FIXTURES / W.DESCRIPT).read_bytes()
    assert W.descript_xml(FX.update_time(K), FX.FRONTEND) == want
