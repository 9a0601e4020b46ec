//! Fast path of `gwms_obs.sources.glidein_err.parse_err(detail=False)` (a glidein's stderr):
//! the GPU line, the glidein_config keys the accounting reads, and the framed
//! sections: StartdHistoryLog ads decoded into jobs, the trace spool kept.

use crate::classad::{self, digit_run, int_value, Value};
use crate::needle;
use crate::scan::{find, find_byte, find_in, lines_shorter_than, num, rfind_byte, split_lines, strip, Fallback, Lines, R};

const MAX_LINE: usize = 64 << 10;
const MAX_CONFIG: usize = 4 << 20;
const MAX_GPU_LINES: usize = 100;
const MAX_ADS_PER_SECTION: usize = 100_000;
const MAX_ATTR_VALUE: usize = 64 << 10;
const MAX_USAGE_MB: f64 = (1u64 << 30) as f64;
const MAX_CPU_SECONDS: f64 = 100.0 * 365.0 * 86400.0;
const FRAME: &[u8] = b"======== gzip | uuencode =============";
const CONFIG_BEGIN: &[u8] = b"-------- glidein_config in condor_startup.sh ----------";
const HISTORY: &[u8] = b"StartdHistoryLog";
pub const SPOOL: &[u8] = b"GWMSTraceSpool";
const USED_KEYS: [&[u8]; 4] = [b"GLIDEIN_CPUS", b"MEMORY", b"GLIDEIN_Site", b"GLIDEIN_Resource_Slots"];

/// What the Python reader's budget has left for this file.
pub struct Limits {
    pub max_section_bytes: usize,
    pub spool_max_bytes: usize,
    pub sections_left: usize,
    pub ads_left: usize,
    pub decoded_left: usize,
}

pub struct JobRec {
    pub start: i128,
    pub end: Option<i128>,
    pub cpus: i128,
    pub memory_mb: i128,
    pub gpus: i128,
    pub exited: bool,
    pub exit_code: Option<i128>,
    pub exit_by_signal: bool,
    pub exit_signal: Option<i128>,
    pub job_status: Option<i128>,
    /// The GlobalJobId (UTF-8 checked) as (index in `Err::texts`, start, end).
    pub gid: Option<(usize, usize, usize)>,
    pub memory_usage_mb: Option<i128>,
    pub cpu_seconds: Option<f64>,
}

pub struct Err<'a> {
    pub gpus: Option<u64>,
    pub config: Option<Vec<(&'a str, &'a str)>>, // in order; a repeated key: the last wins
    pub jobs: Option<Vec<JobRec>>,
    pub texts: Vec<Vec<u8>>, // the decoded histories the jobs' GlobalJobIds are in
    pub spool: Option<Vec<u8>>,
    pub sections: usize,
    pub ads: usize,
    pub decoded: usize,
}

impl Err<'_> {
    pub fn gid(&self, j: &JobRec) -> Option<&str> {
        // checked UTF-8 when parsed
        j.gid
            .map(|(t, a, b)| std::str::from_utf8(&self.texts[t][a..b]).unwrap_or_default())
    }
}

fn gpus(data: &[u8]) -> R<Option<u64>> {
    let mut lines = Lines::new(data, needle!(b"condor_gpu_discovery"), 0, data.len(), MAX_LINE);
    let mut n = 0;
    while let Some((off, line)) = lines.next_line()? {
        if n >= MAX_GPU_LINES {
            break;
        }
        n += 1;
        let lo = off.saturating_sub(200);
        let ls = match rfind_byte(data, b'\n', lo, off) {
            Some(i) => i + 1,
            None if lo == 0 => 0,
            None => return Err(Fallback), // the Python reader then looks from the file's start
        };
        let full = &data[ls..off + line.len()];
        // [^\n]*?condor_gpu_discovery\)? found (\d+) GPUs
        let mut q = 0;
        while let Some(i) = find_in(full, needle!(b"condor_gpu_discovery"), q, full.len()) {
            let mut p = i + 20;
            if full.get(p) == Some(&b')') {
                p += 1;
            }
            for p in [p, i + 20] {
                if full[p..].starts_with(b" found ") {
                    let d = crate::scan::digits(full, p + 7);
                    if d > 0 && full[p + 7 + d..].starts_with(b" GPUs") {
                        return Ok(Some(num(&full[p + 7..p + 7 + d], 18)?));
                    }
                }
            }
            q = i + 1;
        }
        if find_in(full, needle!(b"No GPUs found with condor_gpu_discovery"), 0, full.len()).is_some() {
            return Ok(Some(0));
        }
    }
    Ok(None)
}

