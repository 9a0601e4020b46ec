"""pilot/gwms-trace.sh under /bin/bash (5.2 here), on its bash-5 path and forced onto its bash-4 paths.

No bash 4 binary can be had on this machine (Debian ships none; the network
reaches only package registries), so the fallback code is run by forcing it
with GWMS_TRACE_COMPAT=4 (and GWMS_TRACE_CLOCK=date for the per-timestamp
`date` clock). That exercises every fallback branch, but on bash 5.2's
parser: bash-4-only incompatibilities would not show here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.glidein_err import parse_err
from gwms_obs.tracing import conventions as C
from gwms_obs.tracing.spool import parse_spool
from tests.support.otlp_capture import otlp_capture
from tests.support.trace_pilot import LIB, MODES, SCRIPTS, attrs, run_pilot, spool_spans
from tests.support.traceparent import parse_traceparent

FACTORY_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
FACTORY_SPAN = "00f067aa0ba902b7"
TP = f"00-{FACTORY_TRACE}-{FACTORY_SPAN}-01"


def _by_name(spans: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {s["name"]: s for s in spans}
    assert len(out) == len(spans), "span names are unique in this script"
    return out


def _t(s: dict[str, Any], k: str) -> int:
    return int(s[k])


def bash(
    script: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    e = {"PATH": "/usr/bin:/bin", "GWMS_TRACE_LIB": str(LIB), **(env or {})}
    return subprocess.run(
        ["/bin/bash", "-c", 'set -euo pipefail; source "$GWMS_TRACE_LIB"; ' + script],
        cwd=cwd,
        env=e,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("mode", list(MODES))
def test_glidein_tree(tmp_path: Path, mode: str) -> None:
    """Phases and validation scripts (one failing) give the right tree, names, attributes, times, statuses."""
    run = run_pilot(tmp_path, env=MODES[mode], traceparent=TP)
    assert run.returncode == 1, run.stderr[-2000:]
    spans = run.spans()
    by = _by_name(spans)
    assert list(by) == ["init", "pre_setup", *SCRIPTS[:3], "setup", "cleanup", "glidein"]  # written as they end

    # One trace, the factory's; the pilot's root is the child of the factory's per-glidein span.
    assert {s["traceId"] for s in spans} == {FACTORY_TRACE}
    root = by[C.SPAN_PILOT]
    assert root["parentSpanId"] == FACTORY_SPAN and root["kind"] == C.KIND_CONSUMER
    for phase in ("init", "pre_setup", "setup", "cleanup"):
        assert by[phase]["parentSpanId"] == root["spanId"]
        assert attrs(by[phase]["attributes"])[C.PHASE] == phase
        assert by[phase]["kind"] == C.KIND_INTERNAL
    for s in SCRIPTS[:3]:
        assert by[s]["parentSpanId"] == by["setup"]["spanId"]
        assert attrs(by[s]["attributes"])[C.SCRIPT] == s
    assert "main" not in by and SCRIPTS[3] not in by  # validation stopped at the failure

    # Ids: hex of the right length, unique.
    ids = [s["spanId"] for s in spans]
    assert len(set(ids)) == len(ids) and all(C.is_span_id(i) for i in ids)

    # Statuses and exit codes.
    fail = by["entry/check_os.sh"]
    assert fail["status"] == {"code": C.STATUS_ERROR, "message": "exit code 3"}
    assert attrs(fail["attributes"])[C.PROCESS_EXIT_CODE] == 3
    for s in SCRIPTS[:2]:
        assert by[s]["status"] == {"code": C.STATUS_OK}
        assert attrs(by[s]["attributes"])[C.PROCESS_EXIT_CODE] == 0
    assert by["setup"]["status"]["code"] == C.STATUS_ERROR
    assert by["cleanup"]["status"]["code"] == C.STATUS_OK
    assert root["status"]["code"] == C.STATUS_ERROR and attrs(root["attributes"])[C.PROCESS_EXIT_CODE] == 1
    assert "status" not in by["init"]  # ended by the next phase: unset

    # Times: ordered, children inside their parents, phases one after the other.
    for s in spans:
        assert _t(s, "startTimeUnixNano") <= _t(s, "endTimeUnixNano")
        assert abs(_t(s, "startTimeUnixNano") / 1e9 - time.time()) < 600
    for s in spans:
        if s is root:
            continue
        parent = next(p for p in spans if p["spanId"] == s["parentSpanId"])
        assert _t(parent, "startTimeUnixNano") <= _t(s, "startTimeUnixNano")
        assert _t(s, "endTimeUnixNano") <= _t(parent, "endTimeUnixNano")
    seq = [by[n] for n in ("init", "pre_setup", "setup", "cleanup")]
    for a, b in itertools.pairwise(seq):
        assert _t(a, "endTimeUnixNano") <= _t(b, "startTimeUnixNano")
    scripts = [by[n] for n in SCRIPTS[:3]]
    for a, b in itertools.pairwise(scripts):
        assert _t(a, "endTimeUnixNano") <= _t(b, "startTimeUnixNano")
    if mode == "bash5":  # microseconds from EPOCHREALTIME; 10 ms ticks on /proc/uptime
        assert any(_t(s, "startTimeUnixNano") % 10_000_000 for s in spans)

    # Events and attributes.
    ev = by["init"]["events"]
    assert [e["name"] for e in ev] == ["work_dir_created"] and attrs(ev[0]["attributes"])["path"] == str(tmp_path)
    assert by["setup"]["events"][0]["name"] == "validation_error"
    assert attrs(by["pre_setup"]["attributes"])["gwms.files"] == 4

    # Resource: OTEL_RESOURCE_ATTRIBUTES, ours, and a value set after init but before the first span ended.
    for res in run.resources():
        assert res[C.SERVICE_NAME] == C.SERVICE_PILOT
        assert res[C.ENTRY] == "CMSHTPC_T2_US_Nebraska_red" and res[C.CLIENT] == "CMSG-v1_0.main-token"
        assert res[C.SITE] == "Nebraska" and res[C.FACTORY] == "OSG"
        assert res[C.CONDOR_CLUSTER] == 10176598 and res[C.CONDOR_PROC] == 3
        assert res[C.GLIDEIN_UUID] == "5f3c3a9e-1b2c-4d5e-8f90-a1b2c3d4e5f6"
        assert res[C.CONVENTIONS] == C.VERSION and res[C.PROCESS_PID] > 0

    # The payload gets the root's context to link to.
    assert f"payload-link 00-{FACTORY_TRACE}-{root['spanId']}-01" in run.stdout

    # The exporter's validator takes it whole.
    errors = ParseErrors()
    parsed = parse_spool(run.spool, "spool", errors)
    assert parsed.spans == len(spans) and parsed.rejected == 0 and not errors.counts


@pytest.mark.parametrize("mode", list(MODES))
def test_no_endpoint_frames_spool_in_stderr(tmp_path: Path, mode: str) -> None:
    """Without an endpoint the spool goes to stderr in condor's framing; glidein_err reads it back."""
    run = run_pilot(tmp_path, env=MODES[mode], traceparent=TP, fail=None)
    assert run.returncode == 0
    assert "result stderr" in run.stdout
    err = b"=== some glidein stderr ===\n" + run.stderr + b"=== Exit messages left by periodic scripts ===\n"
    # the section the reader looks for (one name: tracing.conventions.SPOOL_SECTION)
    assert C.SPOOL_SECTION.encode() + b"\n======== gzip | uuencode =============\nbegin-base64 644 -\n" in err
    errors = ParseErrors()
    parsed = parse_err(err, "job.1.0.err", errors)
    assert parsed.trace_spool == run.spool and not errors.counts
    by = _by_name(spool_spans(parsed.trace_spool))
    assert by["condor_startup.sh"]["parentSpanId"] == by["main"]["spanId"]
    assert b"gwms-trace: 11 spans returned in stderr (no endpoint)" in run.stderr


