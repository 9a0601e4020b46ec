//! The pilot-trace encoder's hot part (`gwms_obs.outputs.pilot_traces`): one span's OTLP/JSON
//! text (`_Trace.add`), a dict of attributes (`_attrs`) and a pilot's user-job spans (`_jobs`),
//! from the facts the Python encoder has at hand, byte for byte what it writes.
//!
//! The Python encoder stays the reference: anything this code does not reproduce exactly (a
//! time that is not a float, a value beyond i64, a GlobalJobId that needs scrubbing, a string
//! with a lone surrogate, a non-finite time, whose Python path raises) is a decline (None),
//! and Python writes that span. tests/test_native_trace.py holds the two byte-equal.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};
use std::borrow::Cow;
use std::fmt::Write;

/// Not written here: the Python encoder writes it (or raises, as it would anyway).
pub struct Decline;

impl From<PyErr> for Decline {
    fn from(_: PyErr) -> Self {
        Decline
    }
}

pub(crate) type R<T> = Result<T, Decline>;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// `json.encoder.encode_basestring_ascii(s)`: quoted, `"` `\` and the five short escapes, the
/// rest outside ' '..='~' as `\uXXXX` (lower-case hex, UTF-16 surrogate pairs beyond the BMP).
pub fn push_str(out: &mut String, s: &str) {
    out.push('"');
    if s.bytes().all(|b| (b' '..=b'~').contains(&b) && b != b'"' && b != b'\\') {
        out.push_str(s);
    } else {
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                ' '..='~' => out.push(c),
                _ => {
                    let mut units = [0u16; 2];
                    for u in c.encode_utf16(&mut units) {
                        out.push_str("\\u");
                        for shift in [12, 8, 4, 0] {
                            out.push(HEX[usize::from((*u >> shift) & 0xf)] as char);
                        }
                    }
                }
            }
        }
    }
    out.push('"');
}

/// `repr(v)` of a finite float: "<n>.0" for a whole one below 1e16, else CPython's own 'r'
/// format; were it to fail (out of memory), the shortest digits that read back as `v` (Rust's
/// `{:e}`) laid out as Python's 'r' format does: positional when the decimal point falls in
/// -4 < decpt <= 16, else d.ddde[+-]XX.
pub fn push_float(out: &mut String, v: f64) {
    // Most values are whole (times in seconds, cores × seconds): Python writes them "<n>.0"
    // below 1e16; the sign kept, as repr(-0.0) is "-0.0".
    if v.fract() == 0.0 && v.abs() < 1e16 {
        if v.is_sign_negative() {
            out.push('-');
        }
        push_u64(out, v.abs() as u64);
        out.push_str(".0");
        return;
    }
    // The rest as float.__repr__ writes it, by CPython's own function (abi3): where two shortest
    // digit strings are equally near (562949953421593.25), Rust's shortest picks the other one.
    // SAFETY: called with the GIL held (every caller is a #[pyfunction]); the buffer is CPython's,
    // NUL-terminated, freed with PyMem_Free.
    unsafe {
        let p = pyo3::ffi::PyOS_double_to_string(v, b'r' as std::ffi::c_char, 0, pyo3::ffi::Py_DTSF_ADD_DOT_0, std::ptr::null_mut());
        if !p.is_null() {
            out.push_str(&std::ffi::CStr::from_ptr(p).to_string_lossy());
            pyo3::ffi::PyMem_Free(p.cast());
            return;
        }
    }
    let s = format!("{v:e}");
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = match mant.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mant),
    };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let n = digits.len() as i32;
    let decpt = exp + 1;
    if neg {
        out.push('-');
    }
    if -4 < decpt && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            (0..-decpt).for_each(|_| out.push('0'));
            out.push_str(&digits);
        } else if decpt >= n {
            out.push_str(&digits);
            (0..decpt - n).for_each(|_| out.push('0'));
            out.push_str(".0");
        } else {
            out.push_str(&digits[..decpt as usize]);
            out.push('.');
            out.push_str(&digits[decpt as usize..]);
        }
    } else {
        out.push_str(&digits[..1]);
        if n > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

/// `f"{n}"` of an unsigned integer, two digits a step and without core::fmt (a trace writes
/// ~100 a pilot, most of them nanosecond times of 19 digits).
pub(crate) fn push_u64(out: &mut String, mut n: u64) {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let k = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[k..k + 2]);
    }
    if n >= 10 {
        let k = n as usize * 2;
        i -= 2;
        buf[i..i + 2].copy_from_slice(&PAIRS[k..k + 2]);
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    // SAFETY: buf[i..] holds ASCII digits only, which are valid UTF-8 (a checked from_utf8, or a
    // char at a time, was a tenth of the whole trace's time under perf).
    out.push_str(unsafe { std::str::from_utf8_unchecked(&buf[i..]) });
}

