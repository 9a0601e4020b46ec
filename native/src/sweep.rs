//! `gwms_obs.accounting.partition._partition_jobs` for a pilot whose HTCondor ran jobs:
//! each job's category (`_classify_all`), the job counts, HTCondor's lifetime segment by
//! segment (`_sweep`) and the jobs over their slot (`overuse.overuse`), in one pass.
//!
//! The same events, the same order and the same floating-point operations in
//! the same order as the Python version, so the partition is bit for bit the
//! same; per category the sums are built in the order Python's dicts see them
//! (insertion order is kept, so sums over a partition's values agree too).
//! Values beyond 2^40 (no real pilot) make it decline: Python's integers do
//! not overflow, i64 would.

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyList, PyTuple};

const LIMIT: i64 = 1 << 40;

struct Ev {
    when: f64,
    sign: i64,
    idx: usize,
    c: i64,
    g: i64,
    m: i64,
    cat: usize,
}

/// Per-category sums in first-insertion order, like a Python dict.
#[derive(Default)]
struct Sums {
    order: Vec<usize>,
    val: Vec<Option<f64>>,
}

impl Sums {
    fn new(n: usize) -> Self {
        Sums { order: Vec::new(), val: vec![None; n] }
    }
    /// `out[cat] = out.get(cat, 0.0) + v`
    fn add(&mut self, cat: usize, v: f64) {
        match self.val[cat] {
            Some(x) => self.val[cat] = Some(x + v),
            None => {
                self.order.push(cat);
                self.val[cat] = Some(0.0 + v);
            }
        }
    }
}

/// Python's max(a, b): b only when b > a.
fn pymax(a: f64, b: f64) -> f64 {
    if b > a { b } else { a }
}

/// Python's min(a, b): b only when b < a.
fn pymin(a: f64, b: f64) -> f64 {
    if b < a { b } else { a }
}

fn truthy(v: f64) -> bool {
    v != 0.0 || v.is_nan()
}

fn small(v: i64) -> PyResult<i64> {
    if v.abs() > LIMIT {
        Err(pyo3::exceptions::PyOverflowError::new_err("beyond the fast path"))
    } else {
        Ok(v)
    }
}

/// What the sweep reads of a Job.
struct Row {
    start: f64,
    end: Option<f64>,
    cpus: i64,
    gpus: i64,
    memory_mb: i64,
}

impl Row {
    fn sweep_fields(j: &Bound<'_, PyAny>) -> PyResult<Row> {
        let py = j.py();
        Ok(Row {
            start: j.getattr(pyo3::intern!(py, "start"))?.extract()?,
            end: j.getattr(pyo3::intern!(py, "end"))?.extract()?,
            cpus: small(j.getattr(pyo3::intern!(py, "cpus"))?.extract::<i64>()?)?,
            gpus: small(j.getattr(pyo3::intern!(py, "gpus"))?.extract::<i64>()?)?,
            memory_mb: small(j.getattr(pyo3::intern!(py, "memory_mb"))?.extract::<i64>()?)?,
        })
    }
}

impl Sums {
    fn items(&self) -> Vec<(usize, f64)> {
        self.order.iter().map(|&c| (c, self.val[c].unwrap_or(0.0))).collect()
    }
}

/// The pilot as the sweep sees it: the categories, HTCondor's span, what the pilot has,
/// and the overhead already in its partition.
#[derive(Clone, Copy)]
struct Pilot {
    ncats: usize,
    overhead: usize,
    cs: f64,
    ce: f64,
    cpus: i64,
    gpus: i64,
    memory_mb: Option<i64>,
    cpu0: Option<f64>,
    gpu0: Option<f64>,
}