/// `_dashes`: the first line of only dashes (and an optional CR) in [start, stop).
fn dashes(data: &[u8], start: usize, stop: usize) -> Option<usize> {
    let stop = stop.min(data.len());
    let is_dash_line = |l: usize| -> bool {
        let d = data[l.min(stop)..stop].iter().take_while(|&&c| c == b'-').count();
        if d == 0 {
            return false;
        }
        let mut p = l + d;
        if p < stop && data[p] == b'\r' {
            p += 1;
        }
        p == stop || data[p] == b'\n'
    };
    if start < stop && is_dash_line(start) {
        return Some(start);
    }
    let mut i = start;
    while let Some(j) = find(data, b"\n-", i, stop) {
        if is_dash_line(j + 1) {
            return Some(j + 1);
        }
        i = j + 1;
    }
    None
}

fn config(data: &[u8]) -> R<Option<Vec<(&str, &str)>>> {
    let Some(begin) = find_in(data, needle!(CONFIG_BEGIN), 0, data.len()) else { return Ok(None) };
    let body = find_byte(data, b'\n', begin, data.len()).ok_or(Fallback)? + 1;
    let end = dashes(data, body, body + MAX_CONFIG).ok_or(Fallback)?; // truncated or too large
    let stop = if end > body && data[end - 1] == b'\n' { end - 1 } else { end };
    let mut out = Vec::new();
    // ^(GLIDEIN_CPUS|MEMORY|GLIDEIN_Site|GLIDEIN_Resource_Slots) ([^\n]*)$ in [body, stop)
    let mut l = body;
    while l < stop {
        let e = find_byte(data, b'\n', l, stop).unwrap_or(stop);
        let line = &data[l..e];
        for k in USED_KEYS {
            if line.starts_with(k) && line.get(k.len()) == Some(&b' ') {
                let v = &line[k.len() + 1..];
                let key = std::str::from_utf8(k).map_err(|_| Fallback)?;
                out.push((key, std::str::from_utf8(v).map_err(|_| Fallback)?));
                break;
            }
        }
        l = e + 1;
    }
    Ok(Some(out))
}

const B64_INVALID: u8 = 0xff;
const B64: [u8; 256] = {
    let mut t = [B64_INVALID; 256];
    let mut i = 0;
    while i < 26 {
        t[b'A' as usize + i] = i as u8;
        t[b'a' as usize + i] = 26 + i as u8;
        i += 1;
    }
    let mut d = 0;
    while d < 10 {
        t[b'0' as usize + d] = 52 + d as u8;
        d += 1;
    }
    t[b'+' as usize] = 62;
    t[b'/' as usize] = 63;
    t
};

/// `binascii.a2b_base64` for the shape a glidein writes (base64 lines, padding only at
/// the very end); any other shape is the Python reader's.
fn b64_decode(payload: &[u8]) -> R<Vec<u8>> {
    let body = strip_trailing_newlines(payload);
    let pad = body.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err(Fallback);
    }
    let body = &body[..body.len() - pad];
    let mut out = Vec::with_capacity(body.len() / 4 * 3 + 3);
    let (mut acc, mut n) = (0u32, 0u32); // n: sextets in acc
    let mut total = pad;
    for line in split_lines(body) {
        total += line.len();
        if n == 0 && line.len() % 4 == 0 {
            // whole quads (every line a glidein writes): four lookups, one validity test
            for q in line.chunks_exact(4) {
                let (a, b, c, d) = (B64[q[0] as usize], B64[q[1] as usize], B64[q[2] as usize], B64[q[3] as usize]);
                if (a | b | c | d) & 0x80 != 0 {
                    return Err(Fallback);
                }
                out.extend_from_slice(&[(a << 2) | (b >> 4), (b << 4) | (c >> 2), (c << 6) | d]);
            }
            continue;
        }
        for &c in line {
            let v = B64[c as usize];
            if v == B64_INVALID {
                return Err(Fallback);
            }
            acc = (acc << 6) | u32::from(v);
            n += 1;
            if n == 4 {
                out.extend_from_slice(&[(acc >> 16) as u8, (acc >> 8) as u8, acc as u8]);
                acc = 0;
                n = 0;
            }
        }
    }
    if total % 4 != 0 || (pad > 0 && n + pad as u32 != 4) {
        return Err(Fallback);
    }
    match n {
        2 => out.push((acc >> 4) as u8),
        3 => out.extend_from_slice(&[(acc >> 10) as u8, (acc >> 2) as u8]),
        _ => {}
    }
    Ok(out)
}

