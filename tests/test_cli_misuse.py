"""Every misuse of the gwms-obs command gets one clear line on stderr and a non-zero exit, never a traceback.

Exit codes: 2 for usage and configuration errors, 1 for runtime failures
(check-config reports a bad file with 1, its documented "FAILED" status).
Each case runs the real command in a subprocess, as an operator would.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gwms_obs.cli import parser
from gwms_obs.ingest import checkpoint
from gwms_obs.simulate.factory import simulate
from tests.support.servers import free_port


def gwms_obs(
    *args: str, env: Mapping[str, str] | None = None, prefix: tuple[str, ...] = ("-m", "gwms_obs.cli"), **kw: object
) -> subprocess.CompletedProcess[str]:
    # No OTLP endpoint or log level from the caller's environment: they would add lines to stderr.
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "GWMS_OBS_"))}
    if "stdout" not in kw:
        kw["capture_output"] = True
    kw.setdefault("timeout", 120)
    return subprocess.run(
        [sys.executable, *prefix, *args],
        text=True,
        check=False,
        env={**base, **(env or {})},
        **kw,  # type: ignore[call-overload]
    )


def one_line(r: subprocess.CompletedProcess[str], rc: int, *needles: str) -> str:
    """The single stderr line of a refused command, having checked its exit code and text."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == rc, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def argparse_error(r: subprocess.CompletedProcess[str], *needles: str) -> str:
    """argparse's usage and its one "error:" line, exit 2."""
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode == 2, (r.returncode, r.stderr)
    (line,) = [x for x in r.stderr.splitlines() if "error:" in x]
    for n in needles:
        assert n in line, (n, line)
    return line


@pytest.fixture(scope="module")
def factory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("factory")
    simulate(out, 40, seed=3)
    return out


