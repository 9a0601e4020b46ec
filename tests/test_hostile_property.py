"""Property: random hostile mutations of some pilots' files never move the accounts
of the pilots left untouched (issue 16, "Must show").

Each example copies a clean simulated factory, mutates the .out/.err of a few
pilots (truncation, forged values, binary junk, forged labels and sections,
deletion) and scans it as `report` does. Every other pilot keeps its labels
and its CPU and GPU totals (the sum over categories) exactly; no mutation
makes the scan fail. The category split of pilots counted from their
completed_jobs line may follow an entry's format evidence, which a forged
Stats block can sway (docs/accounting.md, "Plausibility bounds"), so it is not
part of the property.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gwms_obs.accounting.pilot import PilotAccount
from gwms_obs.ingest.books import key_str
from gwms_obs.ingest.outlets import Outlets
from gwms_obs.pipeline import Ingest, IngestConfig
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import condor_sections

N = 60

PAYLOADS = (
    b"\nSetting GLIDEIN_CPUS=999999999999999999\n",
    b"\n=== Glidein ending Tue Jun  9 21:57:51 UTC 2026 (100000000000000000) with code 0 after 99999999999999 ===\n",
    b"\nclient_name       = 'EVIL-CLIENT'\nglidein_entry     = 'EVIL-ENTRY'\n",
    b"\nGLIDEIN_Site EVIL-SITE\nGLIDEIN_CPUS 999999999\n",
    b"\ncondor_gpu_discovery found 999999999999 GPUs\n",
    b"\xff\xfe\x00\x00" * 64,
    b"\nTotal goodZ jobs 999999999 utilization 999999999999\n",
    condor_sections.encode("StartdHistoryLog", b"JobStartDate = 99999999999999\nRemoteWallClockTime = 1e300\n\n" * 50),
)

Totals = tuple[str, str, str, float, float]


def accounts(root: Path) -> tuple[Ingest, dict[str, Totals]]:
    got: dict[str, Totals] = {}

    def keep(a: PilotAccount) -> None:
        if a.key is not None:
            got[key_str(a.key)] = (
                a.entry,
                a.client,
                a.site,
                sum(a.partition.cpu.values()),
                sum(a.partition.gpu.values()),
            )

    ing = Ingest(IngestConfig(factory_dir=str(root), settle_seconds=0.0, final=True), outlets=Outlets(accounts=keep))
    ing.scan()
    return ing, got


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], dict[str, Totals]]:
    root = tmp_path_factory.mktemp("clean")
    simulate(root, N, seed=31)
    _, want = accounts(root)
    outs = sorted(root.glob("client/user_*/glidein_*/entry_*/job.*.out"))
    return root, outs, want


def key_of(rel: Path) -> str:
    cluster, proc = rel.name.split(".")[1:3]
    return f"{rel.parent.name.removeprefix('entry_')}/{cluster}.{proc}"


mutation = st.tuples(
    st.integers(0, 10_000),  # which pilot (modulo their number)
    st.sampled_from(("out", "err")),
    st.sampled_from(("insert", "truncate", "digits", "delete", "empty")),
    st.floats(0.0, 1.0),  # where in the file
    st.sampled_from(range(len(PAYLOADS))),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(muts=st.lists(mutation, min_size=1, max_size=6))
def test_hostile_mutations_never_move_untouched_pilots(
    clean: tuple[Path, list[Path], dict[str, Totals]], muts: list[tuple[int, str, str, float, int]]
) -> None:
    root, outs, want = clean
    with tempfile.TemporaryDirectory() as d:
        work = Path(d) / "f"
        shutil.copytree(root, work)
        touched: set[str] = set()
        for which, suffix, kind, where, payload in muts:
            rel = outs[which % len(outs)].relative_to(root)
            touched.add(key_of(rel))
            path = work / rel.with_suffix("." + suffix)
            if not path.exists():
                continue
            data = path.read_bytes()
            at = int(len(data) * where)
            if kind == "insert":
                data = data[:at] + PAYLOADS[payload] + data[at:]
            elif kind == "truncate":
                data = data[:at]
            elif kind == "digits":
                data = (
                    data[:at] + bytes(b"9"[0] if 48 <= c <= 57 else c for c in data[at : at + 4096]) + data[at + 4096 :]
                )
            elif kind == "empty":
                data = b""
            if kind == "delete":
                path.unlink()
            else:
                path.write_bytes(data)
        ing, got = accounts(work)
    assert ing.health.last_scan_end is not None
    labels = {v for k in ing.ledger.pilots for v in k[:3]}
    assert not [v for v in labels if "EVIL" in v]
    for k in set(want) - touched:
        assert got.get(k) == pytest.approx(want[k]), k