fn strip_trailing_newlines(s: &[u8]) -> &[u8] {
    let n = s.iter().rev().take_while(|&&c| c == b'\n').count();
    &s[..s.len() - n]
}

fn gunzip(raw: &[u8], limit: usize) -> R<Vec<u8>> {
    if raw.len() < 18 {
        return Err(Fallback); // no room for a gzip header and trailer: the Python reader's error
    }
    // The trailer's ISIZE (length mod 2^32) sizes the output: one inflate call, no regrowth.
    let isize = u32::from_le_bytes(raw[raw.len() - 4..].try_into().map_err(|_| Fallback)?) as usize;
    if isize > limit {
        return Err(Fallback);
    }
    let mut d = flate2::Decompress::new_gzip(15);
    let mut out = Vec::with_capacity(isize + 1);
    let status = d.decompress_vec(raw, &mut out, flate2::FlushDecompress::Finish).map_err(|_| Fallback)?;
    // The stream must end exactly at the input's end (what follows a member is the Python reader's).
    if status != flate2::Status::StreamEnd || d.total_in() as usize != raw.len() || out.len() > limit {
        return Err(Fallback);
    }
    Ok(out)
}

const ATTRS: [&[u8]; 21] = [
    b"JobCurrentStartDate",
    b"JobStartDate",
    b"JobStatus",
    b"CompletionDate",
    b"LastVacateTime",
    b"EnteredCurrentStatus",
    b"ExitCode",
    b"ExitBySignal",
    b"ExitSignal",
    b"GlobalJobId",
    b"CpusProvisioned",
    b"RequestCpus",
    b"MemoryProvisioned",
    b"RequestMemory",
    b"GPUsProvisioned",
    b"RequestGPUs",
    b"MemoryUsage",
    b"ProportionalSetSizeKb",
    b"ResidentSetSize",
    b"RemoteUserCpu",
    b"RemoteSysCpu",
];
/// ATTRS as text, for the module's JOB_ATTRS.
pub fn job_attrs() -> Vec<&'static str> {
    ATTRS.iter().map(|a| std::str::from_utf8(a).unwrap_or("?")).collect()
}

const A_CURSTART: usize = 0;
const A_START: usize = 1;
const A_STATUS: usize = 2;
const A_COMPLETION: usize = 3;
const A_VACATE: usize = 4;
const A_ENTERED: usize = 5;
const A_EXITCODE: usize = 6;
const A_BYSIGNAL: usize = 7;
const A_SIGNAL: usize = 8;
const A_GID: usize = 9;
const A_CPUSP: usize = 10;
const A_CPUSR: usize = 11;
const A_MEMP: usize = 12;
const A_MEMR: usize = 13;
const A_GPUSP: usize = 14;
const A_GPUSR: usize = 15;
const A_MEMUSE: usize = 16;
const A_PSS: usize = 17;
const A_RSS: usize = 18;
const A_UCPU: usize = 19;
const A_SCPU: usize = 20;

