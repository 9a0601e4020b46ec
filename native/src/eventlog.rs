//! Fast path of `gwms_obs.sources.condor_eventlog.parse_buffer`: the HTCondor-G
//! event logs (`condor_activity_<day>_<client>.log`).
//!
//! A buffer is taken only when every event of it that ends with a `...` line is
//! one the Python reader keeps or skips without a word: one header at the
//! event's start (after blank lines at most), a header `_HEADER` matches, a
//! time `datetime` accepts, a reason that is UTF-8, no event over the size
//! limit. Anything else (whatever the Python reader records as a parse error)
//! returns Fallback and the Python reader reads the buffer. The unterminated
//! tail is left unread, as in Python, unless it is over the limit.
//!
//! Times are computed as `datetime(...).timestamp() + float(frac)` computes
//! them, bit for bit: an offset or a fixed zone is integer arithmetic, and the
//! host's local time is CPython's own algorithm (`local_to_seconds` in
//! Modules/_datetimemodule.c) over the same C library's `localtime_r`, so the
//! same TZ rules, DST gaps and folds included. tests/test_native_eventlog.py
//! holds the two equal under several zones.

use crate::scan::{digits, strip, Fallback, R};
use memchr::{memchr, memmem};

const SUBMITTED: u32 = 0;
const EXECUTING: u32 = 1;
const EVICTED: u32 = 4;
const TERMINATED: u32 = 5;
const ABORTED: u32 = 9;
const HELD: u32 = 12;
const RELEASED: u32 = 13;
const GRID_RESOURCE_UP: u32 = 25;
const GRID_RESOURCE_DOWN: u32 = 26;
const GRID_SUBMITTED: u32 = 27;
/// `condor_event_log._KEPT`: 025 and 026 are the gridmanager's grid resource up and down.
const KEPT: [u32; 10] =
    [SUBMITTED, EXECUTING, EVICTED, TERMINATED, ABORTED, HELD, RELEASED, GRID_RESOURCE_UP, GRID_RESOURCE_DOWN, GRID_SUBMITTED];
const REASON_CHARS: usize = 500;
const NORMAL: &[u8] = b"(1) Normal termination (return value ";
const ABNORMAL: &[u8] = b"(0) Abnormal termination (signal ";

/// Seconds from 0001-01-01 to 1970-01-01 (CPython's `epoch`).
const EPOCH: i64 = 719_163 * 86_400;
/// CPython's `max_fold_seconds`.
const MAX_FOLD: i64 = 86_400;
/// Years outside these are declined: real logs never hold them, and the edges of
/// `datetime`'s range (and of `time_t`) are the Python reader's to handle.
const YEARS: std::ops::RangeInclusive<i64> = 1971..=2999;

/// The zone of times that carry no offset of their own.
#[derive(Clone, Copy)]
pub enum Zone {
    /// The host's local time (`tz=None`).
    Local,
    /// A `datetime.timezone` of this many whole seconds east of UTC.
    Fixed(i64),
}

pub struct Event {
    pub cluster: u64,
    pub proc_: u64,
    pub code: u32,
    pub time: f64,
    pub return_value: Option<i64>,
    pub reason: Option<Reason>,
    /// A 012's `(HoldReasonCode, HoldReasonSubCode)`.
    pub codes: Option<(i64, i64)>,
}

pub enum Reason {
    /// `f"signal {n}"`
    Signal(u64),
    /// A span of the buffer: valid UTF-8, at most 500 characters.
    Text(usize, usize),
}

/// `(events, bytes consumed)`, exactly `parse_buffer`'s, or Fallback.
pub fn parse(buf: &[u8], zone: Zone, ref_day: (i64, i64, i64), max_event: usize) -> R<(Vec<Event>, usize)> {
    if !YEARS.contains(&ref_day.0) {
        return Err(Fallback);
    }
    let mut clock = Clock { zone, last: None };
    let mut out = Vec::with_capacity(buf.len() / 200 + 1);
    let mut pos = 0; // the current event's first byte
    let mut head: Option<usize> = None; // its header line, the only one
    let mut heads = 0;
    let mut lead = false; // something other than white space before its header
    let mut ls = 0;
    while ls < buf.len() {
        let nl = memchr(b'\n', &buf[ls..]).map(|i| ls + i);
        let line = &buf[ls..nl.unwrap_or(buf.len())];
        if is_end(line) {
            let Some(nl) = nl else { break }; // "..." without its newline yet: wait for it
            // Each of these is a parse error in Python: too long, stray text, two events in one.
            if ls - pos > max_event || lead || heads > 1 {
                return Err(Fallback);
            }
            if let Some(h) = head {
                if let Some(e) = event(&buf[h..ls], h, ref_day, &mut clock)? {
                    out.push(e);
                }
            }
            pos = nl + 1;
            (head, heads, lead) = (None, 0, false);
        } else if is_head(line) {
            head = Some(ls);
            heads += 1;
        } else if heads == 0 && !strip(line).is_empty() {
            lead = true;
        }
        match nl {
            Some(nl) => ls = nl + 1,
            None => break,
        }
    }
    if buf.len() - pos > max_event {
        return Err(Fallback); // the Python reader records the unterminated monster
    }
    Ok((out, pos))
}

