//! gwms_obs_native: the compiled fast path of gwms-obs's hot readers.
//!
//! Each function returns None when the input is anything but ordinary (a
//! parse error the Python reader would record, or a construct this code does
//! not model exactly); the Python reader, which stays the reference, then
//! reads the input instead. tests/test_native.py holds the two equal on
//! generated and hostile input.

use pyo3::prelude::*;
use pyo3::BoundObject;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

mod classad;
mod completed;
mod err;
mod eventlog;
mod out;
mod pilot_trace;
mod scan;
mod sweep;
mod trace;
mod xml;

/// Bumped whenever a function's arguments or results change shape: the Python
/// side refuses a module of another ABI (a stale build) and reads in Python.
const ABI: u32 = 10;

/// Runs a fast path; a panic (a bug, never an answer) is a decline: the Python reader (or
/// encoder) takes the input instead. PyO3 would raise PanicException, a BaseException that the exporter's
/// per-file guards (`except Exception`) do not catch.
fn guarded<T, E>(f: impl FnOnce() -> Result<T, E>) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok().and_then(Result::ok)
}

fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> PyResult<Bound<'py, PyAny>> {
    v.into_pyobject(py).map(BoundObject::into_any).map(BoundObject::into_bound).map_err(Into::into)
}

/// An integer: through i64 when it fits (PyO3's abi3 i128 conversion is several Python calls).
fn int(py: Python<'_>, v: i128) -> PyResult<Bound<'_, PyAny>> {
    match i64::try_from(v) {
        Ok(v) => obj(py, v),
        Err(_) => obj(py, v),
    }
}

fn opt_int(py: Python<'_>, v: Option<i128>) -> PyResult<Bound<'_, PyAny>> {
    v.map_or_else(|| Ok(py.None().into_bound(py)), |v| int(py, v))
}

/// The fields of a `GlideinOut` (see gwms_obs.sources.native), or None.
#[pyfunction]
fn parse_out<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let Some(o) = guarded(|| out::parse(data)) else { return Ok(None) };
    let epoch = |v: Option<u64>| v.map(|v| v as f64);
    let stats = PyList::empty(py);
    for (name, jobs, secs) in &o.stats {
        stats.append((*name, *jobs, *secs))?;
    }
    let metrics = PyDict::new(py);
    for (k, v) in &o.metrics {
        metrics.set_item(k, v)?;
    }
    let items: Vec<Bound<'py, PyAny>> = vec![
        obj(py, o.cluster)?,
        obj(py, o.proc_)?,
        obj(py, o.header[0])?,
        obj(py, o.header[1])?,
        obj(py, o.header[2])?,
        obj(py, o.header[3])?,
        obj(py, o.header[4])?,
        obj(py, o.header[5])?,
        obj(py, o.header[6])?,
        obj(py, epoch(o.startup_time))?,
        obj(py, epoch(o.validation_end))?,
        obj(py, o.validation_duration)?,
        obj(py, o.condor_started)?,
        obj(py, epoch(o.condor_start))?,
        obj(py, epoch(o.condor_end))?,
        obj(py, o.condor_duration)?,
        obj(py, epoch(o.glidein_end))?,
        obj(py, o.glidein_duration)?,
        obj(py, o.exit_code)?,
        obj(py, o.activations_claims)?,
        obj(py, o.stats_format)?,
        stats.into_any(),
        obj(py, o.stats_real_total)?,
        obj(py, o.normalization)?,
        obj(py, o.cpus)?,
        obj(py, o.memory_mb)?,
        metrics.into_any(),
        obj(py, o.status.as_deref())?,
    ];
    PyTuple::new(py, items).map(Some)
}