/// The index in ATTRS of an attribute name (a `match`: one length switch, then one compare).
const fn attr_index(name: &[u8]) -> Option<usize> {
    Some(match name {
        b"JobCurrentStartDate" => A_CURSTART,
        b"JobStartDate" => A_START,
        b"JobStatus" => A_STATUS,
        b"CompletionDate" => A_COMPLETION,
        b"LastVacateTime" => A_VACATE,
        b"EnteredCurrentStatus" => A_ENTERED,
        b"ExitCode" => A_EXITCODE,
        b"ExitBySignal" => A_BYSIGNAL,
        b"ExitSignal" => A_SIGNAL,
        b"GlobalJobId" => A_GID,
        b"CpusProvisioned" => A_CPUSP,
        b"RequestCpus" => A_CPUSR,
        b"MemoryProvisioned" => A_MEMP,
        b"RequestMemory" => A_MEMR,
        b"GPUsProvisioned" => A_GPUSP,
        b"RequestGPUs" => A_GPUSR,
        b"MemoryUsage" => A_MEMUSE,
        b"ProportionalSetSizeKb" => A_PSS,
        b"ResidentSetSize" => A_RSS,
        b"RemoteUserCpu" => A_UCPU,
        b"RemoteSysCpu" => A_SCPU,
        _ => return None,
    })
}

// attr_index agrees with ATTRS, checked when compiling.
const _: () = {
    let mut i = 0;
    while i < ATTRS.len() {
        match attr_index(ATTRS[i]) {
            Some(k) => assert!(k == i),
            None => panic!("ATTRS and attr_index disagree"),
        }
        i += 1;
    }
};

/// The longest ATTRS name: a line whose first space comes later names none of them.
const LONGEST_ATTR: usize = 21;

/// One line of an ad: "Name = value", the name up to the line's first space (no ATTRS
/// name has one); the first line of each name counts.
#[inline]
fn pick_line<'a>(line: &'a [u8], got: &mut [Option<&'a [u8]>; 21]) {
    let head = &line[..line.len().min(LONGEST_ATTR + 1)];
    let Some(sp) = head.iter().position(|&c| c == b' ') else {
        return;
    };
    if !line[sp..].starts_with(b" = ") {
        return;
    }
    if let Some(k) = attr_index(&line[..sp]) {
        if got[k].is_none() {
            got[k] = Some(&line[sp + 3..]);
        }
    }
}

fn first_int(got: &[Option<&[u8]>; 21], names: &[usize], minimum: i128) -> R<Option<i128>> {
    for &k in names {
        if let Some(raw) = got[k] {
            if let Some(v) = int_value(raw)? {
                if v >= minimum {
                    return Ok(Some(v));
                }
            }
        }
    }
    Ok(None)
}

/// `_amount`: a usage value in [0, cap]; anything the Python reader calls a problem falls back.
fn amount(got: &[Option<&[u8]>; 21], k: usize, cap: f64, expr_ok: bool) -> R<Option<f64>> {
    let Some(raw) = got[k] else { return Ok(None) };
    let mut v = digit_run(raw).map(Value::Int);
    if v.is_none() && raw.ends_with(b".0") {
        v = digit_run(&raw[..raw.len() - 2]).map(Value::Int);
    }
    let v = match v {
        Some(v) => v,
        None => match classad::parse_value(raw)? {
            Value::Undefined => return Ok(None),
            Value::Expr if expr_ok => return Ok(None),
            other => other,
        },
    };
    let f = match v {
        Value::Int(i) => i as f64,
        Value::Real(f) => f,
        _ => return Err(Fallback),
    };
    if !(0.0..=cap).contains(&f) {
        return Err(Fallback);
    }
    Ok(Some(f))
}

