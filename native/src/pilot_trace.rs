//! A stock pilot's whole trace in one call: `pilot_traces.build` for a pilot not traced live,
//! byte for byte what the Python encoder writes (its reference), from the same facts.
//!
//! One call a pilot, where the Python encoder made ~100 µs of Python around the compiled spans
//! (benchmarks/results/pilot-traces.md). What stays Python is what is rare and holds policy: a
//! failed validation's attributes (`_failure`), a hold's (`_hold_attrs`: its class), the
//! pilot's texts scrubbed (`Scrubber.text`), each called from here when a pilot has one. A
//! decline (None) leaves the pilot to the Python encoder, which restores the scrubber's tally.

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use sha2::{Digest, Sha256};

use crate::trace::{
    hex, push_attr, push_attrs, push_event, push_job, push_kv_float, push_kv_int, push_kv_str, push_span_head, push_status,
    push_u64, pymax, pymin, span_id, time, Decline, JobContext, JobView, Names, R,
};

/// The names a stock pilot's spans are written with (`pilot_traces._NATIVE_PILOT_NAMES`).
struct PilotNames {
    root: String,
    queued: String,
    held: String,
    running: String,
    validation: String,
    condor: String,
    cleanup: String,
    jobs_rest: String,
    outcome: String,
    accuracy: String,
    cpu_seconds: String, // a prefix: the category's value follows
    gpu_seconds: String, // likewise
    exit_code: String,
    holds_dropped: String,
    hold_reason: String,
    phase: String,
    site: String,
    cpus: String,
    job_count: String,
    job_cpu_seconds: String, // a prefix of the summary's: ".<category>" follows
    removed: String,
    held_event: String,
    evicted: String,
    grid_submit: String,
    validation_failed: String,
    service_name: String,
    service_pilot: String,
    conventions: String,
    version: String,
    factory: String,
    entry: String,
    client: String,
    cluster: String,
    proc_: String,
    trace_source: String,
    event_log: String, // the event log's source name
    goodput: String,
    misconfiguration: String,
}

impl PilotNames {
    fn new(d: &Bound<'_, PyDict>) -> PyResult<Self> {
        let get = |k: &str| -> PyResult<String> {
            d.get_item(k)?.ok_or_else(|| pyo3::exceptions::PyKeyError::new_err(k.to_string()))?.extract()
        };
        Ok(PilotNames {
            root: get("SPAN_PILOT")?,
            queued: get("SPAN_QUEUED")?,
            held: get("SPAN_HELD")?,
            running: get("SPAN_RUNNING")?,
            validation: get("SPAN_VALIDATION")?,
            condor: get("SPAN_CONDOR")?,
            cleanup: get("SPAN_CLEANUP")?,
            jobs_rest: get("SPAN_JOBS_REST")?,
            outcome: get("OUTCOME")?,
            accuracy: get("ACCURACY")?,
            cpu_seconds: get("CPU_SECONDS")?,
            gpu_seconds: get("GPU_SECONDS")?,
            exit_code: get("EXIT_CODE")?,
            holds_dropped: get("HOLDS_DROPPED")?,
            hold_reason: get("HOLD_REASON")?,
            phase: get("PHASE")?,
            site: get("SITE")?,
            cpus: get("CPUS")?,
            job_count: get("JOB_COUNT")?,
            job_cpu_seconds: get("JOB_CPU_SECONDS")?,
            removed: get("EVENT_REMOVED")?,
            held_event: get("EVENT_HELD")?,
            evicted: get("EVENT_EVICTED")?,
            grid_submit: get("EVENT_GRID_SUBMIT")?,
            validation_failed: get("EVENT_VALIDATION_FAILED")?,
            service_name: get("SERVICE_NAME")?,
            service_pilot: get("SERVICE_PILOT")?,
            conventions: get("CONVENTIONS")?,
            version: get("VERSION")?,
            factory: get("FACTORY")?,
            entry: get("ENTRY")?,
            client: get("CLIENT")?,
            cluster: get("CONDOR_CLUSTER")?,
            proc_: get("CONDOR_PROC")?,
            trace_source: get("TRACE_SOURCE")?,
            event_log: get("SOURCE_EVENT_LOG")?,
            goodput: get("GOODPUT")?,
            misconfiguration: get("MISCONFIGURATION")?,
        })
    }
}