def test_bash5_path_runs_no_external_command(tmp_path: Path) -> None:
    """On bash >= 5 spans need no program: with an empty PATH they still get ids and sub-second times."""
    r = bash(
        'PATH=/nonexistent; gwms_trace_init "$PWD/s.jsonl"; for i in 1 2 3; do gwms_trace_begin "s$i"; '
        "gwms_trace_end 0; done; gwms_trace_end; "
        'GWMS_TRACE_SPOOL=; _gt_frame() { return 1; }; gwms_trace_flush 0; echo "$GWMS_TRACE_RESULT"',
        tmp_path,
    )
    assert r.returncode == 0 and "command not found" not in r.stderr, r.stderr
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert [s["name"] for s in spans] == ["s1", "s2", "s3", "glidein"]
    assert all(int(s["startTimeUnixNano"]) % 1_000_000_000 for s in spans)


def test_bash4_path_without_date_or_od(tmp_path: Path) -> None:
    """The fallback survives a node without date/od: whole-second times, ids still unique."""
    r = bash(
        'PATH=/nonexistent; gwms_trace_init "$PWD/s.jsonl"; for i in 1 2 3 4 5; do gwms_trace_begin "s$i"; '
        "gwms_trace_end 0; done; _gt_frame() { return 1; }; gwms_trace_flush 0",
        tmp_path,
        {"GWMS_TRACE_COMPAT": "4", "GWMS_TRACE_CLOCK": "date"},
    )
    assert r.returncode == 0, r.stderr
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert len(spans) == 6 and len({s["spanId"] for s in spans}) == 6
    assert all(int(s["startTimeUnixNano"]) % 1_000_000_000 == 0 for s in spans)