/// `f"{n}"` of a signed integer.
pub(crate) fn push_i64(out: &mut String, n: i64) {
    if n < 0 {
        out.push('-');
    }
    push_u64(out, n.unsigned_abs());
}

/// `_ns(t)`: `str(max(0, round(t * NS)))` (round half to even, as Python's round of a float).
pub(crate) fn push_ns(out: &mut String, t: f64) -> R<()> {
    let x = (t * 1e9).round_ties_even();
    if !x.is_finite() || x >= 9.0e18 {
        return Err(Decline); // Python raises on inf and NaN; beyond u64 is no real time
    }
    push_u64(out, if x > 0.0 { x as u64 } else { 0 });
    Ok(())
}

/// A time: exactly a float (an int's arithmetic is exact in Python, not here), finite.
pub(crate) fn time(v: &Bound<'_, PyAny>) -> R<f64> {
    if !v.is_exact_instance_of::<PyFloat>() {
        return Err(Decline);
    }
    let t: f64 = v.extract()?;
    if t.is_finite() { Ok(t) } else { Err(Decline) }
}

/// Python's max(a, b): b only when b > a.
pub(crate) fn pymax(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// Python's min(a, b): b only when b < a.
pub(crate) fn pymin(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

/// A KeyValue's text up to its value: `{"key":"<key>","value":{"<kind>":` (the key one of ours).
fn push_key(out: &mut String, key: &str, kind: &str) {
    out.push_str("{\"key\":\"");
    out.push_str(key);
    out.push_str("\",\"value\":{\"");
    out.push_str(kind);
    out.push_str("\":");
}

/// `_attr(key, v)` of a str.
pub(crate) fn push_kv_str(out: &mut String, key: &str, v: &str) {
    push_key(out, key, "stringValue");
    push_str(out, v);
    out.push_str("}}");
}

/// `_attr(key, v)` of an int (OTLP/JSON writes an int64 as a string).
pub(crate) fn push_kv_int(out: &mut String, key: &str, v: i64) {
    push_key(out, key, "intValue");
    out.push('"');
    push_i64(out, v);
    out.push_str("\"}}");
}

/// `_attr(key, v)` of a float: nothing for a non-finite one; returns whether it wrote.
pub(crate) fn push_kv_float(out: &mut String, key: &str, v: f64) -> bool {
    if !v.is_finite() {
        return false;
    }
    push_key(out, key, "doubleValue");
    push_float(out, v);
    out.push_str("}}");
    true
}

/// `_attr(key, v)`: one KeyValue, nothing for None or a non-finite float. Returns whether it wrote.
pub(crate) fn push_attr(out: &mut String, key: &str, v: &Bound<'_, PyAny>) -> R<bool> {
    if let Ok(s) = v.cast_exact::<PyString>() {
        push_kv_str(out, key, s.to_str()?);
    } else if v.is_exact_instance_of::<PyInt>() {
        push_kv_int(out, key, v.extract()?); // beyond i64: a decline
    } else if v.is_exact_instance_of::<PyFloat>() {
        return Ok(push_kv_float(out, key, v.extract()?));
    } else if v.is_exact_instance_of::<PyBool>() {
        push_key(out, key, "boolValue");
        out.push_str(if v.is_truthy()? { "true}}" } else { "false}}" });
    } else if v.is_none() {
        return Ok(false);
    } else {
        push_kv_str(out, key, v.str()?.to_str()?);
    }
    Ok(true)
}

/// `_attrs(attrs)`: the dict's KeyValues joined by commas (its keys are the encoder's own names).
pub(crate) fn push_attrs(out: &mut String, attrs: Option<&Bound<'_, PyDict>>) -> R<()> {
    let Some(attrs) = attrs else { return Ok(()) };
    let mut first = true;
    for (k, v) in attrs.iter() {
        let k = k.cast_exact::<PyString>().map_err(|_| Decline)?;
        let mark = out.len();
        if !first {
            out.push(',');
        }
        if push_attr(out, k.to_str()?, &v)? {
            first = false;
        } else {
            out.truncate(mark);
        }
    }
    Ok(())
}

/// One event of `_events`: its name (one of ours), time and attributes (none: `[]`).
pub(crate) fn push_event(out: &mut String, name: &str, t: f64, attrs: Option<&Bound<'_, PyDict>>) -> R<()> {
    out.push_str("{\"name\":\"");
    out.push_str(name);
    out.push_str("\",\"timeUnixNano\":\"");
    push_ns(out, t)?;
    out.push_str("\",\"attributes\":[");
    push_attrs(out, attrs)?;
    out.push_str("]}");
    Ok(())
}

/// `_events(evs)`: each (name, time, attributes) as an OTLP/JSON event, joined by commas.
fn push_events(out: &mut String, events: &Bound<'_, PyList>) -> R<()> {
    for (i, ev) in events.iter().enumerate() {
        let ev = ev.cast_exact::<PyTuple>().map_err(|_| Decline)?;
        if ev.len() != 3 {
            return Err(Decline);
        }
        if i > 0 {
            out.push(',');
        }
        let name = ev.get_item(0)?;
        let attrs = ev.get_item(2)?;
        let attrs = attrs.cast_exact::<PyDict>().map_err(|_| Decline)?;
        push_event(out, name.cast_exact::<PyString>().map_err(|_| Decline)?.to_str()?, time(&ev.get_item(1)?)?, Some(attrs))?;
    }
    Ok(())
}

/// `_status(error)`: nothing, or ERROR with its message.
pub(crate) fn push_status(out: &mut String, error: &str) {
    out.push_str(",\"status\":{\"code\":2,\"message\":");
    push_str(out, error);
    out.push('}');
}

/// Lower-case hex of ``bytes`` (a digest's first bytes: span and trace ids).
pub(crate) fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 * bytes.len());
    for b in bytes {
        s.push(HEX[usize::from(b >> 4)] as char);
        s.push(HEX[usize::from(b & 0xf)] as char);
    }
    s
}

