"""gwms-trace.sh against a hostile collector and a hostile environment (issue 29: hang, fill, leak, steer).

The glidein below traces a few spans and flushes them to a collector on
127.0.0.1 that trickles, never answers or redirects (tests.support.trace_hostile),
with curl, with wget only (a PATH of symlinks to every program but curl) and
with wget but no timeout(1) (the library's own watchdog). Each run must end
within its bound with rc 0, write nothing but the spool in its work dir, and
print no token under `set -x`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from gwms_obs.parse_errors import ParseErrors
from gwms_obs.sources.glidein_err import parse_err
from gwms_obs.tracing import conventions as C
from tests.support.canned_controller import answer, canned_controller
from tests.support.trace_hostile import hostile, path_without
from tests.support.trace_pilot import LIB, attrs, spool_spans

CLIENTS = ("curl", "wget", "wget-no-timeout")
HIDDEN = {"curl": (), "wget": ("curl",), "wget-no-timeout": ("curl", "timeout")}
DEFAULT_BOUND = 5.0  # GWMS_TRACE_TIMEOUT's default, the whole POST
SLACK = 2.5  # bash, the client's start, the framing of the spool

GLIDEIN = r"""
set -euo pipefail
if [[ -n ${OPTS-} ]]; then set "-$OPTS"; fi
envdump() { env >"$OUT/env.$1"; }
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
gwms_trace_control factory=OSG entry=E
gwms_trace_phase setup
gwms_trace_script main/a.sh envdump child
gwms_trace_begin "main/b.sh" gwms.script=main/b.sh
gwms_trace_end 0
gwms_trace_phase_end 0
t0=$EPOCHREALTIME
gwms_trace_flush 0
t1=$EPOCHREALTIME
echo "flush_us $(( ${t1/./} - ${t0/./} ))"
echo "result $GWMS_TRACE_RESULT"
LATER=set-after-flush
envdump after
echo glidein-done
"""


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    took: float
    work: Path
    out: Path

    def get(self, key: str) -> str:
        return next(ln.split(" ", 1)[1] for ln in self.stdout.splitlines() if ln.startswith(key + " "))

    def env(self, which: str) -> dict[str, str]:
        lines = (self.out / f"env.{which}").read_text().splitlines()
        return dict(ln.split("=", 1) for ln in lines if "=" in ln)


def glidein(tmp_path: Path, client: str, env: dict[str, str] | None = None, timeout: float = 40) -> Run:
    work, out = tmp_path / "work", tmp_path / "out"
    work.mkdir(parents=True, exist_ok=True)
    out.mkdir(exist_ok=True)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    if HIDDEN[client]:
        path = path_without(tmp_path / "bin", *HIDDEN[client])
    e = {"PATH": path, "HOME": str(out), "GWMS_TRACE_LIB": str(LIB), "OUT": str(out), **(env or {})}
    t0 = time.monotonic()
    p = subprocess.run(["/bin/bash", "-c", GLIDEIN], cwd=work, env=e, capture_output=True, text=True,
                       timeout=timeout, check=False)  # fmt: skip
    return Run(p.returncode, p.stdout, p.stderr, time.monotonic() - t0, work, out)


def only_the_spool(run: Run) -> None:
    """The work dir holds the spool and nothing else (no wgetrc, request copy, or file a config wrote)."""
    assert sorted(p.name for p in run.work.iterdir()) == ["spool.jsonl"]


def framed(run: Run) -> None:
    """The POST failed and the spool came back in stderr, whole."""
    assert run.get("result") == "stderr", run.stderr[-2000:]
    assert parse_err(run.stderr.encode(), "e", ParseErrors()).trace_spool == (run.work / "spool.jsonl").read_bytes()


# --- hang ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", CLIENTS)
def test_trickling_collector_is_bounded_on_default_settings(tmp_path: Path, client: str) -> None:
    """A byte every 2 s never trips wget's read timeout: the whole POST is bounded by GWMS_TRACE_TIMEOUT (5 s)."""
    with hostile("trickle", interval=2.0) as col:
        run = glidein(tmp_path, client, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url})
        assert len(col.requests) == 1
    assert run.returncode == 0 and "glidein-done" in run.stdout, run.stderr
    assert int(run.get("flush_us")) < (DEFAULT_BOUND + 1) * 1e6 and run.took < DEFAULT_BOUND + SLACK, run.took
    framed(run)
    only_the_spool(run)


