"""Per-pilot cost of GlideinWMS's own log extractor against ours, same files, same run.

    mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD | tar -x -C /tmp/glideinwms
    .venv/bin/python benchmarks/peer_glideinwms.py --glideinwms /tmp/glideinwms [--pilots 2000] [--seed 7]
        [--repeat 7] [--real-loops 500] [--python-only] [--glideinwms-version TEXT] [--record]

(``GLIDEINWMS_SRC=/tmp/glideinwms`` may stand for ``--glideinwms``.) The GlideinWMS
checkout is imported at run time, unmodified, through a temporary directory in
which ``glideinwms`` is a symlink to it; a third-party module it imports that is
not installed is replaced by an empty stub (listed in the output). Nothing of
GlideinWMS is copied into this repository.

Compared, per pilot:

* ``.out`` only: GlideinWMS ``glideFactoryLogParser._extract_log_data(out)``
  (mmap + regexes: durations, slot stats) against our ``read_out(out)``;
* ``.out`` + ``.err``: GlideinWMS ``_extract_log_data(out)`` plus
  ``gWftLogParser.get_condor_log(err, "StartdHistoryLog")`` (its wrapper of
  ``get_compressed``: base64 + gunzip of the StartdHistoryLog text, no job
  decoding; ``get_compressed(err, "StartdHistoryLog")`` itself finds nothing,
  the section name being followed by a "======== gzip | uuencode" line)
  against our ``read_out(out)`` plus ``read_err(err, detail=False)``, which
  decodes every job of that history into ``Job`` objects (checked: a file with
  a history must give a non-empty jobs list).

File sets: a simulated factory (``gwms-obs simulate``, cached under
benchmarks/work/), its ``client/**/job.*.out`` and their ``.err``; and the real
production .out from shared/reference (``.out`` only, read --real-loops times
per pass: there is one such file and no real .err).

Method: the files are read once (page cache warm) and both sides run once
untimed, their values compared field by field; then for each of --repeat
passes both sides are timed over all files of a set, in the same process,
alternating which goes first. Per-pilot µs: min and median over the passes.

``--python-only`` sets GWMS_OBS_NATIVE=0 before gwms_obs is imported, so that
our pure-Python readers are measured even where a compiled fast path exists.
``--record`` writes benchmarks/results/peer-glideinwms.md; a hand-written
"## Analysis" section there survives re-recording.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import record
from tools import glideinwms_checkout

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "work"
RESULTS = HERE / "results" / "peer-glideinwms.md"
REAL_OUT = HERE.parents[1] / "shared" / "reference" / "glideinwms" / "glideFactoryLogParser_glidein_stdout.out"
HISTORY = "StartdHistoryLog"
# Files whose presence says "this is a GlideinWMS source tree".
GWMS_MARKERS = ("factory/glideFactoryLogParser.py", "factory/tools/lib/gWftLogParser.py", "lib/condorLogParser.py")


# ---------------------------------------------------------------- GlideinWMS


class _Stub(types.ModuleType):
    """Stand-in for a missing third-party module: every attribute is another stub."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        sub = _Stub(f"{self.__name__}.{name}")
        setattr(self, name, sub)
        return sub

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self


def gwms_dir(arg: str | None) -> Path:
    src = arg or os.environ.get("GLIDEINWMS_SRC")
    if not src:
        sys.stderr.write(
            "peer_glideinwms: no GlideinWMS source given: pass --glideinwms DIR or set GLIDEINWMS_SRC\n"
            "  (a checkout: mkdir -p /tmp/glideinwms && git --git-dir=<glideinwms.git> archive HEAD"
            " | tar -x -C /tmp/glideinwms)\n"
        )
        raise SystemExit(2)
    d = Path(src).expanduser().resolve()
    missing = [m for m in GWMS_MARKERS if not (d / m).is_file()]
    if missing:
        sys.stderr.write(
            f"peer_glideinwms: {d} does not look like a GlideinWMS source tree (missing {', '.join(missing)})\n"
        )
        raise SystemExit(2)
    return d