BAD_TRACEPARENTS = [
    "garbage",
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",  # upper case
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # zero span id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # v00 has exactly 4 fields
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    "uber-trace-id:4bf92f3577b34da6:00f067aa0ba902b7:0:1",  # tracer2022's Jaeger format
]
GOOD_TRACEPARENTS = [
    TP,
    "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-future",  # a later version may add fields
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03",
]


@pytest.mark.parametrize("value", BAD_TRACEPARENTS)
def test_malformed_traceparent_starts_new_trace(tmp_path: Path, value: str) -> None:
    assert parse_traceparent(value) is None  # the Python side agrees with the shell
    r = bash(
        'gwms_trace_init "$PWD/s.jsonl"; _gt_frame() { return 1; }; gwms_trace_flush 0',
        tmp_path,
        {"TRACEPARENT": value},
    )
    assert r.returncode == 0, r.stderr
    (root,) = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert root["parentSpanId"] == "" and root["traceId"] != FACTORY_TRACE and C.is_trace_id(root["traceId"])
    a = attrs(root["attributes"])
    assert a[C.PARENT_INVALID] is True and a[C.PARENT_RECEIVED] == value[:64]


@pytest.mark.parametrize("value", GOOD_TRACEPARENTS)
def test_valid_traceparent_is_continued(tmp_path: Path, value: str) -> None:
    tp = parse_traceparent(value)
    assert tp is not None and tp.sampled
    r = bash(
        'gwms_trace_init "$PWD/s.jsonl"; _gt_frame() { return 1; }; gwms_trace_flush 0',
        tmp_path,
        {"TRACEPARENT": value},
    )
    (root,) = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert (root["traceId"], root["parentSpanId"]) == (tp.trace_id, tp.span_id), r.stderr
    assert C.PARENT_INVALID not in attrs(root["attributes"])


def test_unsampled_or_disabled_records_nothing(tmp_path: Path) -> None:
    """The factory's head-sampling decision (flags 00) and GWMS_TRACE=0 turn the library off; scripts still run."""
    script = (
        'gwms_trace_init "$PWD/s.jsonl"; gwms_trace_phase setup; '
        'gwms_trace_script x sh -c "exit 4" || echo rc=$?; gwms_trace_flush 0; echo "r=$GWMS_TRACE_RESULT"'
    )
    for env in ({"TRACEPARENT": TP[:-2] + "00"}, {"GWMS_TRACE": "0"}):
        r = bash(script, tmp_path, env)
        assert r.returncode == 0 and "rc=4" in r.stdout and "r=off" in r.stdout, r.stderr
        assert not (tmp_path / "s.jsonl").exists() or not (tmp_path / "s.jsonl").read_bytes()
        assert "GWMSTraceSpool" not in r.stderr