/// `^\.\.\.[ \t\r]*$`
fn is_end(line: &[u8]) -> bool {
    line.starts_with(b"...") && line[3..].iter().all(|c| matches!(c, b' ' | b'\t' | b'\r'))
}

/// `^\d{3} \(`
fn is_head(line: &[u8]) -> bool {
    line.len() >= 5 && line[..3].iter().all(u8::is_ascii_digit) && line[3] == b' ' && line[4] == b'('
}

struct Cur<'a> {
    s: &'a [u8],
    p: usize,
}

impl Cur<'_> {
    fn lit(&mut self, c: u8) -> Option<()> {
        (self.s.get(self.p) == Some(&c)).then(|| self.p += 1)
    }

    /// `\d{lo,hi}` where no digit may follow (the next token is never a digit): the value.
    fn num(&mut self, lo: usize, hi: usize) -> Option<i64> {
        let n = digits(self.s, self.p);
        if n < lo || n > hi {
            return None;
        }
        let v = self.s[self.p..self.p + n].iter().fold(0i64, |v, c| v * 10 + i64::from(c - b'0'));
        self.p += n;
        Some(v)
    }

    /// `\d\d` (a digit may follow).
    fn two(&mut self) -> Option<i64> {
        let d = self.s.get(self.p..self.p + 2)?;
        if !d.iter().all(u8::is_ascii_digit) {
            return None;
        }
        self.p += 2;
        Some(i64::from(d[0] - b'0') * 10 + i64::from(d[1] - b'0'))
    }
}

/// What `_HEADER` captures.
struct Header {
    code: u32,
    cluster: u64,
    proc_: u64,
    year: Option<i64>,
    month: i64,
    day: i64,
    hms: (i64, i64, i64),
    frac: f64,
    offset: Option<i64>, // seconds east of UTC
    end: usize,
}

/// `_HEADER.match(piece)`. The pattern never backtracks into a different match:
/// each digit run must be followed by a non-digit literal, the two date forms
/// differ at their third byte, and the optional fraction and offset, when their
/// first byte is there, must match whole or the lookahead after them fails.
fn header(s: &[u8]) -> Option<Header> {
    let mut c = Cur { s, p: 0 };
    let code = c.num(3, 3)? as u32; // `\d{3} \(`: the caller saw it
    c.lit(b' ')?;
    c.lit(b'(')?;
    let cluster = c.num(1, 18)? as u64;
    c.lit(b'.')?;
    let proc_ = c.num(1, 9)? as u64;
    c.lit(b'.')?;
    c.num(1, 9)?;
    c.lit(b')')?;
    c.lit(b' ')?;
    let (year, month, day) = if s.get(c.p + 2) == Some(&b'/') {
        let m = c.two()?;
        c.lit(b'/')?;
        (None, m, c.two()?)
    } else {
        let y = c.num(4, 4)?;
        c.lit(b'-')?;
        let m = c.two()?;
        c.lit(b'-')?;
        (Some(y), m, c.two()?)
    };
    if c.lit(b' ').is_none() {
        c.lit(b'T')?;
    }
    let h = c.two()?;
    c.lit(b':')?;
    let mi = c.two()?;
    c.lit(b':')?;
    let sec = c.two()?;
    let mut frac = 0.0;
    if c.lit(b'.').is_some() {
        let a = c.p - 1;
        c.num(1, 9)?;
        // float(b".123"): correctly rounded, as Rust's parse is; ASCII, so UTF-8.
        frac = std::str::from_utf8(&s[a..c.p]).ok()?.parse::<f64>().ok()?;
    }
    let offset = match s.get(c.p) {
        Some(b'Z') => {
            c.p += 1;
            Some(0)
        }
        Some(&sign @ (b'+' | b'-')) => {
            c.p += 1;
            let hh = c.two()?;
            c.lit(b':');
            let mm = c.two()?;
            let off = hh * 3600 + mm * 60;
            Some(if sign == b'-' { -off } else { off })
        }
        _ => None,
    };
    if !matches!(s.get(c.p), None | Some(b' ' | b'\t' | b'\r' | b'\n')) {
        return None;
    }
    Some(Header { code, cluster, proc_, year, month, day, hms: (h, mi, sec), frac, offset, end: c.p })
}

