"""The compiled file read (``gwms_obs_native.read_regular``, through ``files.fast_read``).

It is a fast path of ``files.open_regular`` + ``RegularFile.read``: it returns the
file's bytes only for a regular file of at most the limit, opened the same way
(``O_NOFOLLOW`` inside a root), and None for anything else, which the readers then
open through ``files`` (recording why). Here: what it declines, and that
``read_out``/``read_err`` give the same result and the same recorded errors with
and without it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gwms_obs import native
from gwms_obs.parse_errors import ParseErrors
from gwms_obs.simulate.factory import simulate
from gwms_obs.sources import files, glidein_err, glidein_out

if native.core is None:
    if os.environ.get("GWMS_OBS_REQUIRE_NATIVE") == "1":
        raise RuntimeError(f"gwms_obs_native is required here (make native): {native.describe()}")
    pytest.skip(f"no compiled readers: {native.describe()}", allow_module_level=True)

CORE = native.core


def test_reads_a_regular_file_whole(tmp_path: Path) -> None:
    f = tmp_path / "job.1.0.out"
    data = os.urandom(100_000) + b"\n"
    f.write_bytes(data)
    assert CORE.read_regular(str(f), False, len(data)) == data
    assert CORE.read_regular(str(f), True, len(data)) == data
    (tmp_path / "empty").write_bytes(b"")
    assert CORE.read_regular(str(tmp_path / "empty"), True, 10) == b""


def test_declines_what_open_regular_would_refuse_or_record(tmp_path: Path) -> None:
    f = tmp_path / "job.1.0.out"
    f.write_bytes(b"x" * 101)
    assert CORE.read_regular(str(f), False, 100) is None  # too large: read_out's head + tail
    assert CORE.read_regular(str(tmp_path / "missing"), False, 100) is None
    assert CORE.read_regular(str(tmp_path), False, 100) is None  # a directory
    fifo = tmp_path / "job.2.0.out"
    os.mkfifo(fifo)
    assert CORE.read_regular(str(fifo), False, 100) is None  # opened non-blocking, not regular
    link = tmp_path / "job.3.0.out"
    link.symlink_to(f.name)
    assert CORE.read_regular(str(link), True, 1000) is None  # O_NOFOLLOW: ELOOP
    assert CORE.read_regular(str(link), False, 1000) == b"x" * 101  # followed without a root
    zero = tmp_path / "job.4.0.out"
    zero.symlink_to("/dev/zero")
    assert CORE.read_regular(str(zero), False, 1000) is None  # a device
    # A path lexically outside the root, or with "..", is never read here.
    assert files.fast_read(str(f), str(tmp_path / "sub"), 1000) is None
    assert files.fast_read(str(tmp_path / "sub" / ".." / f.name), str(tmp_path), 1000) is None
    assert files.fast_read(str(f), str(tmp_path), 1000) == b"x" * 101
    # A non-UTF-8 file name (surrogate-escaped in Python) is read too.
    odd = tmp_path / "job.5.0.\udcff.out"
    odd.write_bytes(b"y\n")
    assert CORE.read_regular(str(odd), True, 10) == b"y\n"


class _NoRead:
    """The module with read_regular always declining: the readers' path through files."""

    def __getattr__(self, name: str) -> object:
        return getattr(CORE, name)

    @staticmethod
    def read_regular(*_: object) -> None:
        return None


def _both(reader, path: str, **kw):  # type: ignore[no-untyped-def]
    fast_errors, slow_errors = ParseErrors(), ParseErrors()
    fast = reader(path, fast_errors, **kw)
    native.core = _NoRead()
    try:
        slow = reader(path, slow_errors, **kw)
    finally:
        native.core = CORE
    return fast, slow, fast_errors.counts, slow_errors.counts


def test_readers_agree_with_and_without_the_compiled_read(tmp_path: Path) -> None:
    fac = tmp_path / "factory"
    simulate(fac, 40, seed=3)
    outs = sorted(fac.rglob("job.*.out"))
    assert outs
    odd = outs[0].with_name("job.99.0.out")
    odd.symlink_to(outs[0].name)  # a symlink inside the tree: resolved by files, not here
    for out in [*outs, odd]:
        err = str(out)[:-4] + ".err"
        for root in (None, str(fac)):
            # the fast path is taken (no symlink inside a root), so the comparison is not vacuous
            assert (files.fast_read(str(out), root, 1 << 30) is None) == (out == odd and root is not None)
            fast, slow, fe, se = _both(glidein_out.read_out, str(out), root=root)
            assert fast == slow
            assert fe == se
            if os.path.exists(err):
                fast, slow, fe, se = _both(glidein_err.read_err, err, detail=False, root=root)
                assert fast == slow
                assert fe == se
    # Too large: head and tail through files, the same record either way.
    fast, slow, fe, se = _both(glidein_out.read_out, str(outs[0]), max_bytes=1000)
    assert fast == slow
    assert fe == se
    assert fe[("glidein_out", "too_large")] == 1
