//! Fast path of `gwms_obs.sources.glidein_out.parse_out` (a glidein's stdout).
//!
//! Same searches in the same order as the Python reader; anything it would
//! record as a parse error makes this give up (see `scan::Fallback`).

use crate::needle;
use crate::scan::{digits, find, find_byte, find_in, match_at, num, paren_tail, strip, Fallback, Lines, Tok, R};
use crate::xml;

pub const MAX_LINE: usize = 64 << 10;
const MAX_XML: usize = 1 << 20;
const MAX_VALUE: usize = 4096;
const MAX_DIGITS: usize = 18;
const MAX_STATS_BLOCKS: usize = 64;
const STATS_TAIL: usize = 64 << 10;
const XML_BEGIN: &[u8] = b"=== XML description of glidein activity ===";
const XML_END: &[u8] = b"=== End XML description of glidein activity ===";
const KNOWN_SLOT_STATS: [&[u8]; 5] = [b"Total", b"goodZ", b"goodNZ", b"badSignal", b"badOther"];

pub const HEADER_KEYS: [&[u8]; 9] = [
    b"condorg_cluster",
    b"condorg_subcluster",
    b"condorg_schedd",
    b"glidein_uuid",
    b"glidein_factory",
    b"glidein_name",
    b"glidein_entry",
    b"client_name",
    b"client_group",
];

/// Stats block counts, as `StatsFormat`.
pub const FORMAT_ABSENT: u8 = 0;
pub const FORMAT_EMPTY: u8 = 1;
pub const FORMAT_LEGACY: u8 = 2;
pub const FORMAT_REAL: u8 = 3;

#[derive(Default)]
pub struct Out<'a> {
    /// condorg_cluster, condorg_subcluster as numbers
    pub cluster: Option<u64>,
    pub proc_: Option<u64>,
    /// the other header values, in HEADER_KEYS order from index 2
    pub header: [Option<&'a str>; 7],
    pub startup_time: Option<u64>,
    pub validation_end: Option<u64>,
    pub validation_duration: Option<u64>,
    pub condor_started: bool,
    pub condor_start: Option<u64>,
    pub condor_end: Option<u64>,
    pub condor_duration: Option<u64>,
    pub glidein_end: Option<u64>,
    pub glidein_duration: Option<u64>,
    pub exit_code: Option<u64>,
    pub activations_claims: Option<u64>,
    pub stats_format: u8,
    pub stats: Vec<(&'a str, u64, u64)>,
    pub stats_real_total: Option<(u64, u64)>,
    pub normalization: Option<u64>,
    pub cpus: Option<u64>,
    pub memory_mb: Option<u64>,
    pub metrics: Vec<(String, String)>,
    pub status: Option<String>,
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn header<'a>(data: &'a [u8], out: &mut Out<'a>) -> R<()> {
    let stop = data.len().min(MAX_LINE);
    let mut start = 0;
    let mut lines = Lines::new(data, needle!(b"Starting glidein_startup.sh at "), 0, stop, MAX_LINE);
    if let Some((off, line)) = lines.next_line()? {
        // Starting glidein_startup\.sh at .*?\((\d+)\)
        let mut q = 31;
        while let Some(i) = find_byte(line, b'(', q, line.len()) {
            let d = digits(line, i + 1);
            if d > 0 && line.get(i + 1 + d) == Some(&b')') {
                out.startup_time = Some(num(&line[i + 1..i + 1 + d], MAX_DIGITS)?);
                break;
            }
            q = i + 1;
        }
        start = off;
    }
    let end = find_in(data, needle!(b"\n\n"), start, start + MAX_LINE).unwrap_or_else(|| data.len().min(start + MAX_LINE));
    // The Python reader searches b"\n" + data[start:end] for b"\n" + key.
    let region = &data[start..end];
    // "\n" + each key, searchers built once
    static LINE_KEYS: std::sync::LazyLock<Vec<memchr::memmem::Finder<'static>>> = std::sync::LazyLock::new(|| {
        HEADER_KEYS.iter().map(|k| memchr::memmem::Finder::new(&[b"\n", *k].concat()).into_owned()).collect()
    });
    for (k, key) in HEADER_KEYS.iter().enumerate() {
        let line_start = if region.starts_with(key) {
            Some(0)
        } else {
            find_in(region, &LINE_KEYS[k], 0, region.len()).map(|i| i + 1)
        };
        let Some(ls) = line_start else { continue };
        // (\w+)[ \t]*= '([^'\n]*)'[ \t\r]*$   with group 1 == key
        let s = &region[ls..];
        let w = s.iter().take_while(|c| is_word(**c)).count();
        if w != key.len() {
            continue;
        }
        let mut p = w;
        while matches!(s.get(p), Some(b' ' | b'\t')) {
            p += 1;
        }
        if !s[p..].starts_with(b"= '") {
            continue;
        }
        p += 3;
        let v0 = p;
        while !matches!(s.get(p), None | Some(b'\'' | b'\n')) {
            p += 1;
        }
        if s.get(p) != Some(&b'\'') {
            continue;
        }
        let raw = &s[v0..p];
        p += 1;
        while matches!(s.get(p), Some(b' ' | b'\t' | b'\r')) {
            p += 1;
        }
        if !matches!(s.get(p), None | Some(b'\n')) {
            continue;
        }
        if raw.len() > MAX_VALUE {
            return Err(Fallback); // cut to MAX_VALUE by the Python reader, maybe mid-character
        }
        match k {
            0 | 1 => {
                if raw.is_empty() {
                    continue;
                }
                let v = Some(num(raw, MAX_DIGITS)?); // not all digits: bad_number, the Python reader's
                if k == 0 {
                    out.cluster = v;
                } else {
                    out.proc_ = v;
                }
            }
            _ => out.header[k - 2] = Some(std::str::from_utf8(raw).map_err(|_| Fallback)?),
        }
    }
    Ok(())
}