/// `_parse_event` on one event (`piece` starts at `base` in the buffer): Ok(None) for a
/// code the reader skips, Fallback for anything it records.
fn event(piece: &[u8], base: usize, ref_day: (i64, i64, i64), clock: &mut Clock) -> R<Option<Event>> {
    let h = header(piece).ok_or(Fallback)?;
    if !KEPT.contains(&h.code) {
        return Ok(None);
    }
    let time = epoch(&h, ref_day, clock).ok_or(Fallback)?;
    let mut e =
        Event { cluster: h.cluster, proc_: h.proc_, code: h.code, time, return_value: None, reason: None, codes: None };
    let body = &piece[h.end..];
    if h.code == TERMINATED {
        if let Some(v) = search(body, NORMAL, true) {
            e.return_value = Some(v);
        } else if let Some(v) = search(body, ABNORMAL, false) {
            e.reason = Some(Reason::Signal(v as u64));
        }
    } else if h.code == HELD || h.code == ABORTED {
        // The reason is the first body line that is not white space or "Code ..."; a 012's
        // codes are the first body line that is exactly "Code N Subcode M".
        let held = h.code == HELD;
        let mut at = base + h.end;
        let mut lines = body.split(|&c| c == b'\n');
        at += lines.next().map_or(0, |l| l.len() + 1);
        for line in lines {
            let text = strip(line);
            let start = at + (text.as_ptr() as usize - line.as_ptr() as usize);
            at += line.len() + 1;
            if text.is_empty() {
                continue;
            }
            if text.starts_with(b"Code ") {
                if held && e.codes.is_none() {
                    e.codes = codes(text);
                }
            } else if e.reason.is_none() {
                // Python decodes with "replace": only valid UTF-8 is taken here.
                let s = std::str::from_utf8(text).map_err(|_| Fallback)?;
                let cut = s.char_indices().nth(REASON_CHARS).map_or(s.len(), |(i, _)| i);
                e.reason = Some(Reason::Text(start, start + cut));
            }
            if e.reason.is_some() && (!held || e.codes.is_some()) {
                break;
            }
        }
    }
    Ok(Some(e))
}

/// `_CODES.fullmatch(text)`: `Code (-?\d{1,9}) Subcode (-?\d{1,9})`, the two values.
fn codes(text: &[u8]) -> Option<(i64, i64)> {
    let mut c = Cur { s: text, p: 0 };
    let signed = |c: &mut Cur| {
        let minus = c.lit(b'-').is_some();
        c.num(1, 9).map(|v| if minus { -v } else { v })
    };
    b"Code ".iter().try_for_each(|&b| c.lit(b))?;
    let code = signed(&mut c)?;
    b" Subcode ".iter().try_for_each(|&b| c.lit(b))?;
    let sub = signed(&mut c)?;
    (c.p == text.len()).then_some((code, sub))
}

/// The first `PREFIX(-?\d{1,9})\)` in `body` (`neg`: the sign is allowed), its value.
fn search(body: &[u8], prefix: &[u8], neg: bool) -> Option<i64> {
    for i in memmem::find_iter(body, prefix) {
        let mut c = Cur { s: body, p: i + prefix.len() };
        let minus = neg && c.lit(b'-').is_some();
        if let Some(v) = c.num(1, 9) {
            if c.lit(b')').is_some() {
                return Some(if minus { -v } else { v });
            }
        }
    }
    None
}

fn leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

fn valid_date(y: i64, m: i64, d: i64) -> bool {
    (1..=9999).contains(&y) && (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m)
}