/// A job, and its GlobalJobId.
fn job<'a>(got: &[Option<&'a [u8]>; 21]) -> R<(JobRec, Option<&'a [u8]>)> {
    let start = first_int(got, &[A_CURSTART, A_START], 1)?.ok_or(Fallback)?; // no start: "no_start"
    let mut mem = amount(got, A_MEMUSE, MAX_USAGE_MB, true)?;
    if mem.is_none() {
        let mut kib = amount(got, A_PSS, MAX_USAGE_MB * 1024.0, false)?;
        if kib.is_none() {
            kib = amount(got, A_RSS, MAX_USAGE_MB * 1024.0, false)?;
        }
        mem = kib.map(|k| ((k + 1023.0) / 1024.0).floor());
    }
    let user = amount(got, A_UCPU, MAX_CPU_SECONDS, false)?;
    let sys = amount(got, A_SCPU, MAX_CPU_SECONDS, false)?;
    let cpu = if user.is_none() && sys.is_none() { None } else { Some(user.unwrap_or(0.0) + sys.unwrap_or(0.0)) };
    let iv = |k: usize| -> R<Option<i128>> { got[k].map_or(Ok(None), int_value) };
    let status = iv(A_STATUS)?;
    let mut end = first_int(got, &[A_COMPLETION, A_VACATE], 1)?;
    if end.is_none() && matches!(status, Some(3 | 4)) {
        end = first_int(got, &[A_ENTERED], 1)?;
    }
    let exit_code = iv(A_EXITCODE)?;
    let by_signal = got[A_BYSIGNAL].is_some_and(|r| strip(r).eq_ignore_ascii_case(b"true"));
    let gid = match got[A_GID] {
        None => None,
        Some(raw) if raw.len() > 1 && raw[0] == b'"' && raw[raw.len() - 1] == b'"' && !raw.contains(&b'\\') => {
            std::str::from_utf8(&raw[1..raw.len() - 1]).map_err(|_| Fallback)?;
            Some(&raw[1..raw.len() - 1])
        }
        Some(raw) => match classad::parse_value(raw)? {
            Value::Str(s) => Some(s),
            _ => None,
        },
    };
    let rec = JobRec {
        start,
        end,
        cpus: first_int(got, &[A_CPUSP, A_CPUSR], 1)?.unwrap_or(1),
        memory_mb: first_int(got, &[A_MEMP, A_MEMR], 0)?.unwrap_or(0),
        gpus: first_int(got, &[A_GPUSP, A_GPUSR], 0)?.unwrap_or(0),
        exited: (exit_code.is_some() || by_signal) && end.is_some(),
        exit_code,
        exit_by_signal: by_signal,
        exit_signal: iv(A_SIGNAL)?,
        job_status: status,
        gid: None,
        memory_usage_mb: mem.map(|m| m as i128),
        cpu_seconds: cpu,
    };
    Ok((rec, gid))
}

/// An ad's end: its job, charged to the section's and the file's budgets of ads.
fn end_ad<'a>(
    got: &mut [Option<&'a [u8]>; 21],
    text: &'a [u8],
    ti: usize,
    n: &mut usize,
    ads_so_far: &mut usize,
    limits: &Limits,
    jobs: &mut Vec<JobRec>,
) -> R<()> {
    if *n >= MAX_ADS_PER_SECTION {
        return Err(Fallback); // too_many_ads
    }
    *n += 1;
    *ads_so_far += 1;
    if *ads_so_far > limits.ads_left {
        return Err(Fallback); // the file's budget of ads
    }
    let (mut j, gid) = job(got)?;
    j.gid = gid.map(|g| {
        let a = g.as_ptr() as usize - text.as_ptr() as usize; // a slice of text
        (ti, a, a + g.len())
    });
    jobs.push(j);
    *got = [None; 21];
    Ok(())
}

/// A decoded history's jobs (`text` is `Err::texts[ti]`), in one pass over its lines:
/// an ad is a run of lines between banner (`***`) or blank lines.
fn history(
    text: &[u8],
    ti: usize,
    limits: &Limits,
    ads_so_far: &mut usize,
    jobs: &mut Vec<JobRec>,
) -> R<()> {
    if memchr::memchr3(b'\r', 0x0b, 0x0c, text).is_some() {
        return Err(Fallback);
    }
    let mut got: [Option<&[u8]>; 21] = [None; 21];
    let (mut in_ad, mut n) = (false, 0usize);
    let mut newlines = memchr::memchr_iter(b'\n', text);
    let mut start = 0;
    loop {
        let nl = newlines.next();
        let line = &text[start..nl.unwrap_or(text.len())];
        if line.len() >= MAX_ATTR_VALUE {
            return Err(Fallback);
        }
        if line.starts_with(b"***") || line.iter().all(|&c| c == b' ' || c == b'\t') {
            if in_ad {
                end_ad(&mut got, text, ti, &mut n, ads_so_far, limits, jobs)?;
                in_ad = false;
            }
        } else {
            in_ad = true;
            pick_line(line, &mut got);
        }
        match nl {
            Some(i) => start = i + 1,
            None => break,
        }
    }
    if in_ad {
        end_ad(&mut got, text, ti, &mut n, ads_so_far, limits, jobs)?;
    }
    Ok(())
}

