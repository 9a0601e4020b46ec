"""gwms-trace.sh's inline span begin and end (bash 5) write what its general code writes.

gwms_trace_begin and gwms_trace_end handle their common case inline, for speed
(benchmarks/trace_shell.py); every other case goes to _gt_push/_gt_pop,
which also serve the bash-4 fallback. The same script is run on the bash-5 path and
forced onto the fallback (GWMS_TRACE_COMPAT=4, where nothing is inlined, and with
EPOCHREALTIME and SRANDOM unset before the library is sourced, which then defines
gwms_trace_begin/end as on bash 4); after
the ids and times, which differ by nature, are replaced by their order of first
appearance, the spools and the variables the library sets must be byte-identical.
The names and values include every shape the inline test must hand to the general
code (secrets, characters to escape, bytes outside ASCII, over-long text).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support.trace_pilot import LIB, MODES

# Names and values for `gwms_trace_begin NAME gwms.script=VALUE`, one per line in a file (no NUL, no newline).
TEXTS = [
    "main/setup_script.sh",
    "UPPER case-Name_1.2 /x",
    "",
    'q"uote',
    "back\\slash",
    "tab\there",
    "cr\rhere",
    "colon:at@plus+eq=pct%comma,",
    # each a secret shape with one keyword of the inline test, and no character outside its set
    "run --token abc1",
    "run --passwd abc1",
    "run --pwd abc1",
    "run --secret abc1",
    "run --apikey abc1",
    "a eyJabcd.efgh.ij b",
    "bearer abc1",
    "-----begin x----- y",
    "AKIAZZZZZZZZZZZZZZZZ",
    "ASIAZZZZZZZZZZZZZZZZ",
    "ghp_" + "a" * 36,
    "/tmp/x509up_u4242",
    "curl -H Authorization: Bearer BearerTokSecret01",
    "BEARER XyzUpperMark5",
    "run.sh --token TokCli123Secret",
    "password=hunter2Secret",
    "pwd=abc1",  # one "=", a keyword only before it
    "pwd is PwdSecretGwms1",
    "-----BEGIN RSA PRIVATE----- x",
    "-----begin rsa private----- LowerPemMark6",
    "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJKd3RTZWNyZXRTdWIifQ.U2ln",
    "AKIAZZZZSECRET123456",
    "/DC=org/DC=cilogon/C=US/O=Fermilab/CN=Secret Person",
    "/C=US/O=Fermilab",
    "CN=a,OU=b",
    "https://u:UrlPassSecret9@h/x",
    "my secret key",
    "sEcReT",
    "\u00e9t\u00e9 \u00fc",  # UTF-8 letters
    "\u212a",  # KELVIN SIGN, which lower-cases to an ASCII k
    "to\u212aen",
    "\u0130D",  # I WITH DOT ABOVE
    "\u0131",  # DOTLESS I
    "x" * 62,  # with itself, 125 characters: still the inline case
    "y" * 64,  # 129: the inline test's length bound
    "n" * 300,
    "v" * 1500,
]

SCRIPT = r"""
set -euo pipefail
PRELUDE
source "$GWMS_TRACE_LIB"
show() {
  echo "[$1] TP=${TRACEPARENT-unset} SID=${GWMS_TRACE_SPAN_ID-} PILOT=${GWMS_PILOT_TRACEPARENT-} TS=${TRACESTATE-unset}"
}
gwms_trace_init "$PWD/spool.jsonl"
gwms_trace_resource gwms.glidein.uuid u-1
gwms_trace_phase setup
show phase
gwms_trace_begin a.sh gwms.script=a.sh
show begin
gwms_trace_end 0
show end
while IFS= read -r t; do
  gwms_trace_begin "$t" gwms.script="$t"
  gwms_trace_end 0
  gwms_trace_begin "$t" "gwms.script=$t"   # now the key is the last one: the inline case when $t allows
  gwms_trace_begin "in $t"
  show nested
  gwms_trace_end 0
  gwms_trace_end 0
  gwms_trace_begin plain "gwms.script=$t"; gwms_trace_end 0   # each of the two hostile alone
  gwms_trace_begin "$t" gwms.script=plain; gwms_trace_end 0
