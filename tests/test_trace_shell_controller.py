"""gwms-trace.sh asks the monitoring controller (gwms_trace_control) and obeys: verbosity, sampling, commands.

Against a canned ``/v1/decide`` (tests.support.canned_controller); the live
end-to-end with the real service is elsewhere. Each level is run on the bash-5
path and forced onto the bash-4 one (GWMS_TRACE_COMPAT=4), as in test_trace_shell.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.controller.policy import SAMPLE_SCALE, Effect, Verbosity, sampled
from gwms_obs.tracing import conventions as C
from tests.support.canned_controller import answer, canned_controller, hung
from tests.support.trace_pilot import LIB, attrs, spool_spans

FACTORY_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
FACTORY_SPAN = "00f067aa0ba902b7"
TP = f"00-{FACTORY_TRACE}-{FACTORY_SPAN}-01"
PILOT_ATTRS = "factory=OSG entry=CMS_T2_X site=Nebraska 'frontend=CMS G&v1' security_class=main pilot=p1/é"
MODES = {"bash5": {}, "bash4": {"GWMS_TRACE_COMPAT": "4"}}

# A pilot with phases, spans directly under a phase and under the root, nested ("command") spans inside
# them and inside a gwms_trace_script, attributes and events on spans that a level may suppress.
PILOT = r"""
set -euo pipefail
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
echo "trace ${GWMS_PILOT_TRACEPARENT-unset}"
t0=$EPOCHREALTIME
eval "gwms_trace_control $PILOT_ATTRS"
t1=$EPOCHREALTIME
echo "control_us $(( ${t1/./} - ${t0/./} ))"
gwms_trace_phase init
gwms_trace_begin under_phase
gwms_trace_begin cmd_a k=v
gwms_trace_attr cmd.attr x
gwms_trace_event cmd_event
echo "tp_in_cmd ${TRACEPARENT-unset}"
gwms_trace_begin cmd_deeper
gwms_trace_end 0
gwms_trace_end 0
gwms_trace_attr under_phase.attr y
gwms_trace_event under_phase_event
gwms_trace_end 0
gwms_trace_phase setup
inner() { gwms_trace_begin "cmd_in_script"; gwms_trace_end 0; return 3; }
rc=0; gwms_trace_script main/fn.sh inner || rc=$?
echo "script_rc $rc"
gwms_trace_script main/x.sh ./x.sh --token TokCliSecret9 plain-arg
gwms_trace_phase_end 0
gwms_trace_begin under_root
gwms_trace_begin under_root_child
gwms_trace_end 0
gwms_trace_end 0
echo "tp_end ${TRACEPARENT-unset} pilot ${GWMS_PILOT_TRACEPARENT-unset}"
gwms_trace_flush 0
echo "result $GWMS_TRACE_RESULT"
"""

ALL = {"glidein", "init", "setup", "under_phase", "cmd_a", "cmd_deeper", "main/fn.sh", "cmd_in_script",
       "main/x.sh", "under_root", "under_root_child"}  # fmt: skip
EXPECTED: dict[str, set[str]] = {
    "off": set(),
    "phases": {"glidein", "init", "setup"},
    "scripts": {"glidein", "init", "setup", "under_phase", "main/fn.sh", "main/x.sh", "under_root"},
    "commands": ALL,
}


class Run:
    def __init__(self, p: subprocess.CompletedProcess[str], workdir: Path, took: float) -> None:
        self.returncode, self.stdout, self.stderr, self.took = p.returncode, p.stdout, p.stderr, took
        spool = workdir / "spool.jsonl"
        self.spool = spool.read_bytes() if spool.exists() else b""

    def spans(self) -> dict[str, dict[str, Any]]:
        return {s["name"]: s for s in spool_spans(self.spool)}

    def out(self, key: str) -> str:
        return next(ln.split(" ", 1)[1] for ln in self.stdout.splitlines() if ln.startswith(key + " "))

    def root(self) -> dict[str, Any]:
        return attrs(self.spans()["glidein"]["attributes"])


def pilot(tmp_path: Path, env: dict[str, str] | None = None, script: str = PILOT, path: str | None = None) -> Run:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "x.sh").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "x.sh").chmod(0o755)
    e = {
        "PATH": path or os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "GWMS_TRACE_LIB": str(LIB),
        "PILOT_ATTRS": PILOT_ATTRS,
        **(env or {}),
    }
    t0 = time.monotonic()
    p = subprocess.run(["/bin/bash", "-c", script], cwd=tmp_path, env=e, capture_output=True, text=True, timeout=60,
                       check=False)  # fmt: skip
    return Run(p, tmp_path, time.monotonic() - t0)


@pytest.mark.parametrize("mode", list(MODES))
@pytest.mark.parametrize("level", ["off", "phases", "scripts", "commands"])
def test_each_level_keeps_exactly_its_spans(tmp_path: Path, level: str, mode: str) -> None:
    with canned_controller(body=answer(level, rule=17, kind="site")) as ctl:
        run = pilot(tmp_path, {**MODES[mode], "GWMS_TRACE_CONTROLLER_URL": ctl.url, "TRACEPARENT": TP})
    assert run.returncode == 0, run.stderr
    assert set(run.spans()) == EXPECTED[level]
    assert run.out("script_rc") == "3"  # a suppressed script still runs and returns its status
    assert run.out("result") == ("off" if level == "off" else "stderr")
    (asked,) = ctl.requests
    assert asked.path == "/v1/decide"
    assert asked.query == {"factory": "OSG", "entry": "CMS_T2_X", "site": "Nebraska", "frontend": "CMS G&v1",
                           "security_class": "main", "pilot": "p1/é"}  # fmt: skip
    if level == "off":  # discarded: nothing spooled, framed or sent; the children see the context unsampled
        assert run.spool == b"" and C.SPOOL_SECTION not in run.stderr
        assert run.out("tp_end") == f"00-{FACTORY_TRACE}-{FACTORY_SPAN}-00 pilot unset"
        return
    root = run.root()
    assert root[C.TRACE_VERBOSITY] == level and root[C.CONTROLLER_RESULT] == "answered"
    assert root[C.CONTROLLER_KIND] == "site" and root[C.CONTROLLER_RULE] == 17
    spans = run.spans()
    for s in spans.values():  # every kept span hangs under a kept span
        assert s["name"] == "glidein" or s["parentSpanId"] in {p["spanId"] for p in spans.values()}
    if level == "scripts":
        # the suppressed nested spans' attributes and events went nowhere, and their ends ended nothing
        up = spans["under_phase"]
        assert attrs(up["attributes"]) == {"under_phase.attr": "y", C.PROCESS_EXIT_CODE: 0}
        assert [e["name"] for e in up["events"]] == ["under_phase_event"] and "unfinished" not in json.dumps(up)
        assert run.out("tp_in_cmd") == f"00-{FACTORY_TRACE}-{up['spanId']}-01"  # the innermost real span
        assert spans["under_root"]["status"] == {"code": C.STATUS_OK}
    if level == "phases":
        assert spans["init"]["events"] == [] and C.UNFINISHED not in attrs(spans["init"]["attributes"])


@pytest.mark.parametrize("level", ["phases", "scripts", "commands"])
def test_factory_default_without_controller(tmp_path: Path, level: str) -> None:
    """GWMS_TRACE_VERBOSITY alone: its level, no network; gwms_trace_control says unconfigured."""
    run = pilot(tmp_path, {"GWMS_TRACE_VERBOSITY": level, "TRACEPARENT": TP})
    assert set(run.spans()) == EXPECTED[level]
    assert run.root()[C.CONTROLLER_RESULT] == "unconfigured" and run.root()[C.TRACE_VERBOSITY] == level
    assert C.CONTROLLER_KIND not in run.root() and C.CONTROLLER_RULE not in run.root()


def test_default_off_without_controller_is_gwms_trace_0(tmp_path: Path) -> None:
    run = pilot(tmp_path, {"GWMS_TRACE_VERBOSITY": "off", "TRACEPARENT": TP})
    assert run.returncode == 0 and run.out("result") == "off" and run.spool == b""
    assert run.out("tp_end") == f"{TP} pilot unset"  # untouched, as with GWMS_TRACE=0


def test_no_control_call_and_no_setting_is_todays_output(tmp_path: Path) -> None:
    """Without gwms_trace_control or GWMS_TRACE_VERBOSITY every span is written, nothing added."""
    run = pilot(tmp_path, {"TRACEPARENT": TP}, script=PILOT.replace('eval "gwms_trace_control $PILOT_ATTRS"', ":"))
    assert set(run.spans()) == ALL
    assert not any(k.startswith("gwms.controller") or k == C.TRACE_VERBOSITY for k in run.root())
    x = attrs(run.spans()["main/x.sh"]["attributes"])
    assert C.PROCESS_EXECUTABLE_NAME not in x and C.PROCESS_COMMAND_LINE not in x


def test_default_off_with_controller_never_called_discards_at_flush(tmp_path: Path) -> None:
    script = PILOT.replace('eval "gwms_trace_control $PILOT_ATTRS"', ":")
    run = pilot(tmp_path, {"GWMS_TRACE_VERBOSITY": "off", "GWMS_TRACE_CONTROLLER_URL": "http://127.0.0.1:9"}, script)
    assert run.returncode == 0 and run.out("result") == "off" and run.spool == b""
    assert C.SPOOL_SECTION not in run.stderr


def test_controller_can_raise_the_factory_default(tmp_path: Path) -> None:
    with canned_controller(body=answer("scripts", rule=None, kind="default", capped_by=())) as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_VERBOSITY": "off", "GWMS_TRACE_CONTROLLER_URL": ctl.url + "/"})
    assert set(run.spans()) == EXPECTED["scripts"]
    root = run.root()
    assert root[C.CONTROLLER_KIND] == "default" and C.CONTROLLER_RULE not in root  # rule null: not set


@pytest.mark.parametrize(("record", "expected"), [
    (True, {C.PROCESS_EXECUTABLE_NAME: "x.sh", C.PROCESS_COMMAND_LINE: "./x.sh **** plain-arg"}),
    (False, {C.PROCESS_EXECUTABLE_NAME: "x.sh"}),
])  # fmt: skip
def test_record_commands(tmp_path: Path, record: bool, expected: dict[str, str]) -> None:
    """record_commands: the masked command line; without it the executable's name only (no arguments)."""
    with canned_controller(body=answer("commands", record_commands=record)) as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "TRACEPARENT": TP})
    a = attrs(run.spans()["main/x.sh"]["attributes"])
    assert {k: v for k, v in a.items() if k.startswith("process.") and k != C.PROCESS_EXIT_CODE} == expected
    assert b"TokCliSecret9" not in run.spool and b"plain-arg" in run.spool if record else b"plain-arg" not in run.spool