pub fn parse<'a>(data: &'a [u8], limits: &Limits) -> R<Err<'a>> {
    if data.is_empty() {
        return Err(Fallback); // nothing to gain
    }
    if data.len() > MAX_LINE && !lines_shorter_than(data, MAX_LINE + 1) {
        return Err(Fallback);
    }
    let mut out = Err {
        gpus: gpus(data)?,
        config: config(data)?,
        jobs: None,
        texts: Vec::new(),
        spool: None,
        sections: 0,
        ads: 0,
        decoded: 0,
    };
    let mut spool: Vec<u8> = Vec::new();
    let mut has_spool = false;
    let frame = needle!(FRAME);
    let mut next = find_in(data, frame, 0, data.len());
    while let Some(f) = next {
        out.sections += 1;
        if out.sections > limits.sections_left {
            return Err(Fallback);
        }
        let line_start = if f > 0 { rfind_byte(data, b'\n', 0, f.saturating_sub(1)).map_or(0, |i| i + 1) } else { 0 };
        let name_bytes = &data[line_start..(f.saturating_sub(1)).max(line_start)];
        let name_bytes = &name_bytes[name_bytes.len().saturating_sub(200)..];
        if name_bytes.iter().any(|&c| c >= 0x80 || (c < 0x20 && c != b'\t' && c != b'\r')) {
            return Err(Fallback);
        }
        let name = {
            let a = name_bytes.iter().position(|c| !matches!(c, b' ' | b'\t' | b'\r')).unwrap_or(name_bytes.len());
            let b = name_bytes.iter().rposition(|c| !matches!(c, b' ' | b'\t' | b'\r')).map_or(a, |i| i + 1);
            &name_bytes[a..b.max(a)]
        };
        let after = f + FRAME.len();
        let mut hdr = after;
        while matches!(data.get(hdr), Some(b'\n' | b'\r')) {
            hdr += 1;
        }
        if !data[hdr..].starts_with(b"begin-base64 ") {
            return Err(Fallback);
        }
        let body_start = find_byte(data, b'\n', hdr, data.len()).ok_or(Fallback)?;
        let closing = needle!(b"\n====");
        let mut end = find_in(data, closing, body_start, data.len());
        while let Some(e) = end {
            if matches!(data.get(e + 5), None | Some(b'\n' | b'\r')) {
                break;
            }
            end = find_in(data, closing, e + 1, data.len());
        }
        let end = end.ok_or(Fallback)?;
        // The next frame: inside this section's body, the Python reader's error; else (it cannot
        // overlap the closing line) the first frame from the end of this section.
        next = find_in(data, frame, body_start, data.len());
        if next.is_some_and(|nf| nf < end) {
            return Err(Fallback);
        }
        let is_trace = name == SPOOL;
        if name != HISTORY && !is_trace {
            continue;
        }
        let limit = if is_trace { limits.spool_max_bytes.min(limits.max_section_bytes) } else { limits.max_section_bytes };
        let allowed = limit.min(limits.decoded_left.saturating_sub(out.decoded));
        if end <= body_start {
            return Err(Fallback); // "====" right after the header: an empty payload
        }
        let payload = &data[body_start + 1..end];
        let content = gunzip(&b64_decode(payload)?, allowed)?;
        out.decoded += content.len();
        if is_trace {
            spool.extend_from_slice(&content);
            has_spool = true;
        } else {
            let jobs = out.jobs.get_or_insert_with(Vec::new);
            history(&content, out.texts.len(), limits, &mut out.ads, jobs)?;
            out.texts.push(content);
        }
    }
    if has_spool {
        out.spool = Some(spool);
    }
    Ok(out)
}
