//! Byte-search helpers with Python's `bytes.find(sub, start, end)` semantics.
//!
//! Every reader here is a fast path: when it meets anything the pure-Python
//! reader would record as a parse error (or anything it does not model
//! exactly), it gives up with [`Fallback`] and the Python reader parses the
//! file instead. So these functions never have to be right about bad input,
//! only about good input, and never about where to report an error.

use memchr::{memchr, memmem, memrchr};
use std::sync::LazyLock;

/// A constant needle's searcher, built once (`memmem::find` builds one at every call).
pub type Needle = LazyLock<memmem::Finder<'static>>;

/// `needle!(b"...")`: the `&'static memmem::Finder` of a constant, built on first use.
#[macro_export]
macro_rules! needle {
    ($s:expr) => {{
        static F: $crate::scan::Needle = $crate::scan::Needle::new(|| memchr::memmem::Finder::new($s));
        &*F
    }};
}

/// [`find`] with a prebuilt searcher.
pub fn find_in(h: &[u8], f: &memmem::Finder<'_>, start: usize, stop: usize) -> Option<usize> {
    let stop = stop.min(h.len());
    if start > stop || stop - start < f.needle().len() {
        return None;
    }
    f.find(&h[start..stop]).map(|i| i + start)
}

/// "Not on the fast path": the pure-Python reader takes the whole file.
#[derive(Debug)]
pub struct Fallback;
pub type R<T> = Result<T, Fallback>;

/// Python's `h.find(n, start, stop)`, None for -1.
pub fn find(h: &[u8], n: &[u8], start: usize, stop: usize) -> Option<usize> {
    let stop = stop.min(h.len());
    if start > stop || stop - start < n.len() {
        return None;
    }
    let h = &h[start..stop];
    if n.is_empty() {
        return Some(start);
    }
    if h.len() <= 64 {
        // a short haystack (the rest of a marker's line): building a searcher costs more than this
        return h.windows(n.len()).position(|w| w == n).map(|i| i + start);
    }
    memmem::find(h, n).map(|i| i + start)
}

pub fn find_byte(h: &[u8], b: u8, start: usize, stop: usize) -> Option<usize> {
    let stop = stop.min(h.len());
    if start >= stop {
        return None;
    }
    memchr(b, &h[start..stop]).map(|i| i + start)
}

pub fn rfind_byte(h: &[u8], b: u8, start: usize, stop: usize) -> Option<usize> {
    let stop = stop.min(h.len());
    if start >= stop {
        return None;
    }
    memrchr(b, &h[start..stop]).map(|i| i + start)
}

/// Length of the ASCII digit run at `i`.
pub fn digits(s: &[u8], i: usize) -> usize {
    s.get(i..).map_or(0, |t| t.iter().take_while(|c| c.is_ascii_digit()).count())
}

/// A digit run of at most `max` digits as an integer; longer runs are the
/// Python reader's to record (`bad_number`).
pub fn num(raw: &[u8], max: usize) -> R<u64> {
    if raw.is_empty() || raw.len() > max || !raw.iter().all(u8::is_ascii_digit) {
        return Err(Fallback);
    }
    Ok(raw.iter().fold(0u64, |v, c| v * 10 + u64::from(c - b'0')))
}

/// Python's `bytes.strip()` (ASCII whitespace).
pub fn strip(s: &[u8]) -> &[u8] {
    let ws = |c: &u8| matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c);
    let a = s.iter().position(|c| !ws(c)).unwrap_or(s.len());
    let b = s.iter().rposition(|c| !ws(c)).map_or(a, |i| i + 1);
    &s[a..b.max(a)]
}

/// Does every line (the bytes between newlines) have fewer than `max` bytes?
pub fn lines_shorter_than(data: &[u8], max: usize) -> bool {
    let mut start = 0;
    for nl in memchr::memchr_iter(b'\n', data) {
        if nl - start >= max {
            return false;
        }
        start = nl + 1;
    }
    data.len() - start < max
}

/// `Scanner.lines` of the Python reader: each occurrence of `marker` in
/// `[start, stop)` with the rest of its line, the next search after that line.
pub struct Lines<'a> {
    data: &'a [u8],
    marker: &'a memmem::Finder<'static>,
    pos: usize,
    stop: usize,
    max_line: usize,
}

impl<'a> Lines<'a> {
    pub fn new(data: &'a [u8], marker: &'a memmem::Finder<'static>, start: usize, stop: usize, max_line: usize) -> Self {
        Lines { data, marker, pos: start, stop: stop.min(data.len()), max_line }
    }