def test_asked_once(tmp_path: Path) -> None:
    with canned_controller(body=answer("phases")) as ctl:
        script = PILOT.replace('eval "gwms_trace_control $PILOT_ATTRS"',
                               'gwms_trace_control entry=A; gwms_trace_control entry=B')  # fmt: skip
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url}, script)
    assert len(ctl.requests) == 1 and ctl.requests[0].query["entry"] == "A"
    assert set(run.spans()) == EXPECTED["phases"]


@pytest.mark.parametrize("mode", list(MODES))
def test_sampling_of_a_trace_begun_by_the_pilot(tmp_path: Path, mode: str) -> None:
    """No factory context: the pilot samples on its trace id's low 56 bits exactly as policy.sampled does."""
    for i, sample in enumerate([0.0, 1.0, 0.5, 0.5, 0.25, 0.75]):
        with canned_controller(body=answer("phases", sample=sample)) as ctl:
            run = pilot(tmp_path / str(i), {**MODES[mode], "GWMS_TRACE_CONTROLLER_URL": ctl.url})
        trace_id = run.out("trace").split("-")[1]
        want = sampled(trace_id, Effect(Verbosity.PHASES, sample))
        assert run.out("result") == ("stderr" if want else "off"), (trace_id, sample)
        assert bool(run.spool) is want