/// Days from 0001-01-01 (day 1) to y-m-d, as `date.toordinal()`; no validation (CPython's `ymd_to_ord`).
fn ordinal(y: i64, m: i64, d: i64) -> i64 {
    const BEFORE: [i64; 13] = [0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let p = y - 1;
    let month = BEFORE[m.clamp(0, 12) as usize] + i64::from(m > 2 && leap(y));
    p * 365 + p / 4 - p / 100 + p / 400 + month + d
}

/// CPython's `utc_to_seconds`: seconds since 0001-01-01 of the fields read as UTC.
fn utc_to_seconds(y: i64, m: i64, d: i64, h: i64, mi: i64, s: i64) -> i64 {
    ((ordinal(y, m, d) * 24 + h) * 60 + mi) * 60 + s
}

/// `_year_for`: the year that puts MM/DD nearest the reference day (the earliest on a tie).
fn year_for(month: i64, day: i64, r: (i64, i64, i64)) -> i64 {
    let mut best = r.0;
    let mut gap: Option<i64> = None;
    let anchor = ordinal(r.0, r.1, r.2);
    for y in [r.0 - 1, r.0, r.0 + 1] {
        if !valid_date(y, month, day) {
            continue;
        }
        let g = (ordinal(y, month, day) - anchor).abs();
        if gap.is_none_or(|b| g < b) {
            (best, gap) = (y, Some(g));
        }
    }
    best
}

/// `_to_epoch`: None where Python raises (then records `bad_time`) or where this code declines.
fn epoch(h: &Header, ref_day: (i64, i64, i64), clock: &mut Clock) -> Option<f64> {
    let y = h.year.unwrap_or_else(|| year_for(h.month, h.day, ref_day));
    let (hh, mi, s) = h.hms;
    if !YEARS.contains(&y) || !valid_date(y, h.month, h.day) || hh > 23 || mi > 59 || s > 59 {
        return None;
    }
    let naive = utc_to_seconds(y, h.month, h.day, hh, mi, s);
    let secs = match (h.offset, clock.zone) {
        (Some(off), _) | (None, Zone::Fixed(off)) => {
            if off.abs() >= 86_400 {
                return None; // timezone(): "offset must be a timedelta strictly between -24h and 24h"
            }
            naive - off
        }
        (None, Zone::Local) => clock.local_to_seconds(naive)?,
    } - EPOCH;
    // `dt.timestamp() + frac`: an integer (exact as a double) plus the fraction, one rounding.
    Some(secs as f64 + h.frac)
}

/// The host's local time, as CPython's naive `datetime.timestamp()` reads it.
struct Clock {
    zone: Zone,
    last: Option<(i64, i64)>, // (naive seconds, result): events come in bursts of one second
}

impl Clock {
    /// CPython's `local(u)`: `localtime_r` of the instant, its fields read back as UTC seconds.
    fn local(u: i64) -> Option<i64> {
        let t = libc::time_t::try_from(u - EPOCH).ok()?;
        // SAFETY: localtime_r writes only into `tm`, which outlives the call.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        if unsafe { libc::localtime_r(&t, &mut tm) }.is_null() {
            return None;
        }
        let y = i64::from(tm.tm_year) + 1900;
        if !(1..=9999).contains(&y) {
            return None;
        }
        let f = |v: libc::c_int| i64::from(v);
        Some(utc_to_seconds(y, f(tm.tm_mon) + 1, f(tm.tm_mday), f(tm.tm_hour), f(tm.tm_min), f(tm.tm_sec)))
    }

    /// CPython's `local_to_seconds(..., fold=0)`: solve `local(u) == t` for u, the earlier
    /// solution in a fold, the later candidate in a gap.
    fn local_to_seconds(&mut self, t: i64) -> Option<i64> {
        if let Some((k, v)) = self.last {
            if k == t {
                return Some(v);
            }
        }
        let a = Self::local(t)? - t;
        let u1 = t - a;
        let t1 = Self::local(u1)?;
        let b = if t1 == t {
            let u2 = u1 - MAX_FOLD;
            let b = Self::local(u2)? - u2;
            if a == b {
                self.last = Some((t, u1));
                return Some(u1);
            }
            b
        } else {
            t1 - u1
        };
        let u2 = t - b;
        let t2 = Self::local(u2)?;
        let u = if t2 == t {
            u2
        } else if t1 == t {
            u1
        } else {
            u1.max(u2) // in the gap
        };
        self.last = Some((t, u));
        Some(u)
    }
}