def test_post_to_endpoint_with_token(tmp_path: Path) -> None:
    """With an endpoint the spool goes out as one OTLP/HTTP JSON request with the bearer token; not in stderr."""
    with otlp_capture() as cap:
        run = run_pilot(
            tmp_path,
            traceparent=TP,
            env={
                "OTEL_EXPORTER_OTLP_ENDPOINT": cap.url + "/",
                "GWMS_TRACE_TOKEN": "s3cret-token",
                "OTEL_EXPORTER_OTLP_HEADERS": "X-Scope-OrgID=gwms%20test",
            },
        )
        assert "result sent" in run.stdout, run.stderr[-2000:]
        (req,) = cap.requests
    assert req.path == "/v1/traces"
    assert req.headers["authorization"] == "Bearer s3cret-token"
    assert req.headers["content-type"] == "application/json"
    assert req.headers["x-scope-orgid"] == "gwms test"
    doc = json.loads(req.body)
    posted = [s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    assert posted == run.spans() and len(posted) == 8
    assert b"GWMSTraceSpool" not in run.stderr and b"s3cret" not in run.stderr
    assert b"gwms-trace: 8 spans sent" in run.stderr


@pytest.mark.parametrize("statuses", [[401], [503]])
def test_refused_post_falls_back_to_stderr(tmp_path: Path, statuses: list[int]) -> None:
    with otlp_capture(statuses=statuses) as cap:
        run = run_pilot(tmp_path, traceparent=TP, env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": cap.traces_url})
        assert len(cap.requests) == 1
    assert "result stderr" in run.stdout
    err = parse_err(run.stderr, "e", ParseErrors())
    assert err.trace_spool == run.spool
    assert re.search(rb"returned in stderr \(curl: \(22\) [^\n]*; exit code 22\)\n", run.stderr)


def test_unreachable_or_hanging_endpoint_is_bounded(tmp_path: Path) -> None:
    """A pilot waits at most GWMS_TRACE_TIMEOUT on a dead endpoint, then frames the spool."""
    with otlp_capture(hang=True) as cap:
        t0 = time.monotonic()
        run = run_pilot(
            tmp_path,
            traceparent=TP,
            env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": cap.traces_url, "GWMS_TRACE_TIMEOUT": "1"},
        )
        took = time.monotonic() - t0
    assert "result stderr" in run.stdout and took < 10, took
    assert parse_err(run.stderr, "e", ParseErrors()).trace_spool == run.spool
    # A closed port fails at once.
    run = run_pilot(
        tmp_path / "b", traceparent=TP, env={"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:9/v1/traces"}
    )
    assert "result stderr" in run.stdout


def test_escaping_keeps_json_valid(tmp_path: Path) -> None:
    r = bash(
        'gwms_trace_init "$PWD/s.jsonl"; gwms_trace_begin $\'we"ird\\\\na\nme\' "k=$(printf \'a\\tb\\001\')"; '
        'gwms_trace_attr msg "$(printf \'caf\\xc3\\xa9 \\xff\')"; gwms_trace_event "e\\"v"; '
        'gwms_trace_end 2 "no \\"x\\""; '
        "gwms_trace_attr -i bad notanint; gwms_trace_attr -b flag yes; "
        "_gt_frame() { return 1; }; gwms_trace_flush 0",
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())  # json.loads succeeded on every line
    s = spans[0]
    assert s["name"] == 'we"ird\\na\nme'
    a = attrs(s["attributes"])
    assert a["k"] == "a\tb?" and a["msg"] == "caf?? ?"
    assert s["status"] == {"code": 2, "message": 'no "x"'}
    assert s["events"][0]["name"] == 'e"v'
    root = attrs(spans[1]["attributes"])
    assert root["bad"] == "notanint" and root["flag"] == "yes"  # wrong types fall back to strings


def test_span_cap_keeps_root_and_counts_drops(tmp_path: Path) -> None:
    r = bash(
        'gwms_trace_init "$PWD/s.jsonl"; for i in $(seq 20); do gwms_trace_begin "s$i"; gwms_trace_end; done; '
        "_gt_frame() { return 1; }; gwms_trace_flush 0",
        tmp_path,
        {"GWMS_TRACE_MAX_SPANS": "5"},
    )
    assert r.returncode == 0, r.stderr
    spans = spool_spans((tmp_path / "s.jsonl").read_bytes())
    assert [s["name"] for s in spans] == ["s1", "s2", "s3", "s4", "s5", "glidein"]
    assert attrs(spans[-1]["attributes"])[C.DROPPED_SPANS] == 15


def test_unwritable_spool_turns_tracing_off(tmp_path: Path) -> None:
    r = bash(
        "gwms_trace_init /nonexistent/dir/s.jsonl; gwms_trace_phase x; gwms_trace_script y true; "
        'gwms_trace_flush 0; echo "ok $GWMS_TRACE_RESULT"',
        tmp_path,
    )
    assert r.returncode == 0 and "ok off" in r.stdout and r.stderr == "", r.stderr


def test_flush_ends_open_spans_and_links(tmp_path: Path) -> None:
    """An early failure leaves spans open: flush ends them, marked unfinished; links are recorded."""
    link = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    r = bash(
        f'gwms_trace_init "$PWD/s.jsonl"; gwms_trace_phase setup; gwms_trace_begin fetch; '
        f"gwms_trace_link {link} why=payload; "
        'gwms_trace_link not-a-traceparent; echo "tp=$TRACEPARENT"; _gt_frame() { return 1; }; gwms_trace_flush 7',
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    by = _by_name(spool_spans((tmp_path / "s.jsonl").read_bytes()))
    assert f"tp=00-{by['fetch']['traceId']}-{by['fetch']['spanId']}-01" in r.stdout  # innermost span
    assert by["fetch"]["links"] == [
        {
            "traceId": link[3:35],
            "spanId": link[36:52],
            "attributes": [{"key": "why", "value": {"stringValue": "payload"}}],
        }
    ]
    for n in ("fetch", "setup"):
        assert attrs(by[n]["attributes"])[C.UNFINISHED] is True and by[n]["status"]["code"] == C.STATUS_ERROR
    assert attrs(by["glidein"]["attributes"])[C.PROCESS_EXIT_CODE] == 7


def test_killed_pilot_spool_keeps_complete_lines(tmp_path: Path) -> None:
    run = run_pilot(tmp_path, traceparent=TP)
    cut = run.spool[: len(run.spool) - 40]  # the pilot died while writing its last span
    errors = ParseErrors()
    parsed = parse_spool(cut, "spool", errors)
    assert parsed.spans == len(run.spans()) - 1 and errors.counts == {("trace_spool", "bad_json"): 1}


def test_shell_spells_the_conventions() -> None:
    """gwms-trace.sh hard-codes names (no Python on worker nodes): they must be conventions.py's."""
    text = LIB.read_text()
    for name in (
        C.SERVICE_PILOT, C.SPAN_PILOT, C.PHASE, C.SCRIPT, C.PROCESS_EXIT_CODE, C.PROCESS_PID, C.HOST_NAME,
        C.SERVICE_NAME, C.CONVENTIONS, C.PARENT_INVALID, C.PARENT_RECEIVED, C.DROPPED_SPANS, C.UNFINISHED,
        C.ENV_PILOT_TRACEPARENT, C.ENV_TRACEPARENT, C.ENV_TRACESTATE, C.ENV_TOKEN, C.ENV_RESOURCE_ATTRIBUTES,
        C.CONDOR_CLUSTER,
        C.CONDOR_PROC, C.GLIDEIN_COUNT,
    ):  # fmt: skip
        assert name in text, name
    assert f"GWMS_TRACE_VERSION={C.VERSION}\n" in text
    assert "GWMSTraceSpool\\n======== gzip | uuencode =============\\nbegin-base64 644 -\\n" in text


def test_shellcheck_clean() -> None:
    import shutil

    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck not installed")
    r = subprocess.run(["shellcheck", "-s", "bash", str(LIB)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stdout


SECRET_SCRIPT = r"""
set -euo pipefail
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
[[ -z ${GWMS_TRACE_TOKEN_SEEN-} ]]
gwms_trace_begin "curl -H Authorization: Bearer BearerTokSecret01" gwms.pwd=PwdSecretGwms1 \
  "cmd=run.sh --token TokCli123Secret -x password=hunter2Secret"
gwms_trace_attr passphrase PassphraseSecret7
gwms_trace_attr -i db.password 9137731337
gwms_trace_attr aws_access_key_id AKIAZZZZSECRET123456
gwms_trace_event "unlock passphrase=Sesame123Secret" detail=token=EventAttrSecret4
gwms_trace_attr x.dn "/DC=org/DC=cilogon/C=US/O=Fermilab/CN=Secret Person"
gwms_trace_attr jwt "a eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJKd3RTZWNyZXRTdWIifQ.U2ln b"
gwms_trace_attr note "BEARER XyzUpperMark5"
gwms_trace_attr pem "-----begin rsa private----- LowerPemMark6"
gwms_trace_end 3 "login failed --password=PassEq456Secret for https://u:UrlPassSecret9@h/x"
gwms_trace_phase setup
gwms_trace_attr long "$(printf 'y%.0s' {1..3000})"
env | grep -c TOKEN_SECRET_MARK || true
gwms_trace_flush 0
"""


@pytest.mark.parametrize("mode", list(MODES))
def test_secrets_are_masked_before_the_spool_is_written(tmp_path: Path, mode: str) -> None:
    from tests.support.trace_secrets import SECRETS

    (tmp_path / "gwms-trace.jwt").write_text("TOKEN_SECRET_MARK\n")
    with otlp_capture() as cap:
        env = {**os.environ, **MODES[mode], "GWMS_TRACE_LIB": str(LIB),
               "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": cap.traces_url}  # fmt: skip
        p = subprocess.run(
            ["/bin/bash", "-c", SECRET_SCRIPT], cwd=tmp_path, env=env, capture_output=True, timeout=60, check=False
        )
        assert p.returncode == 0, p.stderr
        (req,) = cap.requests
    spool = (tmp_path / "spool.jsonl").read_text()
    assert "****" in spool and not [s for s in SECRETS if s in spool or s in req.body.decode()]
    assert max(len(m) for m in re.findall(r"y+", spool)) == 1024  # values cut
    # the glidein's own token: sent, read once, never in the environment, file gone
    assert req.headers["authorization"] == "Bearer TOKEN_SECRET_MARK"
    assert p.stdout.decode().strip() == "0" and not (tmp_path / "gwms-trace.jwt").exists()


# The shell's secret-key rule, as the ERE it was first written as (gwms-trace.sh spells it as globs).
SECRET_KEY_ERE = (
    r"(token|passw|passphrase|secret|credential|proxy|x509|api[_.-]?key|access[_.-]?key|authori[sz]ation|cookie"
    r"|private[_.-]?key|subject|(^|[._-])(dn|pwd)([._-]|$))"
)
PLAIN_KEYS = """
token x.dn dn DN dnx adn a_dn_b a-dn a.DN.b dn- _dn pwd x.pwd pwdx xpwd db_PWD.y pwd.x passphrase PassWord pass
api_key APIKEY api.key api-key apixkey api__key access_key AccessKey access.key accesskeyid acces_key Authorization
authorisation authorixation COOKIE private_key privatekey private.key private__key subject SUBJ x509up X.509 proxy
credential credentials secret gwms.script gwms.phase process.exit.code plain.key ke.y my_tokens TOKEN.x sub-ject path k
"""
KEYS = [*PLAIN_KEYS.split(), "", "a dn b", "x\tdn", "token"]  # "token" again: after other keys


def test_secret_keys_hide_their_values(tmp_path: Path) -> None:
    """Every key the ERE finds (case-insensitively) has its value masked, whatever the type; no other key does."""
    (tmp_path / "keys").write_text("\n".join(KEYS) + "\n")
    r = bash(
        'while IFS= read -r k; do _gt_kv "$k" v; echo "$_gt_a"; _gt_kv "$k" 7 i; echo "$_gt_a"; done <keys',
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    out = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert len(out) == 2 * len(KEYS)
    for key, as_str, as_int in zip(KEYS, out[::2], out[1::2], strict=True):
        if re.search(SECRET_KEY_ERE, key, re.IGNORECASE):
            assert as_str["value"] == as_int["value"] == {"stringValue": "****"}, key
        else:
            assert (as_str["value"], as_int["value"]) == ({"stringValue": "v"}, {"intValue": "7"}), key
