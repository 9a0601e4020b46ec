//! completed_jobs lines on the exporter's path: which lines belong to pilots
//! not counted yet, without a Python object for the others.
//!
//! `scan_unseen` accepts a buffer only when EVERY line up to its last newline
//! is in the language of the Python reader's `_ALL_SCAN` (the writer's exact
//! format, `_BODY_ID` followed by `\r?\n`); for anything else it returns None
//! and `completed_jobs.scan_buffer` (the reference) reads the buffer. The
//! matcher below is that pattern spelled out token by token. Every quantifier
//! of the pattern is possessive or followed by a byte its class cannot match,
//! so "a run of at most N bytes of a class, then the next literal" is exactly
//! "the whole run is at most N long and the literal follows".

use memchr::{memchr, memchr_iter};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};

/// Where one accepted line's pieces are, as offsets into the buffer.
struct Found {
    start: usize,
    body_end: usize,
    cluster: (usize, usize),
    proc_: (usize, usize),
}

struct Cur<'a> {
    s: &'a [u8],
    p: usize,
}

impl Cur<'_> {
    #[inline(always)]
    fn lit(&mut self, t: &[u8]) -> Option<()> {
        if self.s.get(self.p..self.p + t.len())? == t {
            self.p += t.len();
            Some(())
        } else {
            None
        }
    }

    /// ` ++`: one or more spaces.
    #[inline(always)]
    fn spaces(&mut self) -> Option<()> {
        let n = self.s[self.p..].iter().take_while(|&&c| c == b' ').count();
        (n > 0).then(|| self.p += n)
    }

    /// `[^"\n]{0,max}+"`: the body never holds a newline, so up to the next quote.
    #[inline(always)]
    fn quoted(&mut self, max: usize) -> Option<()> {
        let n = memchr(b'"', &self.s[self.p..])?;
        if n > max {
            return None;
        }
        self.p += n + 1;
        Some(())
    }

    /// `\d{1,max}+` (ASCII digits: a bytes pattern), its span.
    #[inline(always)]
    fn digits(&mut self, max: usize) -> Option<(usize, usize)> {
        let n = self.s[self.p..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > max {
            return None;
        }
        let a = self.p;
        self.p += n;
        Some((a, self.p))
    }

    #[inline(always)]
    fn opt(&mut self, c: u8) {
        if self.s.get(self.p) == Some(&c) {
            self.p += 1;
        }
    }

    /// ` ++name="-?\d{1,18}+"` (the caller passes ` name="` without the spaces).
    #[inline(always)]
    fn attr_num(&mut self, name: &[u8]) -> Option<()> {
        self.spaces()?;
        self.lit(name)?;
        self.opt(b'-');
        self.digits(18)?;
        self.lit(b"\"")
    }
}

/// The whole-line match of `_BODY_ID` on `body` (a line without `\r?\n`):
/// the spans of cluster and proc, or None.
fn match_body(body: &[u8]) -> Option<((usize, usize), (usize, usize))> {
    let mut c = Cur { s: body, p: 0 };
    c.lit(b"<job")?;
    c.spaces()?;
    c.lit(b"terminated=\"")?;
    c.quoted(64)?;
    c.spaces()?;
    c.lit(b"client=\"")?;
    c.quoted(512)?;
    c.spaces()?;
    c.lit(b"username=\"")?;
    c.quoted(512)?;
    c.spaces()?;
    c.lit(b"id=\"")?;
    // b?'? and '? never need to backtrack: a digit or a quote must follow.
    c.opt(b'b');
    c.opt(b'\'');
    let cluster = c.digits(18)?;
    c.lit(b".")?;
    let proc_ = c.digits(9)?;
    c.opt(b'\'');
    c.lit(b"\"")?;
    c.attr_num(b"duration=\"")?;
    c.spaces()?;
    c.lit(b"condor_started=\"")?;
    if c.lit(b"True\"").is_none() {
        c.lit(b"False\"")?;
    }
    c.attr_num(b"condor_duration=\"")?;
    c.lit(b"><user")?;
    c.attr_num(b"jobsnr=\"")?;
    c.attr_num(b"duration=\"")?;
    c.attr_num(b"goodput=\"")?;
    c.attr_num(b"terminated=\"")?;
    c.lit(b"/><wastemill")?;
    c.attr_num(b"validation=\"")?;
    c.attr_num(b"idle=\"")?;
    c.attr_num(b"nosuccess=\"")?;
    c.attr_num(b"badput=\"")?;
    c.lit(b"/></job>")?;
    (c.p == body.len()).then_some((cluster, proc_))
}