def test_factory_sampled_trace_is_not_resampled(tmp_path: Path) -> None:
    """A glidein continuing the factory's sampled trace keeps it (the factory sampled); verbosity still applies."""
    with canned_controller(body=answer("phases", sample=0.0)) as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "TRACEPARENT": TP})
    assert set(run.spans()) == EXPECTED["phases"]


def test_unsampled_factory_context_asks_nothing(tmp_path: Path) -> None:
    with canned_controller() as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "TRACEPARENT": TP[:-2] + "00"})
    assert run.out("result") == "off" and ctl.requests == [] and run.spool == b""


@pytest.mark.parametrize("mode", list(MODES))
def test_hung_controller_costs_at_most_the_timeout(tmp_path: Path, mode: str) -> None:
    with hung() as url:
        run = pilot(tmp_path, {**MODES[mode], "GWMS_TRACE_CONTROLLER_URL": url, "GWMS_TRACE_CONTROLLER_TIMEOUT": "0.5",
                               "GWMS_TRACE_VERBOSITY": "scripts"})  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert int(run.out("control_us")) < 1_000_000  # 0.5 s and curl's own start
    assert run.took < 10
    assert set(run.spans()) == EXPECTED["scripts"]
    assert run.root()[C.CONTROLLER_RESULT] == "timeout" and run.root()[C.TRACE_VERBOSITY] == "scripts"