/// `MARKER(\d+)` on the first line of `marker` from `pos` that has it: (offset past it, the number).
fn marker_digits(data: &[u8], marker: &'static memchr::memmem::Finder<'static>, pos: usize) -> R<Option<(usize, u64)>> {
    let p = marker.needle().len();
    let hit = match_at(data, marker, pos, MAX_LINE, |s| {
        let d = digits(s, p);
        (d > 0).then_some((p + d, d))
    })?;
    hit.map(|(off, end, d)| Ok((end, num(&data[off + p..off + p + d], MAX_DIGITS)?))).transpose()
}

/// `MARKER(?:.*?\((\d+)\))?.*?TAIL` on the first line of `marker` from `pos` that matches, its
/// numbers parsed: (offset past the match, the epoch in parentheses, the tail's digit runs).
fn marker_line(data: &[u8], marker: &'static memchr::memmem::Finder<'static>, pos: usize, tail: &[Tok]) -> R<Option<(usize, Option<u64>, [u64; 2])>> {
    let hit = match_at(data, marker, pos, MAX_LINE, |s| paren_tail(s, marker.needle().len(), tail).map(|(e, ep, caps)| (e, (ep, caps))))?;
    let Some((off, end, (ep, caps))) = hit else { return Ok(None) };
    let at = |(a, b): (usize, usize)| num(&data[off + a..off + b], MAX_DIGITS);
    let runs = tail.iter().filter(|t| matches!(t, Tok::Digits)).count();
    let mut nums = [0; 2];
    for (v, &c) in nums.iter_mut().zip(&caps).take(runs) {
        *v = at(c)?;
    }
    Ok(Some((end, ep.map(at).transpose()?, nums)))
}