/// The bytes of a regular file of at most `limit` bytes, or None for anything else (a
/// failed open or fstat, not a regular file, larger than `limit`, shorter than fstat said):
/// the caller then opens it with `gwms_obs.sources.files`, which records why. Opened as
/// `files.open_regular` opens (`O_NONBLOCK | O_NOCTTY | O_CLOEXEC`, `O_NOFOLLOW` when
/// `nofollow`), read up to the size fstat gave at open. One call instead of Python's
/// open/fstat/pread/close wrappers.
#[pyfunction]
fn read_regular<'py>(
    py: Python<'py>,
    path: std::path::PathBuf,
    nofollow: bool,
    limit: usize,
) -> PyResult<Option<Bound<'py, PyBytes>>> {
    let read = || -> Option<Vec<u8>> {
        use std::os::unix::fs::{FileExt, OpenOptionsExt};
        let flags = libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | if nofollow { libc::O_NOFOLLOW } else { 0 };
        let f = std::fs::OpenOptions::new().read(true).custom_flags(flags).open(&path).ok()?;
        let st = f.metadata().ok()?; // fstat of the opened file
        if !st.file_type().is_file() || st.len() > limit as u64 {
            return None;
        }
        let size = st.len() as usize;
        let mut buf = vec![0u8; size];
        let mut got = 0;
        while got < size {
            match f.read_at(&mut buf[got..], got as u64) {
                Ok(0) => return None, // truncated under us: the Python reader's race to read
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        Some(buf)
    };
    Ok(py.detach(read).map(|b| PyBytes::new(py, &b)))
}

/// (jobs | None, gpus, config pairs | None, trace spool | None, sections, ads, decoded bytes), or None.
/// ``job`` is the Job class, called with the fields in its order.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
fn parse_err<'py>(
    py: Python<'py>,
    data: &[u8],
    job: &Bound<'py, PyAny>,
    max_section_bytes: usize,
    spool_max_bytes: usize,
    sections_left: usize,
    ads_left: usize,
    decoded_left: usize,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let limits = err::Limits { max_section_bytes, spool_max_bytes, sections_left, ads_left, decoded_left };
    let Some(e) = guarded(|| err::parse(data, &limits)) else { return Ok(None) };
    let jobs = match &e.jobs {
        None => None,
        Some(js) => {
            let list = PyList::empty(py);
            for j in js {
                let args = [
                    obj(py, j.start as f64)?,
                    obj(py, j.end.map(|v| v as f64))?,
                    int(py, j.cpus)?,
                    int(py, j.memory_mb)?,
                    int(py, j.gpus)?,
                    obj(py, j.exited)?,
                    opt_int(py, j.exit_code)?,
                    obj(py, j.exit_by_signal)?,
                    opt_int(py, j.exit_signal)?,
                    opt_int(py, j.job_status)?,
                    obj(py, e.gid(j))?,
                    opt_int(py, j.memory_usage_mb)?,
                    obj(py, j.cpu_seconds)?,
                ];
                list.append(job.call1(PyTuple::new(py, args)?)?)?;
            }
            Some(list)
        }
    };
    let config = e.config.map(|pairs| pairs.into_iter().collect::<Vec<_>>());
    let spool = e.spool.as_deref().map(|s| PyBytes::new(py, s));
    let items: Vec<Bound<'py, PyAny>> = vec![
        obj(py, jobs)?,
        obj(py, e.gpus)?,
        obj(py, config)?,
        obj(py, spool)?,
        obj(py, e.sections)?,
        obj(py, e.ads)?,
        obj(py, e.decoded)?,
    ];
    PyTuple::new(py, items).map(Some)
}

/// `(events, bytes consumed)` of an event-log buffer, as `condor_eventlog.parse_buffer`
/// returns them, or None. ``event`` is the CondorEvent class; ``tz_offset`` the zone of
/// times without an offset (None: the host's local time; else whole seconds east of UTC);
/// ``ref_day`` (year, month, day) anchors the year-less dates.
#[pyfunction]
fn parse_eventlog<'py>(
    py: Python<'py>,
    buf: &[u8],
    event: &Bound<'py, PyAny>,
    tz_offset: Option<i64>,
    ref_day: (i64, i64, i64),
    max_event: usize,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let zone = tz_offset.map_or(eventlog::Zone::Local, eventlog::Zone::Fixed);
    let Some((events, used)) = py.detach(|| guarded(|| eventlog::parse(buf, zone, ref_day, max_event))) else {
        return Ok(None);
    };
    let list = PyList::empty(py);
    for e in &events {
        let ev = match &e.reason {
            None if e.return_value.is_none() && e.codes.is_none() => event.call1((e.cluster, e.proc_, e.code, e.time))?,
            reason => {
                let reason: Option<Bound<'py, PyAny>> = match reason {
                    None => None,
                    Some(eventlog::Reason::Signal(n)) => Some(obj(py, format!("signal {n}"))?),
                    // the parse took only UTF-8
                    Some(eventlog::Reason::Text(a, b)) => Some(obj(py, std::str::from_utf8(&buf[*a..*b]).ok())?),
                };
                match e.codes {
                    None => event.call1((e.cluster, e.proc_, e.code, e.time, e.return_value, reason))?,
                    Some((c, s)) => event.call1((e.cluster, e.proc_, e.code, e.time, e.return_value, reason, c, s))?,
                }
            }
        };
        list.append(ev)?;
    }
    PyTuple::new(py, [list.into_any(), obj(py, used)?]).map(Some)
}

#[pymodule]
fn gwms_obs_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("ABI", ABI)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The attributes a Job is made of: tests hold them equal to glidein_err.JOB_ATTRS.
    m.add("JOB_ATTRS", err::job_attrs())?;
    m.add_function(wrap_pyfunction!(parse_out, m)?)?;
    m.add_function(wrap_pyfunction!(parse_err, m)?)?;
    m.add_function(wrap_pyfunction!(read_regular, m)?)?;
    m.add_function(wrap_pyfunction!(completed::scan_unseen, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_jobs, m)?)?;
    m.add_function(wrap_pyfunction!(parse_eventlog, m)?)?;
    // The pilot-trace encoder's hot part (outputs/pilot_traces.py), not a reader.
    m.add_function(wrap_pyfunction!(trace::trace_span, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_attrs, m)?)?;
    m.add_function(wrap_pyfunction!(trace::trace_jobs, m)?)?;
    m.add_function(wrap_pyfunction!(pilot_trace::trace_pilot, m)?)?;
    m.add_class::<pilot_trace::PilotEncoder>()?;
    Ok(())
}