/// The encoder of one factory and rule set (`pilot_traces._encoder` keeps one a key).
#[pyclass(frozen, module = "gwms_obs_native")]
pub struct PilotEncoder {
    n: PilotNames,
    jobs: Names,
    factory: String,
    grace: f64,
    early: f64,
    max_job_spans: usize,
    poll_lag: f64,
    max_value: usize,
    id_version: String,
    scope: String,
    failure: Py<PyAny>,    // _failure(acc, facts, sc)
    hold_attrs: Py<PyAny>, // _hold_attrs(h, sc)
    holds: Py<PyAny>,      // _holds(times)
}

#[pymethods]
impl PilotEncoder {
    #[new]
    #[allow(clippy::too_many_arguments)]
    fn new(
        names: &Bound<'_, PyDict>,
        job_names: Vec<String>,
        factory: String,
        grace: f64,
        early: f64,
        max_job_spans: usize,
        poll_lag: f64,
        max_value: usize,
        id_version: String,
        scope: String,
        failure: Py<PyAny>,
        hold_attrs: Py<PyAny>,
        holds: Py<PyAny>,
    ) -> PyResult<Self> {
        let jobs = Names::new(job_names).map_err(|_| pyo3::exceptions::PyValueError::new_err("job names"))?;
        Ok(PilotEncoder {
            n: PilotNames::new(names)?,
            jobs,
            factory,
            grace,
            early,
            max_job_spans,
            poll_lag,
            max_value,
            id_version,
            scope,
            failure,
            hold_attrs,
            holds,
        })
    }
}

fn opt_time(v: Bound<'_, PyAny>) -> R<Option<f64>> {
    if v.is_none() { Ok(None) } else { time(&v).map(Some) }
}

/// An exact int (not a bool) through i64.
fn exact_int(v: &Bound<'_, PyAny>) -> R<i64> {
    if !v.is_exact_instance_of::<PyInt>() {
        return Err(Decline);
    }
    Ok(v.extract()?)
}

/// A number that Python adds to a float: a float, or an int exact as one.
fn number(v: &Bound<'_, PyAny>) -> R<f64> {
    if v.is_exact_instance_of::<PyFloat>() {
        return Ok(v.extract()?);
    }
    let n = exact_int(v)?;
    if n.abs() > 1 << 53 {
        return Err(Decline);
    }
    Ok(n as f64)
}

fn exact_str<'a>(v: &'a Bound<'_, PyAny>) -> R<&'a str> {
    Ok(v.cast_exact::<PyString>().map_err(|_| Decline)?.to_str()?)
}

/// `s[:limit]` (code points).
fn prefix(s: &str, limit: usize) -> &str {
    match s.char_indices().nth(limit) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

/// `time.strftime("%Y-%m-%d", time.gmtime(t))` for the years 1000-9999 (else a decline: glibc
/// writes other years without four digits).
fn utc_day(t: f64) -> R<String> {
    let secs = t.floor();
    if !(-30_610_224_000.0..253_402_300_800.0).contains(&secs) {
        return Err(Decline);
    }
    let days = (secs as i64).div_euclid(86_400);
    // days since 1970-01-01 to a civil date (H. Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    Ok(format!("{y:04}-{m:02}-{d:02}"))
}

/// `pilot_trace_id`: SHA-256 of the pilot's identity, its first 16 bytes in lower-case hex.
fn trace_id(enc: &PilotEncoder, entry: &str, cluster: i64, proc_: i64, start: f64) -> R<String> {
    let key = format!("{}\n{}\n{entry}\n{cluster}.{proc_}\n{}", enc.id_version, enc.factory, utc_day(start)?);
    Ok(hex(&Sha256::digest(key.as_bytes())[..16]))
}

/// An event: its name, time and attributes (a dict of the Python encoder's, or none).
struct Event<'py> {
    name: String,
    t: f64,
    attrs: Option<Bound<'py, PyDict>>,
}

fn ev<'py>(name: &str, t: f64, attrs: Option<Bound<'py, PyDict>>) -> Event<'py> {
    Event { name: name.to_string(), t, attrs }
}