done <texts
gwms_trace_begin ""; gwms_trace_end 0
gwms_trace_begin; gwms_trace_end
gwms_trace_begin novalue novalue; gwms_trace_end 0
gwms_trace_begin empty gwms.script=; gwms_trace_end 0
gwms_trace_begin eq =v; gwms_trace_end 0
gwms_trace_begin two a=1 b=2; gwms_trace_end 0
gwms_trace_begin k1 other.key=v; gwms_trace_end 0
gwms_trace_begin k2 other.key=v2; gwms_trace_end 0
gwms_trace_begin s1 my.token=abc; gwms_trace_end 0
gwms_trace_begin s2 my.token=abc; gwms_trace_end 0
gwms_trace_attr a=b v
gwms_trace_begin k3 a=b=c; gwms_trace_end 0
gwms_trace_begin fail gwms.script=f; gwms_trace_end 3
gwms_trace_begin fail2 gwms.script=f; gwms_trace_end 4 "custom message"
gwms_trace_begin fail3 gwms.script=f; gwms_trace_end notanumber
gwms_trace_begin attrs gwms.script=f
gwms_trace_attr -i n 5
gwms_trace_attr s str
gwms_trace_end 0
gwms_trace_begin events gwms.script=f
gwms_trace_event ev1 k=v
gwms_trace_end 0
gwms_trace_begin after-events gwms.script=f; gwms_trace_end 0
gwms_trace_begin links gwms.script=f
gwms_trace_link "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" k=1
gwms_trace_begin child gwms.script=f
gwms_trace_event inner
gwms_trace_end 0
gwms_trace_end 0
gwms_trace_begin after-links gwms.script=f; gwms_trace_end 0
gwms_trace_end 0   # the phase
show phase-ended
gwms_trace_begin under-root gwms.script=r; gwms_trace_end 0
gwms_trace_phase main
gwms_trace_script main/x.sh true
gwms_trace_script main/y.sh false || true
gwms_trace_begin open1 gwms.script=o
gwms_trace_begin open2 gwms.script=o
gwms_trace_phase last
for ((i = 0; i < 12; i++)); do gwms_trace_begin "c$i" gwms.script=c; gwms_trace_end 0; done
gwms_trace_begin left-open gwms.script=l
show before-flush
_gt_frame() { return 1; }
gwms_trace_flush "${RC:-0}"
show flush
echo "result=$GWMS_TRACE_RESULT spans=$_gt_spans dropped=$_gt_dropped"
"""

# How each run reaches the library's paths: environment, and what the script does before sourcing it.
PATHS: dict[str, tuple[dict[str, str], str]] = {
    "bash5": (MODES["bash5"], ""),
    "bash4-uptime": (MODES["bash4-uptime"], ""),
    "bash4-functions": ({}, "unset EPOCHREALTIME SRANDOM"),
}

VARIANTS = {
    "new-trace": {},
    "factory-parent": {
        "TRACEPARENT": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "TRACESTATE": "vendor=abc,x=y",
    },
    "scripts-level": {"GWMS_TRACE_VERBOSITY": "scripts"},
    "span-cap": {"GWMS_TRACE_MAX_SPANS": "150", "RC": "7"},
}

_ID = re.compile(r"(?<![0-9a-f])(?:[0-9a-f]{32}|[0-9a-f]{16})(?![0-9a-f])")
_TIME = re.compile(r"(?<![0-9])1[0-9]{18}(?![0-9])")  # Unix nanoseconds
_PID = re.compile(r'("process\.pid","value":\{"intValue":")[0-9]+')


def normalized(text: str) -> str:
    """Ids by their order of first appearance, times and the pid by a placeholder."""
    seen: dict[str, str] = {}
    text = _ID.sub(lambda m: seen.setdefault(m[0], f"<id{len(seen)}>"), text)
    return _PID.sub(r"\1<pid>", _TIME.sub("<t>", text))


def run(tmp: Path, path: str, variant: str) -> str:
    work = tmp / f"{path}-{variant}"
    work.mkdir()
    (work / "texts").write_text("".join(t + "\n" for t in TEXTS), encoding="utf-8")
    mode_env, prelude = PATHS[path]
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "GWMS_TRACE_LIB": str(LIB), **mode_env, **VARIANTS[variant]}
    script = SCRIPT.replace("PRELUDE", prelude)
    r = subprocess.run(["/bin/bash", "-c", script], cwd=work, env=env, capture_output=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    assert all(ln.startswith(b"gwms-trace: spans kept in ") for ln in r.stderr.splitlines()), r.stderr  # no shell error
    spool = (work / "spool.jsonl").read_bytes()
    assert spool.count(b"\n") > 2 * len(TEXTS)  # the texts reached the spool (5 or 6 spans each)
    return normalized(spool.decode("utf-8") + r.stdout.decode("utf-8"))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_inline_path_writes_what_the_general_code_writes(tmp_path: Path, variant: str) -> None:
    bash5 = run(tmp_path, "bash5", variant)
    assert bash5 == run(tmp_path, "bash4-uptime", variant)
    assert bash5 == run(tmp_path, "bash4-functions", variant)


def test_plain_spans_take_the_inline_path(tmp_path: Path) -> None:
    """Without this, the comparison above could pass with the inline code never running."""
    script = r"""
PRELUDE
source "$GWMS_TRACE_LIB"
for f in _gt_push _gt_pop; do   # count the calls of the general code
  eval "_orig$f() $(declare -f "$f" | tail -n +2)"
  eval "$f() { ((++calls)); _orig$f \"\$@\"; }"
done
gwms_trace_init "$PWD/s.jsonl"
gwms_trace_phase setup
gwms_trace_begin first gwms.script=first; gwms_trace_end 0   # a new key, and the resource's first write
calls=0
for ((i = 0; i < 20; i++)); do
  gwms_trace_script "main/s$i.sh" true
  gwms_trace_begin "attr$i" gwms.script=a
  gwms_trace_attr process.executable.name true   # another key in between, as with a controller's answer
  gwms_trace_end 0
done
echo "$calls"
"""
    counts = {}
    for path, (mode_env, prelude) in PATHS.items():
        r = subprocess.run(
            ["/bin/bash", "-c", script.replace("PRELUDE", prelude)],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "GWMS_TRACE_LIB": str(LIB), **mode_env},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        counts[path] = int(r.stdout)
    assert counts == {"bash5": 0, "bash4-uptime": 80, "bash4-functions": 80}