def test_refused_connection_is_an_error(tmp_path: Path) -> None:
    run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": "http://127.0.0.1:9", "TRACEPARENT": TP})
    assert run.root()[C.CONTROLLER_RESULT] == "error" and set(run.spans()) == ALL


GOOD = answer("phases")
BAD_ANSWERS: list[tuple[int, bytes]] = [
    (500, GOOD),  # the right shape, the wrong status
    (404, b'{"error":"not_found"}'),
    (200, b"garbage"),
    (200, b""),
    (200, GOOD[:-1]),  # cut short
    (200, GOOD[:-1] + b',"extra":1}'),  # a key the contract does not have
    (200, GOOD.replace(b'"sample":1.0,', b'"sample":1.0,"x":1,')),  # an unknown key in the middle
    (200, json.dumps(dict(reversed(json.loads(GOOD).items()))).encode()),  # keys out of order
    (200, GOOD.replace(b"phases", b"loud")),
    (200, GOOD.replace(b'"rule":17', b'"rule":-17')),
    (200, GOOD.replace(b'"rule":17', b'"rule":"17"')),
    (200, GOOD.replace(str(SAMPLE_SCALE).encode(), str(SAMPLE_SCALE + 1).encode())),
    (200, GOOD.replace(b'"kind":"site"', b'"kind":"cap"')),
    (200, GOOD + b"\n" + GOOD),
    (200, b" " * 5000 + GOOD),  # well-formed but over the size bound
    (200, GOOD.replace(b"true", b"1").replace(b"false", b"0")),
    (200, GOOD.replace(b"phases", b"phases\\u0000")),
]


@pytest.mark.parametrize(("status", "body"), BAD_ANSWERS, ids=range(len(BAD_ANSWERS)))
def test_bad_answers_fall_back_to_the_default(tmp_path: Path, status: int, body: bytes) -> None:
    with canned_controller(status, body) as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "GWMS_TRACE_VERBOSITY": "scripts"})
        assert len(ctl.requests) == 1
    assert run.returncode == 0, run.stderr
    assert set(run.spans()) == EXPECTED["scripts"]
    assert run.root()[C.CONTROLLER_RESULT] == "error" and run.root()[C.TRACE_VERBOSITY] == "scripts"


def test_endless_answer_is_cut(tmp_path: Path) -> None:
    """A body far over the bound (no Content-Length would stop curl either) ends in error, quickly."""
    with canned_controller(200, b"{" + b" " * (64 << 20)) as ctl:
        ctl.content_length = False
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "GWMS_TRACE_CONTROLLER_TIMEOUT": "5"})
    assert run.root()[C.CONTROLLER_RESULT] == "error" and int(run.out("control_us")) < 5_000_000


def test_compact_and_spaced_json_both_parse(tmp_path: Path) -> None:
    with canned_controller(body=answer("phases", compact=False)) as ctl:
        run = pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url})
    assert run.root()[C.CONTROLLER_RESULT] == "answered"


FAKE_CURL = """#!/bin/bash
printf '%s\\n' "$@" >>"$ARGV_LOG"
echo "--- $(tr '\\0' ' ' </proc/$$/cmdline)" >>"$ARGV_LOG"
exec /usr/bin/curl "$@"
"""