    /// (offset of the marker, the line from it) or None; Fallback on an over-long line.
    pub fn next_line(&mut self) -> R<Option<(usize, &'a [u8])>> {
        if self.pos >= self.stop {
            return Ok(None);
        }
        let Some(i) = find_in(self.data, self.marker, self.pos, self.stop) else {
            return Ok(None);
        };
        let eol = match find_byte(self.data, b'\n', i, (i + self.max_line).min(self.stop)) {
            Some(e) => e,
            None if self.stop - i <= self.max_line => self.stop,
            None => return Err(Fallback),
        };
        self.pos = eol + 1;
        Ok(Some((i, &self.data[i..eol])))
    }
}

/// The first line of `marker` from `start` that `m` matches (`m` sees the line from the
/// marker on): (the marker's offset, the offset just past the match, what m found).
pub fn match_at<'a, T>(
    data: &'a [u8],
    marker: &'a memmem::Finder<'static>,
    start: usize,
    max_line: usize,
    m: impl Fn(&'a [u8]) -> Option<(usize, T)>,
) -> R<Option<(usize, usize, T)>> {
    let mut lines = Lines::new(data, marker, start, data.len(), max_line);
    while let Some((off, line)) = lines.next_line()? {
        if let Some((end, t)) = m(line) {
            return Ok(Some((off, off + end, t)));
        }
    }
    Ok(None)
}

/// One token of a fixed line shape: a literal, or a run of ASCII digits.
#[derive(Clone, Copy)]
pub enum Tok {
    Lit(&'static [u8]),
    Digits,
}

/// Match `toks` at `s[q..]` (each digit run greedy, at least one digit):
/// the end, and the digit runs as (start, end).
pub fn seq(s: &[u8], q: usize, toks: &[Tok]) -> Option<(usize, [(usize, usize); 2])> {
    let mut p = q;
    let mut caps = [(0, 0); 2];
    let mut n = 0;
    for t in toks {
        match t {
            Tok::Lit(l) => {
                if !s.get(p..)?.starts_with(l) {
                    return None;
                }
                p += l.len();
            }
            Tok::Digits => {
                let d = digits(s, p);
                if d == 0 {
                    return None;
                }
                caps[n] = (p, p + d);
                n += 1;
                p += d;
            }
        }
    }
    Some((p, caps))
}

/// The lazy `.*?TAIL` of a regex: the first position from `from` where `toks` match.
pub fn lazy_seq(s: &[u8], from: usize, toks: &[Tok]) -> Option<(usize, [(usize, usize); 2])> {
    let Tok::Lit(first) = toks[0] else { unreachable!("tails start with a literal") };
    let mut q = from;
    while let Some(i) = find(s, first, q, s.len()) {
        if let Some(m) = seq(s, i, toks) {
            return Some(m);
        }
        q = i + 1;
    }
    None
}

/// `PREFIX(?:.*?\((\d+)\))?.*?TAIL` matched on a line that starts with the prefix
/// (`after` = the prefix's length): (end, epoch digits, the tail's digit runs).
pub fn paren_tail(s: &[u8], after: usize, tail: &[Tok]) -> Option<(usize, Option<(usize, usize)>, [(usize, usize); 2])> {
    // The optional group first: each "(digits)" in turn, as the regex backtracks into its lazy .*?
    let mut q = after;
    while let Some(i) = find_byte(s, b'(', q, s.len()) {
        let d = digits(s, i + 1);
        if d > 0 && s.get(i + 1 + d) == Some(&b')') {
            if let Some((end, caps)) = lazy_seq(s, i + 2 + d, tail) {
                return Some((end, Some((i + 1, i + 1 + d)), caps));
            }
        }
        q = i + 1;
    }
    lazy_seq(s, after, tail).map(|(end, caps)| (end, None, caps))
}

/// The first `b` in `s` at or after `from`.
pub fn memchr_pos(b: u8, s: &[u8], from: usize) -> Option<usize> {
    find_byte(s, b, from, s.len())
}

/// `s.split(|c| c == b'\n')`, with memchr (the closure form goes byte by byte).
pub fn split_lines(s: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut pos = 0;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        match memchr(b'\n', &s[pos..]) {
            Some(i) => {
                let line = &s[pos..pos + i];
                pos += i + 1;
                Some(line)
            }
            None => {
                done = true;
                Some(&s[pos..])
            }
        }
    })
}
