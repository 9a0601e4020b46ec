"""Make tests/fixtures/glideinwms_factory_log/: an entry's process logs written by GlideinWMS itself.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
    /usr/bin/python3 tools/glideinwms_factory_log_fixture.py --glideinwms /tmp/glideinwms

Only needed to regenerate the fixture (the tests read the committed files). The
checkout is imported at run time, unmodified, through a temporary directory in
which ``glideinwms`` is a symlink to it; nothing of GlideinWMS is copied here.

The entry's logger is GlideinWMS's own (``logSupport.get_logger_with_handlers``,
as glideFactoryEntry.py L60 builds it) with the RPM's two process logs
(build/packaging/rpm/glideinWMS.xml L12-13: ``info`` keeps INFO, ``err`` keeps
DEBUG,ERR,WARN and so writes ``module:lineno``). The lines are written by
glideFactoryLib's own functions, driven through a few factory cycles:

* ``submitGlideins`` (L1901-2011) runs ``condor_submit`` through ``executeSubmit``
  and condorExe: here a small ``condor_submit`` script on the child's PATH that
  prints HTCondor's "N job(s) submitted to cluster C." or, when asked to, fails
  as a CE refusing the factory's credentials would; the job description and the
  submit environment (files of a configured factory) are stand-ins;
* keepIdleGlideins's answer to a failed submission (L989-991: the same text as a
  WARNING) is written as it writes it, with the entry's logger;
* ``sanitizeGlideins`` (L1136-1205) and ``clean_glidein_queue`` (L959-1133), with
  the condor_q selections they call (``extract*``) answering from the story below,
  and ``removeGlideins``/``releaseGlideins`` with condor_rm/condor_release that succeed;
* the line that starts each frontend request, ``Checking downtime for frontend ...``
  (glideFactoryEntry.py L1115-1118, in ``unit_work_v3``, which needs a whole factory to
  run), is written with the entry's logger in its words.

Time is the story's, not the clock's (a log-record factory sets each record's
``created``), in UTC. ``expected.json`` says what was written: glideins submitted
per client, failed condor_submit calls, glideins the factory set out to remove
per reason, which the test compares with what the reader finds.

lib/pubCrypto.py and symCrypto.py import M2Crypto, which is not installed here;
nothing written here calls them, so a stand-in package answers their imports
(any attribute is a name, any call fails).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import stat
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, or imported as tools.*
from tools import glideinwms_checkout

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "glideinwms_factory_log"
ENTRY = "CMS_T2_US_Example_ce01"
SCHEDD = "schedd_glideins3@gfactory.example.org"
START = 1_780_000_000  # 2026-05-28 20:26:40 UTC
# The frontends' (security name, security class): client = secClass2Name = "<name>_<class>".
CMS = ("CMSG-v1_0", "cmspilot")
OSG = ("OSG_Flock", "frontend")
# condor_submit's refusal at a CE that does not accept the factory's credentials (the text
# HTCondor-G's condor_submit prints when the schedd refuses the submitter).
REFUSAL = (
    "ERROR: Failed to connect to queue manager schedd_glideins3@gfactory.example.org\n"
    "AUTHENTICATE:1003:Failed to authenticate with any method\n"
    "AUTHENTICATE:1004:Failed to authenticate using SCITOKENS\n"
)


class _M2CryptoStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``import M2Crypto[.x]`` with an empty package whose attributes are their names."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name == "M2Crypto" or name.startswith("M2Crypto."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__path__ = []

        def attr(n: str, _m: str = module.__name__) -> str:
            if n.startswith("__"):
                raise AttributeError(n)
            return f"{_m}.{n}"

        module.__getattr__ = attr  # type: ignore[method-assign]


class _Clock:
    """The story's time: every log record is stamped with it."""

    def __init__(self, t: float) -> None:
        self.t = t

    def tick(self, seconds: float = 1.0) -> None:
        self.t += seconds