/// `_Trace.span_id`: the first 8 bytes of SHA-256 of `key` (trace id, place), hex; never all zero.
pub(crate) fn span_id(key: &[u8]) -> String {
    let d = Sha256::digest(key);
    let mut s = hex(&d[..8]);
    if d[..8].iter().all(|b| *b == 0) {
        s.replace_range(15.., "1");
    }
    s
}

/// The span's part after its id: parent, name, kind and times (`_Trace.add`'s order).
pub(crate) fn push_span_head(out: &mut String, head: &str, sid: &str, parent: &str, name: &str, s: f64, e: f64) -> R<()> {
    out.push_str(head);
    out.push_str(sid);
    out.push_str("\",\"parentSpanId\":\"");
    out.push_str(parent);
    out.push_str("\",\"name\":\"");
    out.push_str(name);
    out.push_str("\",\"kind\":1,\"startTimeUnixNano\":\"");
    push_ns(out, s)?;
    out.push_str("\",\"endTimeUnixNano\":\"");
    push_ns(out, e)?;
    out.push_str("\",\"attributes\":[");
    Ok(())
}

/// `_Trace.add`: (span id, span text), or None (the Python encoder writes it). ``key`` is the
/// id's input (the trace's hashed prefix and the span's path), ``head`` the trace's
/// `{"traceId":"…","spanId":"`, ``parent`` the parent's id ("" for a root).
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (key, head, parent, name, start, end, attrs, error, events))]
pub fn trace_span(
    key: &str,
    head: &str,
    parent: &str,
    name: &str,
    start: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    attrs: Option<&Bound<'_, PyDict>>,
    error: &Bound<'_, PyAny>,
    events: Option<&Bound<'_, PyList>>,
) -> Option<(String, String)> {
    let f = || -> R<(String, String)> {
        let (s, e) = (time(start)?, time(end)?);
        let sid = span_id(key.as_bytes());
        let mut out = String::with_capacity(512);
        push_span_head(&mut out, head, &sid, parent, name, s, pymax(s, e))?;
        push_attrs(&mut out, attrs)?;
        out.push(']');
        if !error.is_none() {
            push_status(&mut out, error.cast_exact::<PyString>().map_err(|_| Decline)?.to_str()?);
        }
        if let Some(evs) = events.filter(|l| !l.is_empty()) {
            out.push_str(",\"events\":[");
            push_events(&mut out, evs)?;
            out.push(']');
        }
        out.push('}');
        Ok((sid, out))
    };
    f().ok()
}