@pytest.mark.parametrize("how", ["file", "env"])
def test_token_goes_in_the_header_never_on_a_command_line(tmp_path: Path, how: str) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "curl").write_text(FAKE_CURL)
    (bindir / "curl").chmod(0o755)
    token = "eyJhbGciOiJFZERTQSJ9.Y3RsVG9rZW5NYXJr.c2ln"
    env = {"ARGV_LOG": str(tmp_path / "argv"), "TRACEPARENT": TP}
    if how == "file":
        (tmp_path / "ctl.jwt").write_text(token + "\n")
        env |= {"GWMS_TRACE_CONTROLLER_TOKEN_FILE": str(tmp_path / "ctl.jwt"), "GWMS_TRACE_CONTROLLER_TOKEN": "other"}
    else:
        env["GWMS_TRACE_CONTROLLER_TOKEN"] = token
    with canned_controller(body=answer("phases")) as ctl:
        run = pilot(tmp_path / "w", {**env, "GWMS_TRACE_CONTROLLER_URL": ctl.url},
                    path=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")  # fmt: skip
        (asked,) = ctl.requests
    assert asked.headers["authorization"] == f"Bearer {token}"
    argv = (tmp_path / "argv").read_text()
    assert "--max-time" in argv and "-K" in argv and token not in argv and "Y3RsVG9rZW5NYXJr" not in argv
    assert token.encode() not in run.spool and token not in run.stderr
    assert set(run.spans()) == EXPECTED["phases"]


def test_token_with_config_syntax_is_not_sent(tmp_path: Path) -> None:
    """A token that could add curl config lines is refused (no header), the request still goes."""
    with canned_controller(body=answer("phases")) as ctl:
        pilot(tmp_path, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "GWMS_TRACE_CONTROLLER_TOKEN": 'a"\nurl = "http://x'})
        (asked,) = ctl.requests
    assert "authorization" not in asked.headers


def test_wget_fallback(tmp_path: Path) -> None:
    """No curl: wget, with the token in a 0600 config file removed afterwards, and timeout(1) bounding it."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("wget", "head", "timeout", "sed", "rm", "gzip", "base64", "od", "date", "tr"):
        (bindir / tool).symlink_to(f"/usr/bin/{tool}" if Path(f"/usr/bin/{tool}").exists() else f"/bin/{tool}")
    with canned_controller(body=answer("phases", rule=5, kind="vo")) as ctl:
        run = pilot(tmp_path / "w", {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "GWMS_TRACE_CONTROLLER_TOKEN": "wtok"},
                    path=str(bindir))  # fmt: skip
        (asked,) = ctl.requests
    assert asked.headers["authorization"] == "Bearer wtok"
    assert set(run.spans()) == EXPECTED["phases"] and run.root()[C.CONTROLLER_RULE] == 5
    assert not list((tmp_path / "w").glob("*wgetrc*"))
    with hung() as url:
        run = pilot(tmp_path / "h", {"GWMS_TRACE_CONTROLLER_URL": url, "GWMS_TRACE_CONTROLLER_TIMEOUT": "0.5"},
                    path=str(bindir))  # fmt: skip
    assert run.root()[C.CONTROLLER_RESULT] == "timeout" and int(run.out("control_us")) < 1_500_000


def test_shell_spells_the_controller_conventions() -> None:
    text = LIB.read_text()
    for name in (
        C.TRACE_VERBOSITY, C.CONTROLLER_RESULT, C.CONTROLLER_KIND, C.CONTROLLER_RULE, C.PROCESS_EXECUTABLE_NAME,
        C.PROCESS_COMMAND_LINE, C.ENV_VERBOSITY, C.ENV_PILOT_CONTROLLER_URL, C.ENV_PILOT_CONTROLLER_TIMEOUT,
        C.ENV_PILOT_CONTROLLER_TOKEN, C.ENV_PILOT_CONTROLLER_TOKEN_FILE, *C.CONTROLLER_RESULTS,
        *(v.label for v in Verbosity),
    ):  # fmt: skip
        assert name in text, name
    assert f"<= {SAMPLE_SCALE}))" in text  # the threshold's bound is policy.SAMPLE_SCALE