/// Every line of `buf[..end]` matched, or None when one does not.
fn scan(buf: &[u8], end: usize) -> Option<Vec<Found>> {
    let mut out = Vec::with_capacity(end / 256 + 1);
    let mut start = 0;
    for nl in memchr_iter(b'\n', &buf[..end]) {
        let mut body_end = nl;
        if body_end > start && buf[body_end - 1] == b'\r' {
            body_end -= 1; // `</job>` cannot end in \r: the \r is the line end's
        }
        let (cl, pr) = match_body(&buf[start..body_end])?;
        out.push(Found { start, body_end, cluster: (start + cl.0, start + cl.1), proc_: (start + pr.0, start + pr.1) });
        start = nl + 1;
    }
    Some(out)
}

/// Python's `int(digits)` written back: the digits without leading zeros ("0" for zeros only).
fn int_digits(d: &[u8]) -> &[u8] {
    let z = d.iter().take_while(|&&c| c == b'0').count();
    if z == d.len() { &d[d.len() - 1..] } else { &d[z..] }
}

/// The exporter's path over one buffer: `(end, lines, unseen)` or None.
///
/// `end` is the offset after the last newline (the bytes consumed), `lines`
/// the number of lines in `buf[:end]`, and `unseen` a list of
/// `(key, (line, cluster, proc))` for each line whose key
/// `f"{entry}/{int(cluster)}.{int(proc)}"` is not in `seen`, the tuple being
/// exactly what `_ALL_SCAN.findall` returns for it. None (read it in Python)
/// unless every line matches, or when the unterminated tail is longer than
/// `max_line` (the Python reader records that).
#[pyfunction]
pub fn scan_unseen<'py>(
    py: Python<'py>,
    buf: &Bound<'py, PyBytes>,
    entry: &Bound<'py, PyString>,
    seen: &Bound<'py, PyDict>,
    max_line: usize,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Ok(entry) = entry.to_str() else { return Ok(None) }; // a lone surrogate: Python's problem
    let data = buf.as_bytes();
    let end = memchr::memrchr(b'\n', data).map_or(0, |i| i + 1);
    if data.len() - end > max_line || end == 0 {
        return Ok(None);
    }
    // a panic (a bug) declines like any line the scan does not take: the Python reader reads the buffer
    let scanned = py.detach(|| std::panic::catch_unwind(|| scan(data, end)));
    let Ok(Some(found)) = scanned else { return Ok(None) };
    let unseen = PyList::empty(py);
    let mut key: Vec<u8> = Vec::with_capacity(entry.len() + 32);
    key.extend_from_slice(entry.as_bytes());
    key.push(b'/');
    let prefix = key.len();
    for f in &found {
        let (cluster, proc_) = (&data[f.cluster.0..f.cluster.1], &data[f.proc_.0..f.proc_.1]);
        key.truncate(prefix);
        key.extend_from_slice(int_digits(cluster));
        key.push(b'.');
        key.extend_from_slice(int_digits(proc_));
        // entry is UTF-8 and the rest ASCII digits and '.'.
        let k = PyString::new(py, std::str::from_utf8(&key).expect("utf-8 key"));
        if seen.contains(&k)? {
            continue;
        }
        let raw = (
            PyBytes::new(py, &data[f.start..f.body_end]),
            PyBytes::new(py, cluster),
            PyBytes::new(py, proc_),
        );
        unseen.append((k, raw))?;
    }
    PyTuple::new(py, [end.into_pyobject(py)?.into_any(), found.len().into_pyobject(py)?.into_any(), unseen.into_any()])
        .map(Some)
}

