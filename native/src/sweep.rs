//! `gwms_obs.accounting.partition._sweep`: HTCondor's lifetime, segment by segment.
//!
//! The same events, the same order and the same floating-point operations in
//! the same order as the Python version, so the partition is bit for bit the
//! same; per category the sums are built in the order Python's dicts see them
//! (insertion order is kept, so sums over a partition's values agree too).
//! Values beyond 2^40 (no real pilot) make it decline: Python's integers do
//! not overflow, i64 would.

use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

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

/// `sweep(jobs, cats, ncats, overhead, cs, ce, cpus, gpus, memory_mb, cpu0, gpu0)`
/// → (cpu items, gpu items): (category index, value) in dict order, or None.
/// `cpu0`/`gpu0`: the overhead already in the partition (None: absent).
#[allow(clippy::too_many_arguments)]
#[pyfunction]
#[pyo3(signature = (jobs, cats, ncats, overhead, cs, ce, cpus, gpus, memory_mb, cpu0, gpu0))]
pub fn sweep<'py>(
    py: Python<'py>,
    jobs: &Bound<'py, PyList>,
    cats: Vec<usize>,
    ncats: usize,
    overhead: usize,
    cs: f64,
    ce: f64,
    cpus: i64,
    gpus: i64,
    memory_mb: Option<i64>,
    cpu0: Option<f64>,
    gpu0: Option<f64>,
) -> PyResult<Option<Bound<'py, PyTuple>>> {
    let cats = &cats[..];
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> PyResult<(Sums, Sums)> {
        let (cpus, gpus) = (small(cpus)?, small(gpus)?);
        let memory_mb = memory_mb.map(small).transpose()?;
        if cats.len() != jobs.len() || overhead >= ncats || cats.iter().any(|&c| c >= ncats) {
            return Err(pyo3::exceptions::PyValueError::new_err("cats do not match jobs"));
        }
        let mut events: Vec<Ev> = Vec::with_capacity(2 * jobs.len() + 1);
        for (i, j) in jobs.iter().enumerate() {
            let start: f64 = j.getattr(pyo3::intern!(j.py(), "start"))?.extract()?;
            let end: Option<f64> = j.getattr(pyo3::intern!(j.py(), "end"))?.extract()?;
            // min(max(start, cs), ce) and min(max(end or ce, s), ce), with Python's max and min
            let s = pymin(pymax(start, cs), ce);
            let e = pymin(pymax(end.unwrap_or(ce), s), ce);
            if e > s {
                let c = small(j.getattr(pyo3::intern!(j.py(), "cpus"))?.extract::<i64>()?)?.max(0);
                let g = small(j.getattr(pyo3::intern!(j.py(), "gpus"))?.extract::<i64>()?)?.max(0);
                let m = small(j.getattr(pyo3::intern!(j.py(), "memory_mb"))?.extract::<i64>()?)?.max(0);
                events.push(Ev { when: s, sign: 1, idx: i, c, g, m, cat: cats[i] });
                events.push(Ev { when: e, sign: -1, idx: i, c: -c, g: -g, m: -m, cat: cats[i] });
            }
        }
        // Python sorts the tuples: time, then sign (ends first), then the job's index (unique).
        if events.iter().any(|e| e.when.is_nan()) {
            return Err(pyo3::exceptions::PyOverflowError::new_err("NaN time"));
        }
        events.sort_by(|a, b| a.when.total_cmp(&b.when).then(a.sign.cmp(&b.sign)).then(a.idx.cmp(&b.idx)));
        events.push(Ev { when: ce, sign: 0, idx: jobs.len(), c: 0, g: 0, m: 0, cat: overhead });

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
    }));
    // a panic (a bug) declines like a value beyond the fast path: the Python sweep runs
    match ran.unwrap_or_else(|_| Err(pyo3::exceptions::PyRuntimeError::new_err("panic"))) {
        Ok((cpu, gpu)) => {
            let items = |s: &Sums| s.order.iter().map(|&c| (c, s.val[c].unwrap_or(0.0))).collect::<Vec<_>>();
            Ok(Some((items(&cpu), items(&gpu)).into_pyobject(py)?))
        }
        // a value beyond the fast path (or of another type): the Python sweep takes the pilot
        Err(_) => Ok(None),
    }
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