/// The sweep over prepared rows: `_sweep`'s events, order and arithmetic.
fn run(rows: &[Row], cats: &[usize], p: &Pilot) -> PyResult<(Sums, Sums)> {
    let Pilot { ncats, overhead, cs, ce, cpus, gpus, memory_mb, cpu0, gpu0 } = *p;
    let (cpus, gpus) = (small(cpus)?, small(gpus)?);
    let memory_mb = memory_mb.map(small).transpose()?;
    let mut events: Vec<Ev> = Vec::with_capacity(2 * rows.len() + 1);
    for (i, j) in rows.iter().enumerate() {
        // min(max(start, cs), ce) and min(max(end or ce, s), ce), with Python's max and min
        let s = pymin(pymax(j.start, cs), ce);
        let e = pymin(pymax(j.end.unwrap_or(ce), s), ce);
        if e > s {
            let (c, g, m) = (j.cpus.max(0), j.gpus.max(0), j.memory_mb.max(0));
            events.push(Ev { when: s, sign: 1, idx: i, c, g, m, cat: cats[i] });
            events.push(Ev { when: e, sign: -1, idx: i, c: -c, g: -g, m: -m, cat: cats[i] });
        }
    }
    // Python sorts the tuples: time, then sign (ends first), then the job's index (unique).
    // Times compare as Python's floats do: -0.0 == 0.0 (total_cmp puts -0.0 first, which
    // reordered a job starting at -0.0 before one at 0.0); NaN is refused, so the order is total.
    if events.iter().any(|e| e.when.is_nan()) {
        return Err(pyo3::exceptions::PyOverflowError::new_err("NaN time"));
    }
    events.sort_by(|a, b| {
        a.when
            .partial_cmp(&b.when)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.sign.cmp(&b.sign))
            .then(a.idx.cmp(&b.idx))
    });
    events.push(Ev { when: ce, sign: 0, idx: rows.len(), c: 0, g: 0, m: 0, cat: overhead });

    let mut cpu = Sums::new(ncats);
    let mut gpu = Sums::new(ncats);
    if let Some(v) = cpu0 {
        cpu.order.push(overhead);
        cpu.val[overhead] = Some(v);
    }
    if let Some(v) = gpu0 {
        gpu.order.push(overhead);
        gpu.val[overhead] = Some(v);
    }
    let (mut count, mut cores, mut act_gpus, mut mb) = (0i64, 0i64, 0i64, 0i64);
    let mut seen: Vec<usize> = Vec::new(); // cat_count's keys, in insertion order
    let mut cat_count = vec![0i64; ncats];
    let mut cat_cpus = vec![0i64; ncats];
    let mut cat_gpus = vec![0i64; ncats];
    let mut known = vec![false; ncats];
    let mut t = cs;
    for ev in &events {
        if ev.when > t {
            let dt = ev.when - t;
            segment(&mut cpu, &mut gpu, cpus, gpus, memory_mb, count, cores, act_gpus, mb, &seen, &cat_count, &cat_cpus, &cat_gpus, dt, overhead);
            t = ev.when;
        }
        count += ev.sign;
        cores += ev.c;
        act_gpus += ev.g;
        mb += ev.m;
        if !known[ev.cat] {
            known[ev.cat] = true;
            seen.push(ev.cat);
        }
        cat_count[ev.cat] += ev.sign;
        cat_cpus[ev.cat] += ev.c;
        cat_gpus[ev.cat] += ev.g;
    }
    Ok((cpu, gpu))
}

#[allow(clippy::too_many_arguments)]
fn segment(
    cpu: &mut Sums,
    gpu: &mut Sums,
    cpus: i64,
    gpus: i64,
    memory_mb: Option<i64>,
    count: i64,
    cores: i64,
    act_gpus: i64,
    mb: i64,
    seen: &[usize],
    cat_count: &[i64],
    cat_cpus: &[i64],
    cat_gpus: &[i64],
    dt: f64,
    overhead: usize,
) {
    if count == 0 {
        let v = cpus as f64 * dt;
        if truthy(v) {
            cpu.add(overhead, v);
        }
        let v = gpus as f64 * dt;
        if truthy(v) {
            gpu.add(overhead, v);
        }
        return;
    }
    let (per_core, per_job);
    if cores > cpus {
        per_core = cpus as f64 / cores as f64;
        per_job = 0.0;
    } else {
        let idle = cpus - cores;
        // canonical_idle_units(idle, idle_mb)
        let k: f64 = if idle <= 0 {
            0.0
        } else {
            match memory_mb {
                None => idle as f64,
                Some(mem) => {
                    let idle_mb = (mem - mb).max(0);
                    let units = (idle_mb.div_euclid(2048)).max(0) as f64;
                    // min(idle, units): the int when not units < idle (same value either way)
                    if units < idle as f64 { units } else { idle as f64 }
                }
            }
        };
        let v = k * dt;
        if truthy(v) {
            cpu.add(overhead, v);
        }
        let rest = idle as f64 - k;
        if cores > 0 {
            per_core = 1.0 + rest / cores as f64;
            per_job = 0.0;
        } else {
            per_core = 0.0;
            per_job = rest / count as f64;
        }
    }
    for &cat in seen {
        let n = cat_count[cat];
        if n != 0 {
            let v = (cat_cpus[cat] as f64 * per_core + n as f64 * per_job) * dt;
            if truthy(v) {
                cpu.add(cat, v);
            }
        }
    }
    if gpus > 0 {
        let scale = if act_gpus > gpus { gpus as f64 / act_gpus as f64 } else { 1.0 };
        for &cat in seen {
            let g = cat_gpus[cat];
            if g != 0 {
                let v = g as f64 * scale * dt;
                if truthy(v) {
                    gpu.add(cat, v);
                }
            }
        }
        let v = ((gpus - act_gpus).max(0)) as f64 * dt;
        if truthy(v) {
            gpu.add(overhead, v);
        }
    }
}

/// Python's truthiness of a float (`wall or 0.0`, `if ... and wall`): NaN is true.
fn py_or_zero(v: Option<f64>) -> f64 {
    match v {
        Some(x) if truthy(x) => x,
        _ => 0.0,
    }
}

/// One resource's `overuse.Overuse`: (measured, jobs, seconds).
#[derive(Default, Clone, Copy)]
struct Over {
    measured: i64,
    jobs: i64,
    seconds: f64,
}