fn count_line<'a>(s: &'a [u8]) -> Option<(u8, &'a [u8], &'a [u8], &'a [u8])> {
    // ^(?:\((Real|Normalized)\) )?Total(?: (\w+))? jobs (\d+) [^\n]*?utilization (\d+)
    let (kind, mut p) = if s.starts_with(b"(Real) ") {
        (1u8, 7)
    } else if s.starts_with(b"(Normalized) ") {
        (2u8, 13)
    } else {
        (0u8, 0)
    };
    if !s[p..].starts_with(b"Total") {
        return None;
    }
    p += 5;
    let rest = |q: usize| -> Option<(&'a [u8], &'a [u8])> {
        if !s.get(q..)?.starts_with(b" jobs ") {
            return None;
        }
        let j0 = q + 6;
        let jd = digits(s, j0);
        if jd == 0 || s.get(j0 + jd) != Some(&b' ') {
            return None;
        }
        let mut r = j0 + jd + 1;
        while let Some(i) = find(s, b"utilization ", r, s.len()) {
            let d = digits(s, i + 12);
            if d > 0 {
                return Some((&s[j0..j0 + jd], &s[i + 12..i + 12 + d]));
            }
            r = i + 1;
        }
        None
    };
    if s.get(p) == Some(&b' ') {
        let w = s[p + 1..].iter().take_while(|c| is_word(**c)).count();
        if w > 0 {
            if let Some((j, u)) = rest(p + 1 + w) {
                return Some((kind, &s[p + 1..p + 1 + w], j, u));
            }
        }
    }
    rest(p).map(|(j, u)| (kind, &b""[..], j, u))
}

/// The line starts in [from, to) (a `^` under re.M with pos/endpos), each line cut at `to`.
fn lines_in(data: &[u8], from: usize, to: usize) -> impl Iterator<Item = &[u8]> {
    let mut l = if from == 0 || data[from - 1] == b'\n' {
        from
    } else {
        find_byte(data, b'\n', from, to).map_or(to, |i| i + 1)
    };
    std::iter::from_fn(move || {
        if l >= to {
            return None;
        }
        let e = find_byte(data, b'\n', l, to).unwrap_or(to);
        let line = &data[l..e];
        l = e + 1;
        Some(line)
    })
}

fn stats<'a>(data: &'a [u8], out: &mut Out<'a>, start: usize) -> R<usize> {
    let mut pos = start;
    let (mut seen_block, mut real, mut counted) = (false, false, false);
    for _ in 0..MAX_STATS_BLOCKS {
        // === Stats of (\S+) ===
        let hit = match_at(data, needle!(b"=== Stats of "), pos, MAX_LINE, |s: &'a [u8]| {
            let w = s[13..].iter().take_while(|c| !matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)).count();
            (w > 0 && s[13 + w..].starts_with(b" ===")).then_some((13 + w + 4, &s[13..13 + w]))
        })?;
        let Some((_, hdr_end, slot)) = hit else { break };
        let body = find_byte(data, b'\n', hdr_end, data.len()).unwrap_or(data.len());
        let Some(close) = find_in(data, needle!(b"=== End Stats of "), body, data.len()) else {
            return Err(Fallback); // truncated
        };
        pos = close + 17;
        if slot.ends_with(b"1") {
            continue;
        }
        seen_block = true;
        let tail_start = body.max(close.saturating_sub(STATS_TAIL));
        for line in lines_in(data, tail_start, close) {
            let Some((kind, name, jobs, secs)) = count_line(line) else { continue };
            let (jobsnr, secs) = (num(jobs, MAX_DIGITS)?, num(secs, MAX_DIGITS)?);
            let name: &[u8] = if name.is_empty() { b"Total" } else { name };
            if !KNOWN_SLOT_STATS.contains(&name) {
                continue;
            }
            counted = true;
            let name = std::str::from_utf8(name).map_err(|_| Fallback)?;
            if kind == 1 {
                real = true;
                if name == "Total" && out.stats_real_total.is_none() {
                    out.stats_real_total = Some((jobsnr, secs));
                }
                continue;
            }
            if kind == 2 {
                real = true;
            }
            if !out.stats.iter().any(|(n, _, _)| *n == name) {
                out.stats.push((name, jobsnr, secs));
            }
        }
        if out.normalization.is_none() {
            const NORM: &[u8] = b"Normalization [parallelism] factor ";
            for line in lines_in(data, tail_start, close) {
                if line.starts_with(NORM) {
                    let d = digits(line, NORM.len());
                    if d > 0 {
                        out.normalization = Some(num(&line[NORM.len()..NORM.len() + d], MAX_DIGITS)?);
                        break;
                    }
                }
            }
        }
    }
    out.stats_format = if real {
        FORMAT_REAL
    } else if counted {
        FORMAT_LEGACY
    } else if seen_block {
        FORMAT_EMPTY
    } else {
        FORMAT_ABSENT
    };
    Ok(pos)
}