/// The KeyValues of a span's attribute list, commas between (`_attrs`' order).
struct Kvs<'a> {
    out: &'a mut String,
    first: bool,
}

impl Kvs<'_> {
    fn sep(&mut self) {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
    }
    fn str(&mut self, key: &str, v: &str) {
        self.sep();
        push_kv_str(self.out, key, v);
    }
    /// A phase span's one attribute (``gwms.phase``: its name).
    fn phase(&mut self, key: &str, name: &str) -> R<()> {
        self.str(key, name);
        Ok(())
    }
    fn int(&mut self, key: &str, v: i64) {
        self.sep();
        push_kv_int(self.out, key, v);
    }
    fn float(&mut self, key: &str, v: f64) {
        if v.is_finite() {
            self.sep();
            push_kv_float(self.out, key, v);
        }
    }
    fn dict(&mut self, d: Option<&Bound<'_, PyDict>>) -> R<()> {
        let Some(d) = d.filter(|d| !d.is_empty()) else { return Ok(()) };
        let mark = self.out.len();
        if !self.first {
            self.out.push(',');
        }
        let at = self.out.len();
        push_attrs(self.out, Some(d))?;
        if self.out.len() == at {
            self.out.truncate(mark); // every value left out
        } else {
            self.first = false;
        }
        Ok(())
    }
    fn any(&mut self, key: &str, v: &Bound<'_, PyAny>) -> R<()> {
        let mark = self.out.len();
        if !self.first {
            self.out.push(',');
        }
        if push_attr(self.out, key, v)? {
            self.first = false;
        } else {
            self.out.truncate(mark);
        }
        Ok(())
    }
}

/// The pilot's ResourceSpans being written: its resource first, then each span as it comes.
struct Spans {
    trace_id: String,
    head: String, // {"traceId":"…","spanId":"
    text: String,
    count: usize,
}

impl Spans {
    /// Before a span's text: the comma after the one before.
    fn next(&mut self) {
        if self.count > 0 {
            self.text.push(',');
        }
        self.count += 1;
    }

    /// `_Trace.add`: a span at ``path`` (its id: SHA-256 of "<trace id>/<path>"); returns its id.
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        path: &str,
        parent: &str,
        name: &str,
        start: f64,
        end: f64,
        attrs: impl FnOnce(&mut Kvs<'_>) -> R<()>,
        error: Option<&str>,
        events: &[Event<'_>],
    ) -> R<String> {
        let mut key = String::with_capacity(self.trace_id.len() + 1 + path.len());
        key.push_str(&self.trace_id);
        key.push('/');
        key.push_str(path);
        let sid = span_id(key.as_bytes());
        self.next();
        let out = &mut self.text;
        push_span_head(out, &self.head, &sid, parent, name, start, pymax(start, end))?;
        attrs(&mut Kvs { out, first: true })?;
        out.push(']');
        if let Some(e) = error {
            push_status(out, e);
        }
        if !events.is_empty() {
            out.push_str(",\"events\":[");
            for (i, e) in events.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                push_event(out, &e.name, e.t, e.attrs.as_ref())?;
            }
            out.push(']');
        }
        out.push('}');
        Ok(sid)
    }
}

fn clamp(t: Option<f64>, lo: f64, hi: f64) -> Option<f64> {
    t.map(|t| pymin(pymax(t, lo), hi))
}

/// `encode(acc, facts, factory)` for a pilot not traced live: (its ResourceSpans' text, spans),
/// or None (the Python encoder writes it). ``sc``: the batch's Scrubber.
#[pyfunction]
pub fn trace_pilot<'py>(
    py: Python<'py>,
    enc: &Bound<'py, PilotEncoder>,
    acc: &Bound<'py, PyAny>,
    facts: &Bound<'py, PyAny>,
    sc: &Bound<'py, PyAny>,
) -> Option<(Bound<'py, PyBytes>, usize)> {
    let got = crate::guarded(|| pilot(py, enc.get(), acc, facts, sc))?;
    // bytes: what the request is made of (a str would be checked for ASCII, then encoded again)
    Some((PyBytes::new(py, got.0.as_bytes()), got.1))
}