/// `_attrs(attrs)`, or None.
#[pyfunction]
pub fn trace_attrs(attrs: &Bound<'_, PyDict>) -> Option<String> {
    let mut out = String::with_capacity(64 * attrs.len());
    push_attrs(&mut out, Some(attrs)).ok().map(|_| out)
}

/// `_JOB_ID.fullmatch(v)`: `[A-Za-z0-9_.@:-]{1,255}#[0-9]{1,12}\.[0-9]{1,9}#[0-9]{1,12}`.
pub(crate) fn plain_job_id(v: &str) -> bool {
    let b = v.as_bytes();
    // the schedd, up to the first '#' (none of its characters is a '#')
    let Some(h1) = b.iter().position(|c| *c == b'#') else { return false };
    if h1 == 0 || h1 > 255 || !b[..h1].iter().all(|c| c.is_ascii_alphanumeric() || b"_.@:-".contains(c)) {
        return false;
    }
    // then digits '.' digits '#' digits, nothing else
    let rest = &b[h1 + 1..];
    let run = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
    let c = run(rest);
    if c == 0 || c > 12 || rest.get(c) != Some(&b'.') {
        return false;
    }
    let rest = &rest[c + 1..];
    let p = run(rest);
    if p == 0 || p > 9 || rest.get(p) != Some(&b'#') {
        return false;
    }
    let q = &rest[p + 1..];
    !q.is_empty() && q.len() <= 12 && q.iter().all(u8::is_ascii_digit)
}

/// The names `_jobs` writes, in `pilot_traces._NATIVE_JOB_NAMES`' order.
pub(crate) struct Names {
    span: String,
    id: String,
    category: String,
    cpus: String,
    cpu_seconds: String,
    cpu_used: String,
    memory: String,
    memory_used: String,
    gpus: String,
    signal: String,
    exit_code: String,
    preempted: String,
    evicted: String,
    pub(crate) preemption: String, // the category whose jobs carry a preempted event
}

impl Names {
    pub(crate) fn new(v: Vec<String>) -> R<Self> {
        let [span, id, category, cpus, cpu_seconds, cpu_used, memory, memory_used, gpus, signal, exit_code, preempted, evicted, preemption]: [String; 14] =
            v.try_into().map_err(|_| Decline)?;
        Ok(Names {
            span,
            id,
            category,
            cpus,
            cpu_seconds,
            cpu_used,
            memory,
            memory_used,
            gpus,
            signal,
            exit_code,
            preempted,
            evicted,
            preemption,
        })
    }
}

/// A user job (`model.Job`) as the job spans need it: each attribute read once, the times and
/// cores checked as the encoder writes them (anything else: a decline).
pub(crate) struct JobView<'py> {
    pub(crate) start: f64,
    pub(crate) end: Option<f64>,
    pub(crate) cpus: i64,
    pub(crate) exited: bool,
    pub(crate) by_signal: bool,
    gid: Option<Bound<'py, PyString>>,
    used: Bound<'py, PyAny>,
    memory: Bound<'py, PyAny>,
    memory_used: Bound<'py, PyAny>,
    gpus: Bound<'py, PyAny>,
    signal: Bound<'py, PyAny>,
    code: Bound<'py, PyAny>,
}