@pytest.mark.parametrize("value", ["0", "-1", "99999"])
@pytest.mark.parametrize("client", ["curl", "wget"])
def test_bad_timeout_falls_back_to_the_default(tmp_path: Path, client: str, value: str) -> None:
    """curl reads 0 as no limit, wget too: 0, negative and absurd values are the default, said on stderr."""
    with hostile("silent") as col:
        run = glidein(tmp_path, client, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url,
                                         "GWMS_TRACE_TIMEOUT": value})  # fmt: skip
    assert run.returncode == 0 and run.took < DEFAULT_BOUND + SLACK, run.took
    assert int(run.get("flush_us")) > (DEFAULT_BOUND - 0.5) * 1e6  # the default, not a shorter bound
    assert "GWMS_TRACE_TIMEOUT is not a number of seconds in (0, 60]; 5" in run.stderr
    framed(run)
    only_the_spool(run)


@pytest.mark.parametrize("client", CLIENTS)
def test_silent_controller_with_zero_timeout_is_bounded(tmp_path: Path, client: str) -> None:
    """The controller's GET goes through the same bound: 0 is its default (2 s), with any client."""
    with hostile("silent") as ctl:
        run = glidein(tmp_path, client, {"GWMS_TRACE_CONTROLLER_URL": ctl.url, "GWMS_TRACE_CONTROLLER_TIMEOUT": "0"})
    assert run.returncode == 0 and run.took < 2 + SLACK, run.took
    root = next(s for s in spool_spans((run.work / "spool.jsonl").read_bytes()) if s["name"] == "glidein")
    assert attrs(root["attributes"])[C.CONTROLLER_RESULT] == "timeout"
    only_the_spool(run)


def test_timeout_values() -> None:
    """_gt_tmo's accepted bounds, the rest falling back to the default."""
    cases = {"5": "5", "0.5": "0.5", "60": "60", "1.250": "1.250", "0": "D", "0.0": "D", "-1": "D", "60.5": "D",
             "61": "D", "99999": "D", "1e3": "D", "abc": "D", "": "D", " 5": "D", "5\n": "D", ".5": "D"}  # fmt: skip
    script = 'source "$LIB"; for v in "${VALS[@]}"; do _gt_tmo "$v" D X 2>/dev/null; printf "%s\\0" "$_gt_to"; done'
    vals = " ".join("$'" + "".join(f"\\x{b:02x}" for b in v.encode()) + "'" for v in cases)  # any byte, quoted
    r = subprocess.run(["/bin/bash", "-c", f"VALS=({vals}); {script}"], env={"LIB": str(LIB)},
                       capture_output=True, check=True)  # fmt: skip
    assert dict(zip(cases, r.stdout.decode().split("\0")[:-1], strict=True)) == cases


# --- steer ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["curl", "wget"])
def test_redirect_is_not_followed(tmp_path: Path, client: str) -> None:
    """A 307 would re-send the spool and the token to its Location: neither client follows it."""
    with hostile("ok") as thief, hostile("redirect", location=thief.traces_url) as col:
        run = glidein(tmp_path, client, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url,
                                         "GWMS_TRACE_TOKEN": "redirTok123"})  # fmt: skip
        assert len(col.requests) == 1 and col.requests[0].headers["authorization"] == "Bearer redirTok123"
        assert thief.requests == []
    assert run.returncode == 0
    framed(run)
    only_the_spool(run)


# Each client's config syntax, injected through the token or a %-decoded header value (THIEF, PWNED: filled in).
INJECTIONS = {
    ("curl", "token"): 'tok"\nurl = "THIEF/steal"\noutput = "PWNED',
    ("curl", "header"): "X-A=x%22%0Aproxy = %22THIEF%22%0Aoutput = %22PWNED%22%0Auser-agent = %22",
    ("wget", "token"): 'tok"\nhttp_proxy = THIEF/\nuse_proxy = on\noutput_document = PWNED\nheader = "X-B: y',
    (
        "wget",
        "header",
    ): "X-A=x%22%0Ahttp_proxy = THIEF/%0Ause_proxy = on%0Aoutput_document = PWNED%0Aheader = %22X-B: y",
}


@pytest.mark.parametrize(("client", "how"), list(INJECTIONS))
def test_config_injection_is_refused(tmp_path: Path, client: str, how: str) -> None:
    """A token or header that would add config lines is not sent; the spool still goes, to its collector only."""
    pwned = tmp_path / "pwned"
    with hostile("ok") as thief, hostile("ok") as col:
        value = INJECTIONS[(client, how)].replace("THIEF", thief.url).replace("PWNED", str(pwned))
        env = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url}
        if how == "token":
            env["GWMS_TRACE_TOKEN"] = value
        else:
            env |= {"OTEL_EXPORTER_OTLP_HEADERS": value + ",X-Good=kept%20value", "GWMS_TRACE_TOKEN": "goodTok1"}
        run = glidein(tmp_path, client, env)
        assert thief.requests == []
        (req,) = col.requests
    assert not pwned.exists()
    assert run.returncode == 0 and run.get("result") == "sent", run.stderr
    assert not any(k.startswith("x-a") or k == "x-b" for k in req.headers)
    if how == "token":
        assert "authorization" not in req.headers
        assert "gwms-trace: GWMS_TRACE_TOKEN not sent: it has characters a bearer token cannot have" in run.stderr
    else:
        assert req.headers["authorization"] == "Bearer goodTok1" and req.headers["x-good"] == "kept value"
        assert "a header of OTEL_EXPORTER_OTLP_(TRACES_)HEADERS not sent" in run.stderr
    assert "steal" not in run.stderr and str(pwned) not in run.stderr
    only_the_spool(run)