fn pilot<'py>(
    py: Python<'py>,
    enc: &PilotEncoder,
    acc: &Bound<'py, PyAny>,
    facts: &Bound<'py, PyAny>,
    sc: &Bound<'py, PyAny>,
) -> R<(String, usize)> {
    let n = &enc.n;
    let a = |name: &Bound<'py, PyString>| acc.getattr(name);
    let cluster = exact_int(&a(pyo3::intern!(py, "cluster"))?)?;
    let proc_ = exact_int(&a(pyo3::intern!(py, "proc"))?)?;
    let entry_o = a(pyo3::intern!(py, "entry"))?;
    let client_o = a(pyo3::intern!(py, "client"))?;
    let site_o = a(pyo3::intern!(py, "site"))?;
    let (entry, client, site) = (exact_str(&entry_o)?, exact_str(&client_o)?, exact_str(&site_o)?);
    let acc_start = time(&a(pyo3::intern!(py, "start"))?)?;
    let acc_end = time(&a(pyo3::intern!(py, "end"))?)?;
    let acc_cpus = exact_int(&a(pyo3::intern!(py, "cpus"))?)?;
    let condor_started = a(pyo3::intern!(py, "condor_started"))?.is_truthy()?;
    let partition = a(pyo3::intern!(py, "partition"))?;
    let outcome_o = a(pyo3::intern!(py, "outcome"))?;
    let outcome = outcome_o.cast::<PyString>().map_err(|_| Decline)?.to_str()?; // a StrEnum: its value
    let accuracy_o = partition.getattr(pyo3::intern!(py, "accuracy"))?;
    let accuracy = accuracy_o.cast::<PyString>().map_err(|_| Decline)?.to_str()?;

    let f = |name: &Bound<'py, PyString>| facts.getattr(name);
    let source_o = f(pyo3::intern!(py, "source"))?;
    let source = source_o.cast::<PyString>().map_err(|_| Decline)?.to_str()?; // a StrEnum (catalogue.Source)
    let out = Some(f(pyo3::intern!(py, "out"))?).filter(|o| !o.is_none());
    let err = Some(f(pyo3::intern!(py, "err"))?).filter(|o| !o.is_none());
    let times = Some(f(pyo3::intern!(py, "times"))?).filter(|o| !o.is_none());
    let from_event_log = source == n.event_log;

    let tid = trace_id(enc, entry, cluster, proc_, acc_start)?;
    let mut spans = Spans {
        head: format!("{{\"traceId\":\"{tid}\",\"spanId\":\""),
        trace_id: tid,
        text: String::with_capacity(16_384),
        count: 0,
    };
    // the resource: the factory's names (its directories, its descript), the job id, the sources
    spans.text.push_str("{\"resource\":{\"attributes\":[");
    {
        let mut k = Kvs { out: &mut spans.text, first: true };
        k.str(&n.service_name, &n.service_pilot);
        k.str(&n.conventions, &n.version);
        k.str(&n.factory, &enc.factory);
        k.str(&n.entry, prefix(entry, enc.max_value));
        k.str(&n.client, prefix(client, enc.max_value));
        k.str(&n.site, prefix(site, enc.max_value));
        k.int(&n.cluster, cluster);
        k.int(&n.proc_, proc_);
        if times.is_some() && !from_event_log {
            k.str(&n.trace_source, &format!("{source}+{}", n.event_log));
        } else {
            k.str(&n.trace_source, source);
        }
    }
    spans.text.push_str("]},\"scopeSpans\":[{\"scope\":");
    spans.text.push_str(&enc.scope);
    spans.text.push_str(",\"spans\":[");

    // the event log's times
    let t = |name: &Bound<'py, PyString>| -> R<Option<f64>> {
        match &times {
            Some(x) => opt_time(x.getattr(name)?),
            None => Ok(None),
        }
    };
    let submitted = t(pyo3::intern!(py, "submitted"))?;
    let ended = t(pyo3::intern!(py, "ended"))?;
    let start = submitted.map_or(acc_start, |s| pymin(acc_start, s));
    let end = ended.map_or(acc_end, |e| pymax(acc_end, e));

    // the root's attributes: outcome, accuracy, the partition's seconds by category (sorted)
    let mut seconds: Vec<(String, f64)> = Vec::new();
    for (prefix_, attr) in [(&n.cpu_seconds, pyo3::intern!(py, "cpu")), (&n.gpu_seconds, pyo3::intern!(py, "gpu"))] {
        let d = partition.getattr(attr)?;
        let d = d.cast_exact::<PyDict>().map_err(|_| Decline)?;
        let mut items: Vec<(String, f64)> = Vec::with_capacity(d.len());
        for (k, v) in d.iter() {
            let k = k.cast::<PyString>().map_err(|_| Decline)?.to_str()?.to_string();
            if !v.is_exact_instance_of::<PyFloat>() {
                return Err(Decline);
            }
            items.push((k, v.extract()?));
        }
        items.sort_by(|x, y| x.0.cmp(&y.0));
        seconds.extend(items.into_iter().map(|(k, v)| (format!("{prefix_}{k}"), v)));
    }
    let mut exit_code: Option<i64> = None;
    if let Some(o) = &out {
        let c = o.getattr(pyo3::intern!(py, "exit_code"))?;
        if !c.is_none() {
            let c = exact_int(&c)?;
            if c != 0 {
                exit_code = Some(c);
            }
        }
    }
    let root_error = exit_code.map(|c| format!("exit code {c}"));
    let scrub = |s: &Bound<'py, PyAny>| -> R<Bound<'py, PyAny>> { Ok(sc.call_method1(pyo3::intern!(py, "text"), (s, enc.max_value))?) };
    let mut root_events: Vec<Event<'py>> = Vec::new();
    let mut run_events: Vec<Event<'py>> = Vec::new();
    let mut queue_holds: Vec<(f64, Option<f64>, Bound<'py, PyDict>)> = Vec::new();
    let mut evictions: Vec<f64> = Vec::new();
    let mut holds_dropped: Option<i64> = None;
    let mut first: Option<f64> = None;
    let mut grid_submitted: Option<f64> = None;
    if let Some(tm) = &times {
        let end_event = tm.getattr(pyo3::intern!(py, "end_event"))?;
        let end_event = if end_event.is_none() { None } else { Some(exact_str(&end_event)?.to_string()) };
        if end_event.as_deref() == Some("aborted") {
            if let Some(ended) = ended {
                // the last hold's reason, which the factory removed it for
                let reason = tm.getattr(pyo3::intern!(py, "held_reason"))?;
                let d = PyDict::new(py);
                d.set_item(&n.hold_reason, if reason.is_truthy()? { scrub(&reason)? } else { py.None().into_bound(py) })?;
                root_events.push(ev(&n.removed, ended, Some(d)));
            }
        }
        first = match t(pyo3::intern!(py, "first_started"))? {
            Some(x) => Some(x),
            None => t(pyo3::intern!(py, "started"))?,
        };
        grid_submitted = t(pyo3::intern!(py, "grid_submitted"))?;
        let has_holds = tm.getattr(pyo3::intern!(py, "holds"))?.is_truthy()?;
        if has_holds || (end_event.as_deref() == Some("held") && ended.is_some()) {
            let holds = enc.holds.bind(py).call1((tm,))?;
            for h in holds.try_iter()? {
                let h = h?;
                let attrs = enc.hold_attrs.bind(py).call1((&h, sc))?.cast_into_exact::<PyDict>().map_err(|_| Decline)?;
                let held = time(&h.getattr(pyo3::intern!(py, "held"))?)?;
                if submitted.is_some() && first.is_none_or(|f| held < f) {
                    queue_holds.push((held, opt_time(h.getattr(pyo3::intern!(py, "released"))?)?, attrs));
                } else if acc_start <= held && held <= acc_end + enc.poll_lag {
                    run_events.push(ev(&n.held_event, pymin(held, acc_end), Some(attrs)));
                } else {
                    root_events.push(ev(&n.held_event, held, Some(attrs)));
                }
            }
        }
        let dropped = tm.getattr(pyo3::intern!(py, "holds_dropped"))?;
        if dropped.is_truthy()? {
            holds_dropped = Some(exact_int(&dropped)?);
        }
        let evs = tm.getattr(pyo3::intern!(py, "evictions"))?;
        let evs = evs.cast_exact::<PyTuple>().map_err(|_| Decline)?;
        for x in evs.iter() {
            let x = time(&x)?;
            evictions.push(x);
            if acc_start <= x && x <= acc_end + enc.poll_lag {
                run_events.push(ev(&n.evicted, pymin(x, acc_end), None));
            } else {
                root_events.push(ev(&n.evicted, x, None));
            }
        }
    }
    let root = spans.add(
        "",
        "",
        &n.root,
        start,
        end,
        |k| {
            k.str(&n.outcome, outcome);
            k.str(&n.accuracy, accuracy);
            for (key, v) in &seconds {
                k.float(key, *v);
            }
            if let Some(c) = exit_code {
                k.int(&n.exit_code, c);
            }
            if let Some(d) = holds_dropped {
                k.int(&n.holds_dropped, d);
            }
            Ok(())
        },
        root_error.as_deref(),
        &root_events,
    )?;

    // queued: the factory's submit to the CE's first execute (the event log only)
    if let Some(submitted) = submitted {
        let q_end = match first {
            Some(f) => f,
            None => match ended {
                Some(e) if e != 0.0 => e, // `times.ended or end`
                _ => end,
            },
        };
        let q_end = pymax(submitted, pymin(q_end, end));
        let evs: Vec<Event<'py>> = grid_submitted.map(|g| ev(&n.grid_submit, g, None)).into_iter().collect();
        let q = spans.add(&n.queued, &root, &n.queued, submitted, q_end, |k| k.phase(&n.phase, &n.queued), None, &evs)?;
        for (i, (held, released, attrs)) in queue_holds.iter().enumerate() {
            let held_at = pymax(submitted, pymin(*held, q_end));
            let held_end = released.map_or(q_end, |r| pymin(r, q_end));
            let path = if i == 0 { format!("{}/held", n.queued) } else { format!("{}/held/{i}", n.queued) };
            spans.add(
                &path,
                &q,
                &n.held,
                held_at,
                held_end,
                |k| {
                    k.str(&n.phase, &n.held);
                    k.dict(Some(attrs))
                },
                None,
                &[],
            )?;
        }
    }

    // running: the worker node's part
    run_events.sort_by(|x, y| x.t.partial_cmp(&y.t).unwrap_or(std::cmp::Ordering::Equal));
    let run = spans.add(
        &n.running,
        &root,
        &n.running,
        acc_start,
        acc_end,
        |k| {
            k.str(&n.site, site);
            k.int(&n.cpus, acc_cpus);
            Ok(())
        },
        None,
        &run_events,
    )?;
    let (lo, hi) = (acc_start, acc_end);
    let (mut condor_start, mut condor_end) = (None, None);
    if condor_started {
        if let Some(o) = &out {
            condor_start = clamp(opt_time(o.getattr(pyo3::intern!(py, "condor_start"))?)?, lo, hi);
            condor_end = clamp(Some(opt_time(o.getattr(pyo3::intern!(py, "condor_end"))?)?.unwrap_or(hi)), lo, hi);
        } else {
            let d = a(pyo3::intern!(py, "condor_duration"))?;
            if !d.is_none() {
                // completed_jobs: HTCondor put last (as the accounting does)
                condor_end = Some(hi);
                condor_start = Some(pymax(lo, hi - number(&d)?));
            }
        }
    }
    let mut val_end = condor_start;
    if val_end.is_none() {
        if let Some(o) = &out {
            val_end = clamp(opt_time(o.getattr(pyo3::intern!(py, "validation_end"))?)?, lo, hi);
        }
    }
    if val_end.is_none() {
        let d = a(pyo3::intern!(py, "validation_duration"))?;
        if !d.is_none() {
            val_end = Some(pymin(hi, lo + number(&d)?));
        }
    }
    // the failed scripts of the long XML: the first one, and the first with an end
    let (mut first_bad, mut first_bad_end) = (None, None);
    if let Some(e) = &err {
        let scripts = e.getattr(pyo3::intern!(py, "scripts"))?;
        for s in scripts.cast_exact::<PyList>().map_err(|_| Decline)?.iter() {
            if s.getattr(pyo3::intern!(py, "ok"))?.is_truthy()? {
                continue;
            }
            if first_bad_end.is_none() {
                let end = s.getattr(pyo3::intern!(py, "end"))?;
                if !end.is_none() {
                    first_bad_end = Some(time(&end)?);
                }
            }
            if first_bad.is_none() {
                first_bad = Some(s);
            }
            if first_bad_end.is_some() {
                break;
            }
        }
    }
    let failed0 = !condor_started && !from_event_log;
    if failed0 {
        // validation failed: up to the failing script's end, else the whole run
        val_end = Some(clamp(first_bad_end, lo, hi).unwrap_or(hi));
    }
    if let Some(val_end) = val_end {
        // _failure decides; it is called when it may find a failure (never otherwise: it would say None)
        let mut maybe = failed0;
        if let Some(o) = &out {
            maybe |= !o.getattr(pyo3::intern!(py, "failure"))?.is_none();
            let status = o.getattr(pyo3::intern!(py, "status"))?;
            maybe |= status.cast_exact::<PyString>().is_ok_and(|s| s.to_str().is_ok_and(|s| s == "ERROR")) || !(status.is_none() || status.is_exact_instance_of::<PyString>());
        }
        if let Some(b) = &first_bad {
            maybe |= !b.getattr(pyo3::intern!(py, "failure"))?.is_none();
        }
        let failed = if maybe {
            let got = enc.failure.bind(py).call1((acc, facts, sc))?;
            if got.is_none() {
                None
            } else {
                let got = got.cast_into_exact::<PyTuple>().map_err(|_| Decline)?;
                let attrs = got.get_item(0)?.cast_into_exact::<PyDict>().map_err(|_| Decline)?;
                let error = exact_str(&got.get_item(1)?)?.to_string();
                Some((attrs, error))
            }
        } else {
            None
        };
        let events: Vec<Event<'py>> = failed.iter().map(|(attrs, _)| ev(&n.validation_failed, val_end, Some(attrs.clone()))).collect();
        spans.add(
            &format!("{}/{}", n.running, n.validation),
            &run,
            &n.validation,
            lo,
            val_end,
            |k| {
                k.str(&n.phase, &n.validation);
                k.dict(failed.as_ref().map(|(attrs, _)| attrs))
            },
            failed.as_ref().map(|(_, e)| e.as_str()),
            &events,
        )?;
    }
    let cleanup = |spans: &mut Spans, from: f64| -> R<()> {
        let path = format!("{}/{}", n.running, n.cleanup);
        spans.add(&path, &run, &n.cleanup, from, hi, |k| k.phase(&n.phase, &n.cleanup), None, &[])?;
        Ok(())
    };
    if let (Some(cs), Some(ce)) = (condor_start, condor_end) {
        let condor_path = format!("{}/{}", n.running, n.condor);
        let condor = spans.add(&condor_path, &run, &n.condor, cs, ce, |k| k.phase(&n.phase, &n.condor), None, &[])?;
        let jobs = match (&out, &err) {
            (Some(_), Some(e)) => Some(e.getattr(pyo3::intern!(py, "jobs"))?).filter(|j| j.is_truthy().unwrap_or(true)),
            _ => None,
        };
        if let Some(jobs) = jobs {
            let jobs = jobs.cast_into_exact::<PyList>().map_err(|_| Decline)?;
            let head = spans.head.clone();
            let x = JobContext {
                names: &enc.jobs,
                head: &head,
                parent: &condor,
                cs,
                ce,
                pilot_end: acc_end,
                grace: enc.grace,
                poll_lag: enc.poll_lag,
                evictions: &evictions,
            };
            let hashed = format!("{}/{condor_path}/job/", spans.trace_id);
            let rest = job_spans(py, enc, &x, &hashed, &jobs, sc, &mut spans)?;
            if let Some((count, s, e, secs)) = rest {
                let path = format!("{condor_path}/jobs");
                spans.add(
                    &path,
                    &condor,
                    &n.jobs_rest,
                    s,
                    e,
                    |k| {
                        k.int(&n.job_count, count);
                        for (cat, v) in &secs {
                            k.float(&format!("{}.{cat}", n.job_cpu_seconds), *v);
                        }
                        Ok(())
                    },
                    None,
                    &[],
                )?;
            }
        } else {
            let count = a(pyo3::intern!(py, "jobs"))?;
            if count.is_truthy()? {
                let path = format!("{condor_path}/jobs");
                spans.add(&path, &condor, &n.jobs_rest, cs, ce, |k| k.any(&n.job_count, &count), None, &[])?;
            }
        }
        if ce < hi {
            cleanup(&mut spans, ce)?;
        }
    } else if let Some(v) = val_end.filter(|v| *v < hi) {
        cleanup(&mut spans, v)?;
    }

    spans.text.push_str("]}]}");
    Ok((spans.text, spans.count))
}