def export_once(factory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return gwms_obs(
        "export", "--factory-dir", str(factory), "--listen", f"127.0.0.1:{free_port()}", "--once",
        "--settle-seconds", "0", *args,
    )  # fmt: skip


# --- 1. the factory dir --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["missing", "file", "not-a-factory"])
def test_report_and_export_refuse_what_is_not_a_factory(kind: str, tmp_path: Path) -> None:
    d = tmp_path / "factory"
    if kind == "file":
        d.write_text("not a directory\n")
    elif kind == "not-a-factory":
        (d / "logs").mkdir(parents=True)
    what = {"missing": "does not exist", "file": "is not a directory", "not-a-factory": "neither client/ nor server/"}
    one_line(gwms_obs("report", "--factory-dir", str(d)), 2, "--factory-dir", str(d), what[kind])
    # --once refuses what the daemon waits for (tests/test_export_daemon.py): one scan of no factory is a mistake.
    one_line(gwms_obs("export", "--factory-dir", str(d), "--once"), 2, "factory_dir", str(d), what[kind])


def test_report_refuses_a_missing_monitor_dir(factory: Path, tmp_path: Path) -> None:
    r = gwms_obs("report", "--factory-dir", str(factory), "--monitor-dir", str(tmp_path / "nope"))
    one_line(r, 2, "--monitor-dir", str(tmp_path / "nope"), "does not exist")


def test_report_of_a_factory_with_nothing_in_range_is_fine(factory: Path) -> None:
    r = gwms_obs("report", "--factory-dir", str(factory), "--since", "2030-01-01")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "no pilots in range"


# --- 2. checkpoints ------------------------------------------------------------------------------
def test_checkpoint_of_another_factory_is_refused_until_reset(factory: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    simulate(other, 10, seed=4)
    ck = tmp_path / "ck.json"
    assert export_once(factory, "--checkpoint", str(ck)).returncode == 0
    line = one_line(export_once(other, "--checkpoint", str(ck)), 2, str(ck), str(factory), str(other))
    assert "--reset-checkpoint" in line
    r = export_once(other, "--checkpoint", str(ck), "--reset-checkpoint")
    assert r.returncode == 0, r.stderr
    assert json.loads(ck.read_text())["factory_dir"] == str(other)
    assert export_once(other, "--checkpoint", str(ck)).returncode == 0  # now it is other's


@pytest.mark.parametrize(
    ("content", "what"),
    [
        ("{not json", "unreadable"),
        ('{"version": 99}', "version 99"),
        ('{"version": VERSION, "factory_dir": "FACTORY", "seen": [1, 2]}', "wrong shape"),
    ],
)
def test_bad_checkpoint_is_one_line(factory: Path, tmp_path: Path, content: str, what: str) -> None:
    ck = tmp_path / "ck.json"
    ck.write_text(content.replace("FACTORY", str(factory)).replace("VERSION", str(checkpoint.VERSION)))
    one_line(export_once(factory, "--checkpoint", str(ck)), 2, str(ck), what)
    assert export_once(factory, "--checkpoint", str(ck), "--reset-checkpoint").returncode == 0


# --- 3. --listen ---------------------------------------------------------------------------------
def test_listen_port_in_use(factory: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        addr = f"127.0.0.1:{s.getsockname()[1]}"
        # The daemon (--once binds no port): it exits at once, so the timeout is only a guard.
        r = gwms_obs("export", "--factory-dir", str(factory), "--listen", addr, timeout=60)
    one_line(r, 2, f"cannot listen on {addr}", "in use")


@pytest.mark.parametrize("listen", ["9822", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http"])
def test_listen_must_be_host_port(factory: Path, listen: str) -> None:
    r = gwms_obs("export", "--factory-dir", str(factory), "--listen", listen, "--once")
    one_line(r, 2, "HOST:PORT", repr(listen))


# --- 4. log level --------------------------------------------------------------------------------
def test_bad_log_level_flag_and_env(factory: Path) -> None:
    levels = "DEBUG, INFO, WARNING, ERROR, CRITICAL"
    argparse_error(gwms_obs("--log-level", "verbose", "inspect", "x.out"), "--log-level", "'verbose'", levels)
    r = gwms_obs("inspect", "x.out", env={"GWMS_OBS_LOG_LEVEL": "loud"})
    argparse_error(r, "$GWMS_OBS_LOG_LEVEL", "'loud'", levels)
    r = gwms_obs("report", "--factory-dir", str(factory), "--since", "2030-01-01", env={"GWMS_OBS_LOG_LEVEL": "debug"})
    assert r.returncode == 0, r.stderr  # any case


# --- 5. a config file that is not UTF-8 ---------------------------------------------------------
def test_config_not_utf8(tmp_path: Path) -> None:
    cfg = tmp_path / "f.toml"
    cfg.write_bytes(b'factory_dir = "/var/log/gwms-f\xe4ctory"\n')
    one_line(gwms_obs("check-config", str(cfg)), 1, f"FAILED: {cfg}: not UTF-8")
    one_line(gwms_obs("export", "--config", str(cfg), "--once"), 2, str(cfg), "not UTF-8")


# --- 6. inspect: a closed pipe, a missing file ---------------------------------------------------
def test_inspect_into_a_closed_pipe(factory: Path) -> None:
    out = next(iter(sorted(factory.glob("client/*/*/entry_*/job.*.out"))))
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # as `| head -1` once head has gone: every write fails with EPIPE
    try:
        r = gwms_obs("inspect", str(out), stdout=w_fd, stderr=subprocess.PIPE)
    finally:
        os.close(w_fd)
    assert r.returncode == 141, r.stderr
    assert r.stderr == ""  # not even "Exception ignored ... BrokenPipeError" at exit


def test_inspect_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "job.1.0.out"
    one_line(gwms_obs("inspect", str(missing)), 1, str(missing), "No such file")


# --- 7. check-config: types and values of every key ----------------------------------------------
BAD_VALUES = [
    ("interval = nan", "interval must be a finite number"),
    ("interval = inf", "interval must be a finite number"),
    ("interval = 0", "interval must be a finite number of seconds > 0"),
    ("interval = -1", "interval must be a finite number of seconds > 0"),
    ("interval = true", "interval must be a number"),
    ('interval = "60"', "interval must be a number"),
    ("settle_seconds = -1", "settle_seconds must be a finite number of seconds >= 0"),
    ("settle_seconds = nan", "settle_seconds must be a finite number"),
    ("lost_after_seconds = inf", "lost_after_seconds must be a finite number"),
    ('listen = "9822"', "HOST:PORT"),
    ('listen = "127.0.0.1:0"', "HOST:PORT"),
    ('listen = "127.0.0.1:65536"', "HOST:PORT"),
    ("listen = 9822", "listen must be a string"),
    ('factory_dir = ""', "factory_dir must be a non-empty string"),
    ('monitor_dir = ""', "monitor_dir must be a non-empty string"),
    ('checkpoint = ""', "checkpoint must be a non-empty string"),
    ("checkpoint = 1", "checkpoint must be a string"),
    ("rules = 3", "[rules] must be a table"),
    ("[rules]\ngrace_seconds = true", "rules.grace_seconds must be a number"),
    ('[rules]\ngrace_seconds = "60"', "rules.grace_seconds must be a number"),
    ("[rules]\nearly_failure_seconds = -5", "rules.early_failure_seconds must be a finite number of seconds >= 0"),
    ("[rules]\ngrace_seconds = nan", "rules.grace_seconds must be a finite number"),
]


def _check_configs(tmp_path: Path, factory: Path, cases: list[tuple[str, str]], *flags: str) -> None:
    """check-config on one file per case (in parallel: each is a Python start-up)."""
    files = []
    for n, (text, _) in enumerate(cases):
        f = tmp_path / f"bad{n}.toml"
        # A valid factory_dir first unless the case sets it, so only the bad value fails.
        head = "" if text.startswith("factory_dir") else f'factory_dir = "{factory}"\n'
        f.write_text(head + text + "\n")
        files.append(f)
    with ThreadPoolExecutor(8) as pool:
        runs = list(pool.map(lambda f: gwms_obs("check-config", *flags, str(f)), files))
    for f, (text, what), r in zip(files, cases, runs, strict=True):
        assert r.returncode == 1, (text, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        assert f"FAILED: {f}: " in r.stderr and what in r.stderr, (text, r.stderr)


@pytest.mark.parametrize("flags", [(), ("--syntax-only",)], ids=["full", "syntax-only"])
def test_check_config_rejects_bad_values(tmp_path: Path, factory: Path, flags: tuple[str, ...]) -> None:
    _check_configs(tmp_path, factory, BAD_VALUES, *flags)


def test_check_config_filesystem_checks_and_syntax_only(tmp_path: Path, factory: Path) -> None:
    (tmp_path / "plain").mkdir()
    cases = [
        (f'factory_dir = "{tmp_path}/nope"', "does not exist"),
        (f'factory_dir = "{tmp_path}/plain"', "not a GlideinWMS factory log dir"),
        (f'factory_dir = "{factory}"\nmonitor_dir = "{tmp_path}/nope"', "monitor_dir"),
        (f'factory_dir = "{factory}"\ncheckpoint = "{tmp_path}/nope/ck.json"', "not writable"),
        (f'factory_dir = "{factory}"\ncheckpoint = "{tmp_path}"', "is a directory"),
    ]
    _check_configs(tmp_path, factory, cases)
    # --syntax-only skips exactly these, and nothing else.
    for n in range(len(cases)):
        r = gwms_obs("check-config", "--syntax-only", str(tmp_path / f"bad{n}.toml"))
        assert r.returncode == 0 and "SUCCESS" in r.stdout, r.stderr


def test_export_checks_values_as_check_config_does(tmp_path: Path, factory: Path) -> None:
    cfg = tmp_path / "f.toml"
    cfg.write_text(f'factory_dir = "{factory}"\ninterval = nan\n')  # busy-looped once
    one_line(gwms_obs("export", "--config", str(cfg)), 2, "interval must be a finite number")


# --- 8. --plot -----------------------------------------------------------------------------------
def test_plot_without_matplotlib_fails_before_the_table(factory: Path, tmp_path: Path) -> None:
    fake = tmp_path / "site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named matplotlib (test)")\n')
    png = tmp_path / "acc.png"
    r = gwms_obs("report", "--factory-dir", str(factory), "--plot", str(png), env={"PYTHONPATH": str(fake.parent)})
    one_line(r, 2, "--plot", "matplotlib", "pip install 'gwms-obs[plot]'")
    assert r.stdout == ""
    assert not png.exists()


def test_plot_of_an_empty_report_writes_nothing(factory: Path, tmp_path: Path) -> None:
    png = tmp_path / "acc.png"
    r = gwms_obs("report", "--factory-dir", str(factory), "--since", "2030-01-01", "--plot", str(png))
    assert r.returncode == 0, r.stderr
    assert "no pilots in range" in r.stdout
    one_line(r, 0, "nothing to plot", str(png))
    assert not png.exists()


def test_report_output_into_a_missing_dir(factory: Path, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "r.csv"
    one_line(gwms_obs("report", "--factory-dir", str(factory), "-o", str(out)), 1, f"cannot write {out}")


# --- 9, 10. export's scan line and --once's exit code ---------------------------------------------
def test_scan_line_names_sources_plainly(factory: Path) -> None:
    r = export_once(factory)
    assert r.returncode == 0, r.stderr
    (line,) = [x for x in r.stderr.splitlines() if "scan:" in x]
    assert re.search(r"scan: \d+ pilots \([a-z_]+ \d+(, [a-z_]+ \d+)*\)$", line), line
    assert "Source." not in line


def test_export_once_exits_1_when_the_scan_fails(factory: Path) -> None:
    # A fault injected into the real command: no factory layout makes a scan raise on purpose.
    boom = (
        "import sys, gwms_obs.pipeline as p\n"
        "def scan(self): raise RuntimeError('disk on fire')\n"
        "p.Ingest.scan = scan\n"
        "from gwms_obs.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    r = gwms_obs("export", "--factory-dir", str(factory), "--listen", f"127.0.0.1:{free_port()}", "--once",
                 prefix=("-c", boom))  # fmt: skip
    lines = [x for x in r.stderr.splitlines() if "ERROR" in x]
    assert r.returncode == 1, r.stderr
    assert "Traceback" not in r.stderr
    assert len(lines) == 1 and "scan failed: RuntimeError: disk on fire" in lines[0], r.stderr


# --- 11. --help ----------------------------------------------------------------------------------
def test_every_flag_has_help_and_every_command_an_example() -> None:
    import argparse

    p = parser()
    (sub,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    parsers = {"gwms-obs": p, **sub.choices}
    for name, sp in parsers.items():
        for a in sp._actions:
            if isinstance(a, argparse._SubParsersAction):
                assert all(c.help for c in a._choices_actions)
                continue
            assert a.help and a.help != argparse.SUPPRESS, (name, a.option_strings or a.dest)
    for name in sub.choices:
        r = gwms_obs(name, "--help")
        assert r.returncode == 0, r.stderr
        assert f"example:\n  gwms-obs {name} " in r.stdout, r.stdout


# --- 12. times and numbers -----------------------------------------------------------------------
@pytest.mark.parametrize(("since", "until"), [("2026-11-08", "2026-11-01"), ("2026-11-01", "2026-11-01")])
def test_report_since_not_before_until(factory: Path, since: str, until: str) -> None:
    r = gwms_obs("report", "--factory-dir", str(factory), "--since", since, "--until", until)
    one_line(r, 2, "--since", "is not before --until", since)


@pytest.mark.parametrize(
    "args",
    [
        ("export", "--interval", "-5"),
        ("export", "--interval", "0"),
        ("export", "--interval", "nan"),
        ("export", "--settle-seconds", "inf"),
        ("export", "--lost-after-seconds", "-1"),
        ("export", "--traces-drain-seconds", "-1"),
        ("report", "--factory-dir", ".", "--lost-after-seconds", "-1"),
        ("report", "--factory-dir", ".", "--since", "nan"),
        ("simulate", "--out", ".", "--pilots", "0"),
        ("traces", "--limit", "-3"),
    ],
    ids=" ".join,
)
def test_bad_numbers_are_argparse_errors(args: tuple[str, ...]) -> None:
    flag = next(a for a in reversed(args) if a.startswith("--"))
    argparse_error(gwms_obs(*args), f"argument {flag}")