impl<'py> JobView<'py> {
    pub(crate) fn read(py: Python<'py>, j: &Bound<'py, PyAny>) -> R<Self> {
        let start = time(&j.getattr(pyo3::intern!(py, "start"))?)?;
        let end = j.getattr(pyo3::intern!(py, "end"))?;
        let end = if end.is_none() { None } else { Some(time(&end)?) };
        let cpus = j.getattr(pyo3::intern!(py, "cpus"))?;
        if !cpus.is_exact_instance_of::<PyInt>() {
            return Err(Decline);
        }
        let cpus: i64 = cpus.extract()?;
        if cpus.abs() > 1 << 53 {
            return Err(Decline); // exact as a float only up to 2^53
        }
        let gid = j.getattr(pyo3::intern!(py, "global_job_id"))?;
        let gid = if gid.is_none() { None } else { Some(gid.cast_into_exact::<PyString>().map_err(|_| Decline)?) };
        Ok(JobView {
            start,
            end,
            cpus,
            exited: j.getattr(pyo3::intern!(py, "exited"))?.is_truthy()?,
            by_signal: j.getattr(pyo3::intern!(py, "exit_by_signal"))?.is_truthy()?,
            gid,
            used: j.getattr(pyo3::intern!(py, "cpu_seconds"))?,
            memory: j.getattr(pyo3::intern!(py, "memory_mb"))?,
            memory_used: j.getattr(pyo3::intern!(py, "memory_usage_mb"))?,
            gpus: j.getattr(pyo3::intern!(py, "gpus"))?,
            signal: j.getattr(pyo3::intern!(py, "exit_signal"))?,
            code: j.getattr(pyo3::intern!(py, "exit_code"))?,
        })
    }

    /// Its GlobalJobId as written: as it is when HTCondor's shape (nothing to escape or mask),
    /// else through ``scrub`` (the pilot's Scrubber.text; None: decline, Python scrubs it).
    pub(crate) fn job_id(&self, scrub: Option<Scrub<'_, 'py>>) -> R<Option<Cow<'_, str>>> {
        let Some(g) = &self.gid else { return Ok(None) };
        let text = g.to_str()?;
        if plain_job_id(text) {
            return Ok(Some(Cow::Borrowed(text)));
        }
        match scrub {
            Some(f) => f(g).map(|t| Some(Cow::Owned(t))),
            None => Err(Decline),
        }
    }
}

/// A text scrubbed by the pilot's Scrubber (its `text`, bounded).
pub(crate) type Scrub<'a, 'py> = &'a dyn Fn(&Bound<'py, PyString>) -> R<String>;

/// What every job span of a pilot shares: HTCondor's [cs, ce], the pilot's end, the rules.
pub(crate) struct JobContext<'a> {
    pub(crate) names: &'a Names,
    pub(crate) head: &'a str,
    pub(crate) parent: &'a str,
    pub(crate) cs: f64,
    pub(crate) ce: f64,
    pub(crate) pilot_end: f64,
    pub(crate) grace: f64,
    pub(crate) poll_lag: f64,
    pub(crate) evictions: &'a [f64],
}