def test_endpoint_that_is_not_a_url_is_not_a_command_line(tmp_path: Path) -> None:
    """An endpoint starting with '-' would be read as an option: refused, the spool framed."""
    run = glidein(tmp_path, "curl", {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"-o{tmp_path / 'pwned'}"})
    assert not (tmp_path / "pwned").exists() and "the endpoint is not an http(s) URL" in run.stderr
    framed(run)


# --- leak ----------------------------------------------------------------------------------------

TRACE_JWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4dHJhY2VKd3QifQ.c2lnWHRyYWNl"
CTL_TOKEN = "ctlXtraceTok7"


@pytest.mark.parametrize("client", ["curl", "wget"])
@pytest.mark.parametrize("source", ["file", "env"])
def test_xtrace_prints_no_token(tmp_path: Path, client: str, source: str) -> None:
    """Under the glidein's `set -x` neither token reaches stderr (job.C.P.err); xtrace is on again after."""
    (tmp_path / "work").mkdir()
    env = {"OPTS": "x"}
    if source == "file":
        (tmp_path / "work" / "gwms-trace.jwt").write_text(TRACE_JWT + "\n")
        (tmp_path / "ctl.tok").write_text(CTL_TOKEN + "\n")
        env["GWMS_TRACE_CONTROLLER_TOKEN_FILE"] = str(tmp_path / "ctl.tok")
    else:
        env |= {"GWMS_TRACE_TOKEN": TRACE_JWT, "GWMS_TRACE_CONTROLLER_TOKEN": CTL_TOKEN}
    with hostile("ok") as col, canned_controller(body=answer("commands")) as ctl:
        run = glidein(tmp_path, client, {**env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url,
                                         "GWMS_TRACE_CONTROLLER_URL": ctl.url})  # fmt: skip
        (req,) = col.requests
        (asked,) = ctl.requests
    assert run.returncode == 0 and run.get("result") == "sent", run.stderr[-3000:]
    assert req.headers["authorization"] == f"Bearer {TRACE_JWT}"
    assert asked.headers["authorization"] == f"Bearer {CTL_TOKEN}"
    for secret in (TRACE_JWT, "eyJzdWIiOiJ4dHJhY2VKd3QifQ", CTL_TOKEN):
        assert secret not in run.stderr
    assert "+ gwms_trace_flush 0" in run.stderr and "+ echo glidein-done" in run.stderr  # xtrace restored
    only_the_spool(run)


def test_allexport_exports_nothing_of_the_library(tmp_path: Path) -> None:
    """Under `set -a` no _gt_ variable, function or token reaches a child (the payload); set -a itself stays on."""
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "gwms-trace.jwt").write_text(TRACE_JWT + "\n")
    (tmp_path / "ctl.tok").write_text(CTL_TOKEN + "\n")
    with hostile("ok") as col, canned_controller(body=answer("commands")) as ctl:
        run = glidein(tmp_path, "curl", {"OPTS": "a", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": col.traces_url,
                                         "GWMS_TRACE_CONTROLLER_URL": ctl.url,
                                         "GWMS_TRACE_CONTROLLER_TOKEN_FILE": str(tmp_path / "ctl.tok"),
                                         "_gt_tok": "inherited"})  # fmt: skip
        assert col.requests[0].headers["authorization"] == f"Bearer {TRACE_JWT}"
    assert run.returncode == 0 and run.get("result") == "sent", run.stderr
    for which in ("child", "after"):
        env = run.env(which)
        ours = [k for k in env if k.startswith(("_gt", "BASH_FUNC__gt", "BASH_FUNC_gwms", "GWMS_TRACE_RESULT"))]
        assert ours == [], (which, ours)
        text = (run.out / f"env.{which}").read_text()
        assert TRACE_JWT not in text and CTL_TOKEN not in text
        assert env["TRACEPARENT"].startswith("00-")  # what the library exports on purpose, it still does
    assert run.env("after")["LATER"] == "set-after-flush"  # the caller's set -a is back on