def _condor_submit(bindir: Path) -> None:
    """A condor_submit that prints what HTCondor's prints, or fails when FAIL_NEXT says so."""
    script = bindir / "condor_submit"
    script.write_text(
        "#!/bin/sh\n"
        'state="$FAKE_STATE"\n'
        'n=$(cat "$state/next_cluster")\n'
        'if [ -e "$state/fail_$n" ]; then\n'
        '  rm "$state/fail_$n"; echo "Submitting job(s)"; cat "$state/refusal" >&2; exit 1\n'
        "fi\n"
        'echo $((n + 1)) > "$state/next_cluster"\n'
        'echo "Submitting job(s)$(printf %${GLIDEIN_COUNT}s | tr " " .)"\n'
        'echo "${GLIDEIN_COUNT} job(s) submitted to cluster ${n}."\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def write(checkout: Path, out: Path = OUT) -> dict[str, Any]:
    # condorExe logs the whole environment at DEBUG when a command fails (generate_bash_script):
    # a factory's, not this machine's.
    os.environ.clear()
    os.environ.update({"PATH": "/usr/bin:/bin", "HOME": "/var/lib/gwms-factory", "USER": "gfactory", "TZ": "UTC"})
    time.tzset()
    sys.meta_path.insert(0, _M2CryptoStandIn())
    work = glideinwms_checkout.importable(checkout, "gwms-factory-log-")
    log_support = importlib.import_module("glideinwms.lib.logSupport")
    gfl: Any = importlib.import_module("glideinwms.factory.glideFactoryLib")  # patched: stand-ins set below

    clock = _Clock(float(START))
    make_record = logging.getLogRecordFactory()

    def stamped(*args: Any, **kwargs: Any) -> logging.LogRecord:
        rec = make_record(*args, **kwargs)
        rec.created = clock.t
        rec.msecs = (clock.t - int(clock.t)) * 1000
        clock.tick(0.137)  # records of one step are a little apart, as a real run writes them
        return rec

    logging.setLogRecordFactory(stamped)

    logdir = out / f"entry_{ENTRY}"
    logdir.mkdir(parents=True, exist_ok=True)
    for f in logdir.glob("*.log"):
        f.unlink()
    plog = {"max_days": "7.0", "min_days": "3.0", "max_mbytes": "100.0", "backup_count": "5"}
    plog |= {"compression": "", "structured": "False"}
    process_logs = [{**plog, "extension": "info", "msg_types": "INFO"}]
    process_logs.append({**plog, "extension": "err", "msg_types": "DEBUG,ERR,WARN,EXCEPTION"})
    log = log_support.get_logger_with_handlers(ENTRY, str(logdir), {"ProcessLogs": repr(process_logs)})

    # A configured factory's files and environment, stand-ins for what submitGlideins reads.
    state = work / "state"
    state.mkdir()
    (state / "next_cluster").write_text("1000\n")
    (state / "refusal").write_text(REFUSAL)
    bindir = work / "bin"
    bindir.mkdir()
    _condor_submit(bindir)
    cwd = work / "factory"
    (cwd / f"entry_{ENTRY}").mkdir(parents=True)
    (cwd / f"entry_{ENTRY}" / "job.condor").write_text("# the entry's submit file\n")
    os.chdir(cwd)

    class JobDescript:
        def __init__(self, entry_name: str) -> None:
            self.data = {"Schedd": SCHEDD}

    gfl.glideFactoryConfig.JobDescript = JobDescript
    env = [f"PATH={bindir}:/usr/bin:/bin", f"FAKE_STATE={state}"]
    gfl.get_submit_environment = lambda *a, **k: list(env)
    cfg = gfl.factoryConfig
    cfg.submit_sleep = cfg.remove_sleep = cfg.release_sleep = 0

    class Credentials:
        username = gfl.MY_USERNAME
        id = "cred_1"
        security_class = "cmspilot"

    expected: dict[str, Any] = {"entry": ENTRY, "submitted": {}, "submit_failures": 0, "removed": {}}

    def request(frontend: tuple[str, str]) -> str:
        clock.tick(20)
        log.info(f"Checking downtime for frontend {frontend[0]} security class: {frontend[1]} (entry {ENTRY}).")
        return f"{frontend[0]}_{frontend[1]}"

    def submit(frontend: tuple[str, str], n: int, fail_after: int | None = None) -> None:
        """One request's submission; ``fail_after`` clusters go out, then condor_submit is refused."""
        client = request(frontend)
        if fail_after is not None:
            first = int((state / "next_cluster").read_text())
            (state / f"fail_{first + fail_after}").touch()
        clock.tick(3)
        try:
            gfl.submitGlideins(ENTRY, client, n, 3600, f"{frontend[0]}:{frontend[1]}", Credentials(), None, {}, {},
                               log=log, factoryConfig=cfg)  # fmt: skip
        except RuntimeError as e:
            log.warning(f"{e}")  # keepIdleGlideins, glideFactoryLib.py L989-991
            expected["submit_failures"] += 1
        went = n if fail_after is None else min(n, fail_after * cfg.max_cluster_size)
        expected["submitted"][client] = expected["submitted"].get(client, 0) + went

    def removed(reason: str, n: int) -> None:
        expected["removed"][reason] = expected["removed"].get(reason, 0) + n

    def jobs(first: int, n: int) -> list[tuple[int, int]]:
        return [(first, i) for i in range(n)]

    def answer(**lists: list[tuple[int, int]]) -> None:
        """What the condor_q selections return this cycle (any not named: nothing)."""
        for name in (
            "extractStaleSimple",
            "extractRunStale",
            "extractUnrecoverableHeldForceX",
            "extractUnrecoverableHeldSimple",
            "extractRecoverableHeldSimple",
            "extractRecoverableHeldSimpleWithinLimits",
            "extractIdleUnsubmitted",
            "extractIdleQueued",
            "extractRunSimple",
        ):
            got = list(lists.get(name, []))
            setattr(gfl, name, lambda *a, _got=got, **k: list(_got))

    gfl.condorManager.condorRemoveOne = lambda *a, **k: None
    gfl.condorManager.condorReleaseOne = lambda *a, **k: None

    class Queue:
        schedd_name = SCHEDD

    class Totals:
        def __init__(self, idle: int, running: int, held: int, fe: str) -> None:
            self.frontend_limits = {fe: {"idle": idle, "running": running, "held": held}}

    # Cycle 1: two requests submit; 12 go out as two clusters (max_cluster_size 10).
    submit(CMS, 12)
    submit(OSG, 3)
    # Cycle 2: the CE refuses the factory's token: nothing goes out.
    clock.tick(300)
    submit(CMS, 4, fail_after=0)
    # Cycle 3: one cluster goes out, the next condor_submit is refused.
    clock.tick(300)
    submit(CMS, 15, fail_after=1)
    # Cycle 4: no work; sanitize removes stale idle and running, the unrecoverable held
    # (one held over 20 iterations, removed with forcex), releases the recoverable held.
    clock.tick(300)
    log.info(f"Sanitizing glideins for entry {ENTRY}")  # glideFactoryEntry.py L1029
    answer(
        extractStaleSimple=jobs(1000, 2),
        extractRunStale=jobs(1001, 1),
        extractUnrecoverableHeldForceX=jobs(1002, 1),
        extractUnrecoverableHeldSimple=jobs(1002, 3),
        extractRecoverableHeldSimple=jobs(1003, 2),
        extractRecoverableHeldSimpleWithinLimits=jobs(1003, 1),
    )
    gfl.sanitizeGlideins(Queue(), log=log, factoryConfig=cfg)
    removed("stale_idle", 2)
    removed("stale_running", 1)
    removed("unrecoverable_held", 1 + 2)
    # Cycle 5: the frontend wants fewer: unsubmitted idle first, then idle at the CE (RemoveExcess IDLE).
    clock.tick(300)
    fe = f"{CMS[0]}:{CMS[1]}"
    request(CMS)
    answer(extractIdleUnsubmitted=jobs(1004, 2), extractIdleQueued=jobs(1004, 5))
    gfl.clean_glidein_queue(("IDLE", 0, 0), Totals(5, 0, 0, fe), Queue(), 0, 10, fe, log=log, factoryConfig=cfg)
    removed("excess_idle", 2)
    clock.tick(300)
    request(CMS)
    answer(extractIdleQueued=jobs(1005, 3))
    gfl.clean_glidein_queue(("IDLE", 0, 0), Totals(3, 0, 0, fe), Queue(), 0, 10, fe, log=log, factoryConfig=cfg)
    removed("excess_idle", 3)
    # Cycle 6: it wants none at all (RemoveExcess ALL, max 0): running and held go too.
    clock.tick(300)
    request(CMS)
    answer(
        extractRunSimple=jobs(1006, 4),
        extractUnrecoverableHeldSimple=jobs(1007, 1),
        extractRecoverableHeldSimple=jobs(1008, 1),
    )
    gfl.clean_glidein_queue(("ALL", 0, 0), Totals(0, 4, 2, fe), Queue(), 0, 0, fe, log=log, factoryConfig=cfg)
    removed("excess_running", 4)
    removed("unrecoverable_held", 1)
    removed("held", 1)

    for h in log.handlers:
        h.close()
    logging.setLogRecordFactory(make_record)
    (out / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    return expected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    glideinwms_checkout.add_argument(ap)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    tree = glideinwms_checkout.checkout(ap, args.glideinwms, "factory/glideFactoryLib.py")
    print(json.dumps(write(tree, args.out), sort_keys=True))


if __name__ == "__main__":
    main()