/// The summary span of the jobs beyond the cap: (count, start, end, CPU seconds by category).
type Rest = (i64, f64, f64, Vec<(String, f64)>);

/// `_jobs`: one span per user job (the first ``max_job_spans`` by start), the rest summed.
fn job_spans<'py>(
    py: Python<'py>,
    enc: &PilotEncoder,
    x: &JobContext<'_>,
    hashed: &str,
    jobs: &Bound<'py, PyList>,
    sc: &Bound<'py, PyAny>,
    spans: &mut Spans,
) -> R<Option<Rest>> {
    let views: Vec<JobView<'py>> = jobs.iter().map(|j| JobView::read(py, &j)).collect::<R<_>>()?;
    let mut order: Vec<usize> = (0..views.len()).collect();
    // sorted by (start, index): a stable sort by start (the times are finite)
    order.sort_by(|i, j| views[*i].start.partial_cmp(&views[*j].start).unwrap_or(std::cmp::Ordering::Equal));
    let ending_at = pymin(x.ce, x.pilot_end) - enc.grace;
    let n = &enc.n;
    // classify_job (partition.py), the category's value
    let category = |j: &JobView<'_>| -> &str {
        if j.exited && !j.by_signal {
            return &n.goodput;
        }
        match j.end {
            None => &enc.jobs.preemption,
            Some(end) if end >= ending_at => &enc.jobs.preemption,
            Some(end) if !j.exited || end - j.start < enc.early => &n.misconfiguration,
            Some(_) => &n.goodput,
        }
    };
    let scrub = |g: &Bound<'py, PyString>| -> R<String> {
        let got = sc.call_method1(pyo3::intern!(py, "text"), (g, enc.max_value))?;
        Ok(exact_str(&got)?.to_string())
    };
    let shown = order.len().min(enc.max_job_spans);
    let mut key = String::with_capacity(hashed.len() + 4);
    for (k, i) in order[..shown].iter().enumerate() {
        let j = &views[*i];
        key.clear();
        key.push_str(hashed);
        push_u64(&mut key, k as u64);
        let gid = j.job_id(Some(&scrub))?;
        spans.next();
        push_job(&mut spans.text, x, &span_id(key.as_bytes()), j, category(j), gid.as_deref(), k + 1 == order.len())?;
    }
    if shown == order.len() {
        return Ok(None);
    }
    let rest = &order[shown..];
    let s0 = rest.iter().map(|i| views[*i].start).fold(f64::INFINITY, pymin);
    let s = pymin(pymax(s0, x.cs), x.ce);
    let e = pymin(rest.iter().map(|i| views[*i].end.unwrap_or(x.ce)).fold(s, pymax), x.ce);
    let mut secs: Vec<(String, f64)> = Vec::new();
    for i in rest {
        let j = &views[*i];
        let js = pymin(pymax(j.start, x.cs), x.ce);
        let je = pymin(pymax(j.end.unwrap_or(x.ce), js), x.ce);
        let v = (j.cpus.max(0) as f64) * (je - js);
        let cat = category(j);
        match secs.iter_mut().find(|(c, _)| c == cat) {
            Some((_, total)) => *total += v,
            None => secs.push((cat.to_string(), 0.0 + v)),
        }
    }
    secs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(Some((rest.len() as i64, s, e, secs)))
}