/// One job's span (`_jobs`' loop): ``sid`` its id, ``cat`` its category's value, ``gid`` its
/// GlobalJobId as written (see JobView::job_id); ``is_last``: the pilot's last job (it carries
/// the evictions, and a preemption when it did not exit near the pilot's end).
pub(crate) fn push_job(out: &mut String, x: &JobContext<'_>, sid: &str, j: &JobView<'_>, cat: &str, gid: Option<&str>, is_last: bool) -> R<()> {
    let n = x.names;
    let s = pymin(pymax(j.start, x.cs), x.ce);
    let e = pymin(pymax(j.end.unwrap_or(x.ce), s), x.ce);
    let cpu_secs = (j.cpus.max(0) as f64) * (e - s);
    push_span_head(out, x.head, sid, x.parent, &n.span, s, e)?;
    // the KeyValues in the encoder's order, each followed by a comma (the last one cut)
    if let Some(g) = gid {
        push_kv_str(out, &n.id, g);
        out.push(',');
    }
    push_kv_str(out, &n.category, cat);
    out.push(',');
    push_kv_int(out, &n.cpus, j.cpus);
    out.push(',');
    if push_kv_float(out, &n.cpu_seconds, cpu_secs) {
        out.push(',');
    }
    for (key, v) in [(&n.cpu_used, &j.used), (&n.memory, &j.memory), (&n.memory_used, &j.memory_used), (&n.gpus, &j.gpus)] {
        if push_attr(out, key, v)? {
            out.push(',');
        }
    }
    let mut status = String::new();
    if j.by_signal {
        let sig = &j.signal;
        if push_attr(out, &n.signal, sig)? {
            out.push(',');
        }
        let text = if sig.is_none() {
            "None".to_string()
        } else if sig.is_exact_instance_of::<PyInt>() {
            sig.extract::<i64>()?.to_string()
        } else {
            return Err(Decline);
        };
        push_status(&mut status, &format!("signal {text}"));
    } else if !j.code.is_none() && push_attr(out, &n.exit_code, &j.code)? {
        out.push(',');
    }
    out.pop(); // the last KeyValue's comma
    out.push(']');
    out.push_str(&status);
    let mut evs: Vec<(&str, f64)> = Vec::new();
    if cat == n.preemption || (is_last && x.pilot_end - e <= x.grace && !j.exited) {
        evs.push((&n.preempted, e));
    }
    if is_last {
        evs.extend(x.evictions.iter().filter(|t| s <= **t && **t <= e + x.poll_lag).map(|t| (n.evicted.as_str(), pymin(*t, e))));
    }
    if !evs.is_empty() {
        out.push_str(",\"events\":[");
        for (k, (name, t)) in evs.iter().enumerate() {
            if k > 0 {
                out.push(',');
            }
            push_event(out, name, *t, None)?;
        }
        out.push(']');
    }
    out.push('}');
    Ok(())
}

/// `_jobs`' loop: the spans of ``jobs`` (the pilot's first by start, in that order) with their
/// categories' values ``cats``, clamped to HTCondor's [cs, ce]; ``last``: the list's last job is
/// the pilot's last. ``hashed``: the ids' input up to the job's number; ``parent``: the condor
/// span's id. A pilot traced live takes this path (`trace_pilot` writes a stock pilot's jobs).
#[allow(clippy::too_many_arguments)]
#[pyfunction]
pub fn trace_jobs<'py>(
    py: Python<'py>,
    hashed: &str,
    head: &str,
    parent: &str,
    jobs: &Bound<'py, PyList>,
    cats: Vec<String>,
    cs: &Bound<'py, PyAny>,
    ce: &Bound<'py, PyAny>,
    pilot_end: &Bound<'py, PyAny>,
    grace: f64,
    poll_lag: f64,
    last: bool,
    evictions: &Bound<'py, PyTuple>,
    names: Vec<String>,
) -> Option<Vec<String>> {
    let f = || -> R<Vec<String>> {
        let names = Names::new(names)?;
        if cats.len() != jobs.len() {
            return Err(Decline);
        }
        let evictions: Vec<f64> = evictions.iter().map(|t| time(&t)).collect::<R<_>>()?;
        let x = JobContext { names: &names, head, parent, cs: time(cs)?, ce: time(ce)?, pilot_end: time(pilot_end)?, grace, poll_lag, evictions: &evictions };
        let count = jobs.len();
        let mut spans = Vec::with_capacity(count);
        let mut key = String::with_capacity(hashed.len() + 4);
        for (i, (j, cat)) in jobs.iter().zip(&cats).enumerate() {
            let j = JobView::read(py, &j)?;
            let gid = j.job_id(None)?;
            key.clear();
            key.push_str(hashed);
            push_u64(&mut key, i as u64);
            let mut out = String::with_capacity(1024);
            push_job(&mut out, &x, &span_id(key.as_bytes()), &j, cat, gid.as_deref(), last && i + 1 == count)?;
            spans.push(out);
        }
        Ok(spans)
    };
    f().ok()
}