fn xml_part(data: &[u8], out: &mut Out<'_>, start: usize) -> R<()> {
    let Some(begin) = find_in(data, needle!(XML_BEGIN), start, data.len()) else { return Ok(()) };
    let body = begin + XML_BEGIN.len();
    let Some(end) = find_in(data, needle!(XML_END), body, body + MAX_XML + XML_END.len()) else {
        return Err(Fallback); // too large or truncated
    };
    let doc = xml::parse(strip(&data[body..end]))?;
    out.status = doc.status;
    out.metrics = doc.metrics;
    Ok(())
}

pub fn parse(data: &[u8]) -> R<Out<'_>> {
    let mut out = Out::default();
    // Files the Python reader records anything about: a line too long, a last line cut.
    if data.is_empty() || !data.ends_with(b"\n") || !crate::scan::lines_shorter_than(data, MAX_LINE) {
        return Err(Fallback);
    }
    header(data, &mut out)?;
    out.cpus = marker_digits(data, needle!(b"Setting GLIDEIN_CPUS="), 0)?.map(|(_, v)| v);
    out.memory_mb = marker_digits(data, needle!(b"Setting GLIDEIN_MaxMemMBs="), 0)?.map(|(_, v)| v);
    let mut pos = 0;
    const VAL: [Tok; 3] = [Tok::Lit(b" after validating for "), Tok::Digits, Tok::Lit(b" ===")];
    if let Some((p, epoch, [duration, _])) = marker_line(data, needle!(b"=== Last script starting "), 0, &VAL)? {
        pos = p;
        out.validation_end = epoch;
        out.validation_duration = Some(duration);
    }
    const START: [Tok; 1] = [Tok::Lit(b"===")];
    if let Some((p, epoch, _)) = marker_line(data, needle!(b"=== Condor starting "), pos, &START)? {
        pos = p;
        out.condor_started = true;
        out.condor_start = epoch;
        const END: [Tok; 3] = [Tok::Lit(b" after "), Tok::Digits, Tok::Lit(b" ===")];
        if let Some((p, epoch, [duration, _])) = marker_line(data, needle!(b"=== Condor ended "), pos, &END)? {
            pos = p;
            out.condor_end = epoch;
            out.condor_duration = Some(duration);
        }
    }
    pos = stats(data, &mut out, pos)?;
    if let Some((p, claims)) = marker_digits(data, needle!(b"Total number of activations/claims: "), pos)? {
        pos = p;
        out.activations_claims = Some(claims);
    }
    const GEND: [Tok; 5] =
        [Tok::Lit(b" with code "), Tok::Digits, Tok::Lit(b" after "), Tok::Digits, Tok::Lit(b" ===")];
    if let Some((p, epoch, [code, duration])) = marker_line(data, needle!(b"=== Glidein ending "), pos, &GEND)? {
        pos = p;
        out.glidein_end = epoch;
        out.exit_code = Some(code);
        out.glidein_duration = Some(duration);
    }
    xml_part(data, &mut out, pos)?;
    if out.startup_time.is_none() && out.glidein_end.is_none() && out.cluster.is_none() && !out.condor_started {
        return Err(Fallback); // "garbage"
    }
    Ok(out)
}