/// `sweep_jobs(jobs, good, preempt, misconf, ending_at, early, ncats, overhead, cs, ce, cpus,
/// gpus, memory_mb, cpu0, gpu0, overuse_end)` → (job counts, cpu items, gpu items, overuse)
/// or None: in one pass over the jobs what `partition()` and `overuse()` make of a pilot
/// whose HTCondor ran jobs: `_classify_all` (each job's category index), the per-category
/// job counts in first-seen order, the sweep, and `overuse(jobs, overuse_end)` as
/// [(0 memory | 1 cpu, measured, jobs, seconds)] in the order Python's dict gets them.
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (jobs, good, preempt, misconf, ending_at, early, ncats, overhead, cs, ce, cpus, gpus, memory_mb, cpu0, gpu0, overuse_end))]
pub fn sweep_jobs<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
    good: usize,
    preempt: usize,
    misconf: usize,
    ending_at: f64,
    early: f64,
    ncats: usize,
    overhead: usize,
    cs: f64,
    ce: f64,
    cpus: i64,
    gpus: i64,
    memory_mb: Option<i64>,
    cpu0: Option<f64>,
    gpu0: Option<f64>,
    overuse_end: Option<f64>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    type Found = (Vec<(usize, i64)>, Sums, Sums, Vec<(usize, Over)>);
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> PyResult<Found> {
        if [good, preempt, misconf, overhead].iter().any(|&c| c >= ncats) {
            return Err(pyo3::exceptions::PyValueError::new_err("category out of range"));
        }
        let mut rows = Vec::with_capacity(jobs.len());
        let mut cats = Vec::with_capacity(jobs.len());
        let mut counts: Vec<(usize, i64)> = Vec::new(); // p.jobs, in insertion order
        let mut over: Vec<(usize, Over)> = Vec::new(); // overuse's dict: 0 memory, 1 cpu
        for j in jobs.iter() {
            let row = Row::sweep_fields(&j)?;
            let exited = j.getattr(pyo3::intern!(py, "exited"))?.is_truthy()?;
            // classify_job
            let cat = if exited && !j.getattr(pyo3::intern!(py, "exit_by_signal"))?.is_truthy()? {
                good
            } else {
                match row.end {
                    None => preempt,
                    Some(end) if end >= ending_at => preempt,
                    Some(end) => {
                        if !exited || end - row.start < early {
                            misconf
                        } else {
                            good
                        }
                    }
                }
            };
            cats.push(cat);
            match counts.iter_mut().find(|(c, _)| *c == cat) {
                Some((_, n)) => *n += 1,
                None => counts.push((cat, 1)),
            }
            // overuse.overuse
            let stop = row.end.or(overuse_end);
            let wall = stop.map(|s| {
                let w = s - row.start;
                if w > 0.0 { w } else { 0.0 }
            });
            let used: Option<i64> = j.getattr(pyo3::intern!(py, "memory_usage_mb"))?.extract()?;
            if let Some(used) = used.map(small).transpose()? {
                let slot = row.memory_mb;
                if slot > 0 {
                    let o = slot_of(&mut over, 0);
                    o.measured += 1;
                    if used as f64 > slot as f64 * 1.0 {
                        o.jobs += 1;
                        o.seconds += (used - slot) as f64 / 2048.0 * py_or_zero(wall);
                    }
                }
            }
            let secs = j.getattr(pyo3::intern!(py, "cpu_seconds"))?;
            if !secs.is_none() && !secs.is_instance_of::<PyFloat>() {
                // an int compares with a float exactly in Python, not as an f64 here
                return Err(pyo3::exceptions::PyTypeError::new_err("cpu_seconds not a float"));
            }
            let secs: Option<f64> = secs.extract()?;
            if let (Some(secs), Some(w)) = (secs, wall) {
                if truthy(w) {
                    let o = slot_of(&mut over, 1);
                    o.measured += 1;
                    let cores = if row.cpus > 1 { row.cpus } else { 1 } as f64;
                    if secs > w * cores * 1.25 {
                        o.jobs += 1;
                        o.seconds += secs - w * cores;
                    }
                }
            }
            rows.push(row);
        }
        let pilot = Pilot { ncats, overhead, cs, ce, cpus, gpus, memory_mb, cpu0, gpu0 };
        let (cpu, gpu) = run(&rows, &cats, &pilot)?;
        Ok((counts, cpu, gpu, over))
    }));
    match ran.unwrap_or_else(|_| Err(pyo3::exceptions::PyRuntimeError::new_err("panic"))) {
        Ok((counts, cpu, gpu, over)) => {
            let over: Vec<(usize, i64, i64, f64)> = over.iter().map(|(r, o)| (*r, o.measured, o.jobs, o.seconds)).collect();
            Ok(Some((counts, cpu.items(), gpu.items(), over).into_pyobject(py)?))
        }
        Err(_) => Ok(None),
    }
}

/// `out[res]`, made (at its place in the dict's order) the first time.
fn slot_of(over: &mut Vec<(usize, Over)>, res: usize) -> &mut Over {
    let i = match over.iter().position(|(r, _)| *r == res) {
        Some(i) => i,
        None => {
            over.push((res, Over::default()));
            over.len() - 1
        }
    };
    &mut over[i].1
}