# --- fill ----------------------------------------------------------------------------------------

SPANS = r"""
set -euo pipefail
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/spool.jsonl"
gwms_trace_phase setup
for ((i = 0; i < N; i++)); do
  gwms_trace_begin "main/s$i.sh" gwms.script=main/s$i.sh; gwms_trace_end 0   # inline on bash 5
  gwms_trace_begin "g$i" a=1 b=2; gwms_trace_end 1                          # the general code
done
gwms_trace_phase_end 0
echo "counted $_gt_bytes"
_gt_frame() { return 1; }
gwms_trace_flush 0
echo "counted $_gt_bytes"
"""


@pytest.mark.parametrize("mode", ["bash5", "bash4"])
def test_spool_byte_cap(tmp_path: Path, mode: str) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GWMS_TRACE_LIB": str(LIB), "N": "200",
           "GWMS_TRACE_MAX_BYTES": "60000", **({"GWMS_TRACE_COMPAT": "4"} if mode == "bash4" else {})}  # fmt: skip
    r = subprocess.run(["/bin/bash", "-c", SPANS], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                       check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = (tmp_path / "spool.jsonl").read_bytes()
    assert 40000 < len(data) <= 60000
    assert r.stdout.split() == ["counted", str(len(data) - len(data.splitlines()[-1]) - 1), "counted", str(len(data))]
    spans = spool_spans(data)
    root = spans[-1]
    assert root["name"] == "glidein"
    assert attrs(root["attributes"])[C.DROPPED_SPANS] == 402 - len(spans)  # 400 spans, the phase, the root
    # the spans kept are the first ones, in order
    assert [s["name"] for s in spans[:4]] == ["main/s0.sh", "g0", "main/s1.sh", "g1"]
    assert r.stderr.count("spool at its limit") == 1


def test_bad_byte_cap_is_the_default(tmp_path: Path) -> None:
    for v in ("0", "-5", "abc", "100"):
        r = subprocess.run(["/bin/bash", "-c", 'source "$L"; gwms_trace_init "$PWD/s"; echo "cap $_gt_bcap"'],
                           cwd=tmp_path, env={"L": str(LIB), "GWMS_TRACE_MAX_BYTES": v, "PATH": "/usr/bin:/bin"},
                           capture_output=True, text=True, check=True)  # fmt: skip
        assert r.stdout == "cap 8388608\n" and "GWMS_TRACE_MAX_BYTES is not a number of bytes" in r.stderr


# The glidein in a 64 KiB work dir (a tmpfs in a mount namespace of its own): it traces more than fits, then
# writes 40 KiB of its own.
SMALL_DIR = r"""
set -euo pipefail
mount -t tmpfs -o size=64k gwms-trace-test "$WORK"
cd "$WORK"
source "$GWMS_TRACE_LIB"
gwms_trace_init "$PWD/gwms-trace.spool.jsonl"
gwms_trace_phase setup
for ((i = 0; i < 400; i++)); do gwms_trace_script "main/s$i.sh" true; done
gwms_trace_phase_end 0
rc=0
head -c 40960 /dev/zero >"$WORK/glidein-own.bin" || rc=$?
gwms_trace_flush "$rc"
echo "write_rc $rc result $GWMS_TRACE_RESULT"
exit "$rc"
"""


@pytest.mark.parametrize("trace", ["1", "0"])
def test_small_work_dir_keeps_room_for_the_glidein(tmp_path: Path, trace: str) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None
    work = tmp_path / "work"
    work.mkdir()
    ns = [unshare, "--mount"] if os.geteuid() == 0 else [unshare, "--map-root-user", "--mount"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GWMS_TRACE_LIB": str(LIB), "WORK": str(work),
           "GWMS_TRACE": trace}  # fmt: skip
    r = subprocess.run([*ns, "/bin/bash", "-c", SMALL_DIR], env=env, capture_output=True, timeout=60, check=False)
    if r.returncode != 0 and b"mount" in r.stderr and b"ermission" in r.stderr:
        pytest.skip(f"no mount namespace here: {r.stderr.decode()[-200:]}")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    if trace == "0":
        assert r.stdout.decode().strip() == "write_rc 0 result off"
        return
    assert r.stdout.decode().strip() == "write_rc 0 result stderr"
    spool = parse_err(r.stderr, "e", ParseErrors()).trace_spool
    assert spool is not None and len(spool) <= 16 << 10  # a quarter of the 64 KiB free at init
    spans = spool_spans(spool)
    assert spans[-1]["name"] == "glidein" and attrs(spans[-1]["attributes"])[C.DROPPED_SPANS] > 0