def gwms_version(d: Path, given: str | None) -> str:
    """Which GlideinWMS: as given, else its git commit, else what the tree says."""
    if given:
        return given
    try:
        head = subprocess.run(
            ["git", "-C", str(d), "rev-parse", "--show-toplevel", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.split()
        if len(head) == 2 and Path(head[0]).resolve() == d:
            desc = subprocess.run(
                ["git", "-C", str(d), "describe", "--tags", "--always"], check=False, capture_output=True, text=True
            ).stdout.strip()
            return f"git {head[1]}" + (f" ({desc})" if desc else "")
    except (OSError, subprocess.CalledProcessError):
        pass
    version_py = d / "version.py"  # written by setuptools_scm in a built tree
    if version_py.is_file():
        for line in version_py.read_text(errors="replace").splitlines():
            if line.startswith(("__version__", "version")) and "=" in line:
                return "version.py " + line.split("=", 1)[1].strip().strip("'\"")
    changelog = d / "CHANGELOG.md"
    if changelog.is_file():
        for line in changelog.read_text(errors="replace").splitlines():
            if line.startswith("## v"):
                return f"unknown commit; newest release in its CHANGELOG: {line[3:].split()[0]}"
    return "unknown (pass --glideinwms-version)"


def import_gwms(d: Path) -> tuple[types.ModuleType, types.ModuleType, list[str]]:
    """glideFactoryLogParser and gWftLogParser from the checkout, stubbing missing third-party modules."""
    glideinwms_checkout.importable(d, "gwms-peer-")
    stubbed: list[str] = []
    for _ in range(50):
        try:
            parser = importlib.import_module("glideinwms.factory.glideFactoryLogParser")
            wft = importlib.import_module("glideinwms.factory.tools.lib.gWftLogParser")
            break
        except ModuleNotFoundError as e:
            name = e.name or ""
            if not name or name.split(".")[0] == "glideinwms" or name in sys.modules:
                raise
            for mod in [m for m in sys.modules if m == "glideinwms" or m.startswith("glideinwms.")]:
                del sys.modules[mod]
            parts = name.split(".")
            for i in range(1, len(parts) + 1):
                sys.modules.setdefault(".".join(parts[:i]), _Stub(".".join(parts[:i])))
            stubbed.append(name)
    else:
        raise SystemExit("peer_glideinwms: could not import GlideinWMS (too many missing modules)")
    where = Path(parser.__file__ or "").resolve()
    if d not in where.parents:
        raise SystemExit(f"peer_glideinwms: glideinwms resolved to {where}, not to {d}")
    return parser, wft, stubbed


# ---------------------------------------------------------------- files


def factory(pilots: int, seed: int) -> Path:
    d = WORK / f"peer-factory-{pilots}-{seed}"
    if not (d / ".done").exists():
        print(f"simulating {pilots} pilots into {d} (cached for later runs)...", flush=True)
        exe = Path(sys.executable).with_name("gwms-obs")
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gwms_obs.cli"]
        subprocess.run([*cmd, "simulate", "--out", str(d), "--pilots", str(pilots), "--seed", str(seed)], check=True)
        (d / ".done").write_text("ok\n")
    return d


def warm(paths: Sequence[str]) -> int:
    n = 0
    for p in set(paths):
        with open(p, "rb") as f:
            n += len(f.read())
    return n


# ---------------------------------------------------------------- timing


def timed(fn: Callable[[], object]) -> float:
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def interleaved(ours: Callable[[], object], peer: Callable[[], object], repeat: int) -> tuple[list[float], list[float]]:
    t_ours: list[float] = []
    t_peer: list[float] = []
    for r in range(repeat):
        if r % 2 == 0:
            t_ours.append(timed(ours))
            t_peer.append(timed(peer))
        else:
            t_peer.append(timed(peer))
            t_ours.append(timed(ours))
    return t_ours, t_peer


def ratio_words(peer: float, ours: float) -> str:
    if ours <= peer:
        return f"ours is {peer / ours:.2f}× faster"
    return f"ours is {ours / peer:.2f}× slower"


# ---------------------------------------------------------------- comparison


def _peer_total(ours: Any) -> Any:
    """What the peer's "Total" is in our terms: it keeps the first Total line, the (Real) one when present."""
    return ours.stats_real_total if ours.stats_real_total is not None else ours.stats.get("Total")


def _rel(path: str) -> str:
    try:
        return os.path.relpath(path, ROOT)
    except ValueError:
        return path


def compare_out(path: str, peer: dict[str, Any], ours: Any, diffs: dict[str, list[str]]) -> None:
    def diff(field: str, p: object, o: object) -> None:
        if p != o:
            diffs.setdefault(field, []).append(f"{_rel(path)}: GlideinWMS {p!r}, ours {o!r}")

    if ours is None:
        diff("read_out returned None", peer, None)
        return
    diff("condor_started", bool(peer.get("condor_started")), ours.condor_started)
    for key in ("validation_duration", "condor_duration", "glidein_duration", "activations_claims"):
        diff(key, peer.get(key), getattr(ours, key))
    if "stats" in peer:
        theirs = {k: (v["jobsnr"], v["secs"]) for k, v in peer["stats"].items()}
        mine = {k: (v.jobsnr, v.secs) for k, v in ours.stats.items() if k != "Total"}
        total = _peer_total(ours)
        if total is not None:
            mine["Total"] = (total.jobsnr, total.secs)
        diff("stats", theirs, mine)


def history_ads(text: str) -> int:
    return sum(1 for line in text.splitlines() if line.startswith("*** "))


# ---------------------------------------------------------------- main


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--glideinwms", metavar="DIR", help="GlideinWMS source checkout (default: $GLIDEINWMS_SRC)")
    ap.add_argument("--glideinwms-version", metavar="TEXT", help="which GlideinWMS this is, when the tree cannot say")
    ap.add_argument("--pilots", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=7, help="timed passes per file set (at least 5)")
    ap.add_argument("--real-loops", type=int, default=500, help="reads of the one real .out per pass")
    ap.add_argument("--python-only", action="store_true", help="force our pure-Python readers (GWMS_OBS_NATIVE=0)")
    ap.add_argument("--record", action="store_true", help=f"write {RESULTS.relative_to(ROOT)}")
    a = ap.parse_args()
    if a.repeat < 5:
        ap.error("--repeat must be at least 5")
    gdir = gwms_dir(a.glideinwms)
    if a.python_only:
        os.environ["GWMS_OBS_NATIVE"] = "0"

    from gwms_obs.parse_errors import ParseErrors
    from gwms_obs.sources.glidein_err import read_err
    from gwms_obs.sources.glidein_out import read_out

    try:
        from gwms_obs import native

        impl = str(native.describe())
    except (ImportError, AttributeError):
        impl = "python"

    gparser, gwft, stubbed = import_gwms(gdir)
    gversion = gwms_version(gdir, a.glideinwms_version or os.environ.get("GLIDEINWMS_VERSION"))
    extract = gparser._extract_log_data
    get_condor_log = gwft.get_condor_log

    load_start = os.getloadavg()
    print(f"GlideinWMS: {gdir} — {gversion}" + (f"; stubbed: {', '.join(stubbed)}" if stubbed else ""))
    print(f"ours: reader implementation {impl}")

    WORK.mkdir(exist_ok=True)
    fac = factory(a.pilots, a.seed)
    outs = sorted(str(p) for p in (fac / "client").rglob("job.*.out"))
    pairs = [(o, o[:-4] + ".err") for o in outs if os.path.exists(o[:-4] + ".err")]
    if not outs or not pairs:
        raise SystemExit(f"no job.*.out/.err under {fac / 'client'}")
    if not REAL_OUT.is_file():
        raise SystemExit(f"the real .out is missing: {REAL_OUT}")
    real = [str(REAL_OUT)] * a.real_loops

    # Warm the page cache, then one untimed pass of each side: values compared, code paths warm.
    warm(outs + [e for _, e in pairs] + real[:1])
    diffs: dict[str, list[str]] = {}
    errors = ParseErrors()
    for p in [*outs, str(REAL_OUT)]:
        compare_out(p, extract(p), read_out(p, errors), diffs)
    has_history: list[bool] = []
    ads_peer = jobs_ours = 0
    for _o, e in pairs:
        text = get_condor_log(e, HISTORY)
        n_ads = history_ads(text)
        got = read_err(e, errors, detail=False)
        n_jobs = len(got.jobs) if got is not None and got.jobs else 0
        has_history.append(bool(text))
        if text and n_jobs == 0:
            raise SystemExit(f"ours decoded no job from {e}, which has a StartdHistoryLog of {n_ads} ads")
        if n_ads != n_jobs:
            diffs.setdefault("history ads vs jobs", []).append(f"{_rel(e)}: GlideinWMS {n_ads} ads, ours {n_jobs} jobs")
        ads_peer += n_ads
        jobs_ours += n_jobs
    with_history = sum(has_history)
    if with_history == 0:
        raise SystemExit("no simulated .err has a StartdHistoryLog: the .out + .err comparison would be empty")

    def ours_out(files: Sequence[str]) -> Callable[[], object]:
        def run() -> object:
            errs = ParseErrors()
            for p in files:
                read_out(p, errs)
            return errs

        return run

    def peer_out(files: Sequence[str]) -> Callable[[], object]:
        def run() -> object:
            for p in files:
                extract(p)
            return None

        return run

    def ours_both() -> object:
        errs = ParseErrors()
        jobs = 0
        for (o, e), hist in zip(pairs, has_history, strict=True):
            read_out(o, errs)
            got = read_err(e, errs, detail=False)
            n = len(got.jobs) if got is not None and got.jobs else 0
            assert n or not hist, f"no job decoded from {e}"
            jobs += n
        return jobs

    def peer_both() -> object:
        size = 0
        for o, e in pairs:
            extract(o)
            size += len(get_condor_log(e, HISTORY))
        return size

    sets = [
        (f"simulated .out ({len(outs):,} pilots)", ".out", len(outs), ours_out(outs), peer_out(outs)),
        (
            f"simulated .out + .err ({len(pairs):,} pilots, {with_history:,} with a StartdHistoryLog, "
            f"{jobs_ours:,} jobs decoded by ours)",
            ".out+.err",
            len(pairs),
            ours_both,
            peer_both,
        ),
        (
            f"real production .out (1 file × {a.real_loops} reads)",
            "real .out",
            len(real),
            ours_out(real),
            peer_out(real),
        ),
    ]
    rows = []
    for name, kind, n, ours_fn, peer_fn in sets:
        t_ours, t_peer = interleaved(ours_fn, peer_fn, a.repeat)
        us = 1e6 / n
        row = {
            "name": name,
            "kind": kind,
            "ours_min": min(t_ours) * us,
            "ours_med": statistics.median(t_ours) * us,
            "peer_min": min(t_peer) * us,
            "peer_med": statistics.median(t_peer) * us,
        }
        rows.append(row)
        print(
            f"{name}: ours {row['ours_min']:.1f} / {row['ours_med']:.1f} µs, "
            f"GlideinWMS {row['peer_min']:.1f} / {row['peer_med']:.1f} µs per pilot (min / median) — "
            f"{ratio_words(row['peer_med'], row['ours_med'])}",
            flush=True,
        )
    load_end = os.getloadavg()

    cmd = [".venv/bin/python", "benchmarks/peer_glideinwms.py", "--glideinwms", str(gdir)]
    if a.glideinwms_version:
        cmd += ["--glideinwms-version", a.glideinwms_version]
    cmd += ["--pilots", str(a.pilots), "--seed", str(a.seed), "--repeat", str(a.repeat)]
    cmd += ["--real-loops", str(a.real_loops)]
    if a.python_only:
        cmd.append("--python-only")
    if a.record:
        cmd.append("--record")

    by_kind = {r["kind"]: r for r in rows}
    aims = []
    out_ok = [by_kind[k]["peer_med"] > by_kind[k]["ours_med"] for k in (".out", "real .out")]
    aims.append(
        "- .out only: faster than GlideinWMS's extractor — "
        + ("met" if all(out_ok) else "not met")
        + " (median: simulated "
        + ratio_words(by_kind[".out"]["peer_med"], by_kind[".out"]["ours_med"])
        + ", real "
        + ratio_words(by_kind["real .out"]["peer_med"], by_kind["real .out"]["ours_med"])
        + ")."
    )
    both = by_kind[".out+.err"]
    speedup = both["peer_med"] / both["ours_med"]
    aims.append(
        "- .out + .err: ≥ 3× faster than GlideinWMS's .out + StartdHistoryLog extraction while still decoding "
        f"every job — {'met' if speedup >= 3 else 'not met'} (median peer/ours = {speedup:.2f}: "
        f"{ratio_words(both['peer_med'], both['ours_med'])}; {jobs_ours:,} jobs decoded from "
        f"{with_history:,} histories of {ads_peer:,} ads)."
    )

    lines = [
        "# Peer benchmark: GlideinWMS's log extractor vs ours, per pilot",
        "",
        f"Written by `benchmarks/peer_glideinwms.py`. Command: `{shlex.join(cmd)}`",
        "",
        f"- machine: {platform.node() or 'host'}, {os.cpu_count()} CPUs, {platform.platform()}; "
        f"Python {platform.python_version()}",
        f"- load average (1, 5, 15 min) at the start: {' '.join(f'{x:.2f}' for x in load_start)}; "
        f"at the end: {' '.join(f'{x:.2f}' for x in load_end)}",
        f"- GlideinWMS: {gversion}, imported unmodified from the checkout"
        + (f"; stubbed missing modules: {', '.join(stubbed)}" if stubbed else "; no module stubbed"),
        f"- ours: reader implementation `{impl}`" + (" (forced: GWMS_OBS_NATIVE=0)" if a.python_only else ""),
        f"- simulated factory: `gwms-obs simulate --pilots {a.pilots} --seed {a.seed}`",
        f"- {a.repeat} timed passes per set over all its files, same process, alternating which side goes "
        "first; page cache warm; µs per pilot, min and median over the passes",
        "- GlideinWMS side: `glideFactoryLogParser._extract_log_data(out)`; with the .err also "
        '`gWftLogParser.get_condor_log(err, "StartdHistoryLog")` (base64 + gunzip of the history, no job '
        'decoding; the bare `get_compressed(err, "StartdHistoryLog")` matches no section). '
        "Ours: `read_out(out)`; with the .err also `read_err(err, detail=False)`, every job of "
        "the history decoded (non-empty jobs checked on every file with a history).",
        "",
        "| file set | ours min µs | ours median µs | GlideinWMS min µs | GlideinWMS median µs "
        "| peer/ours (median) | ours/peer (median) | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['ours_min']:.1f} | {r['ours_med']:.1f} | {r['peer_min']:.1f} | "
            f"{r['peer_med']:.1f} | {r['peer_med'] / r['ours_med']:.2f} | {r['ours_med'] / r['peer_med']:.2f} | "
            f"{ratio_words(r['peer_med'], r['ours_med'])} |"
        )
    lines += ["", "## Aims", "", *aims, "", "## Values compared (untimed pass)", ""]
    lines.append(
        "Per .out: condor_started, validation/condor/glidein durations, activations/claims and the slot stats "
        "(GlideinWMS keeps the first `Total` line, the `(Real)` one on GlideinWMS ≥ 3.10.12 .out files: compared "
        "with our `stats_real_total`, the others with our normalized `stats`); per .err: the history's ads "
        "against our decoded jobs."
    )
    lines.append("")
    if not diffs:
        lines.append(f"No disagreement on {len(outs) + 1:,} .out files and {len(pairs):,} .err files.")
    for field, items in sorted(diffs.items()):
        lines.append(f"- {field}: {len(items)} file(s) disagree, e.g. {items[0]}")
    text = "\n".join(lines) + "\n"
    print()
    print(text)
    if a.record:
        record(RESULTS, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
