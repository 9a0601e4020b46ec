//! ClassAd literals as `gwms_obs.sources.classad.parse_value` reads them, for ASCII text.

use crate::scan::{Fallback, R};

#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    Int(i128),
    Real(f64),
    Bool,
    Str(&'a [u8]), // a string literal without escapes
    Expr,
    Undefined,
}

/// Python's `str.strip()` for text without non-ASCII or control bytes other than tab.
fn strip(s: &[u8]) -> &[u8] {
    let a = s.iter().position(|c| !matches!(c, b' ' | b'\t')).unwrap_or(s.len());
    let b = s.iter().rposition(|c| !matches!(c, b' ' | b'\t')).map_or(a, |i| i + 1);
    &s[a..b.max(a)]
}

fn is_int(s: &[u8]) -> bool {
    // [+-]?\d{1,19}
    let d = if matches!(s.first(), Some(b'+' | b'-')) { &s[1..] } else { s };
    (1..=19).contains(&d.len()) && d.iter().all(u8::is_ascii_digit)
}

fn is_real(s: &[u8]) -> bool {
    // [+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d{1,4})?
    let mut p = usize::from(matches!(s.first(), Some(b'+' | b'-')));
    let n = |p: usize| s[p.min(s.len())..].iter().take_while(|c| c.is_ascii_digit()).count();
    let d1 = n(p);
    if d1 > 0 {
        p += d1;
        if s.get(p) == Some(&b'.') {
            p += 1;
            p += n(p);
        }
    } else {
        if s.get(p) != Some(&b'.') {
            return false;
        }
        let d2 = n(p + 1);
        if d2 == 0 {
            return false;
        }
        p += 1 + d2;
    }
    if matches!(s.get(p), Some(b'e' | b'E')) {
        let mut q = p + 1;
        if matches!(s.get(q), Some(b'+' | b'-')) {
            q += 1;
        }
        let e = n(q);
        if (1..=4).contains(&e) {
            p = q + e;
        }
    }
    p == s.len()
}

/// `parse_value(raw.decode())`; Fallback for text the Python reader decodes or strips differently.
pub fn parse_value(raw: &[u8]) -> R<Value<'_>> {
    if raw.iter().any(|&c| c >= 0x80 || (c < 0x20 && c != b'\t')) {
        return Err(Fallback);
    }
    let s = strip(raw);
    let Some(&c) = s.first() else { return Ok(Value::Expr) };
    if c == b'"' {
        // "((?:[^"\\]|\\.)*)" in full; escapes are rare: the Python reader takes those
        if s.contains(&b'\\') {
            return Err(Fallback);
        }
        if s.len() >= 2 && s[s.len() - 1] == b'"' && !s[1..s.len() - 1].contains(&b'"') {
            return Ok(Value::Str(&s[1..s.len() - 1]));
        }
        return Ok(Value::Expr);
    }
    if c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.') {
        if is_int(s) {
            let txt = std::str::from_utf8(s).map_err(|_| Fallback)?;
            return txt.parse::<i128>().map(Value::Int).map_err(|_| Fallback);
        }
        if s.len() <= 64 && is_real(s) {
            let txt = std::str::from_utf8(s).map_err(|_| Fallback)?;
            let v: f64 = txt.parse().map_err(|_| Fallback)?;
            return Ok(if v.is_finite() { Value::Real(v) } else { Value::Expr });
        }
        return Ok(Value::Expr);
    }
    if s.eq_ignore_ascii_case(b"true") || s.eq_ignore_ascii_case(b"false") {
        return Ok(Value::Bool);
    }
    if s.eq_ignore_ascii_case(b"undefined") {
        return Ok(Value::Undefined);
    }
    Ok(Value::Expr)
}

/// A plain digit run of at most 19 digits (`_digit_run`).
pub fn digit_run(raw: &[u8]) -> Option<i128> {
    if raw.is_empty() || raw.len() > 19 || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(raw.iter().fold(0i128, |v, c| v * 10 + i128::from(c - b'0')))
}

/// `_int(parse_value(raw))`: integers, truncated finite reals; else None.
pub fn int_value(raw: &[u8]) -> R<Option<i128>> {
    if let Some(v) = digit_run(raw) {
        return Ok(Some(v));
    }
    Ok(match parse_value(raw)? {
        Value::Int(v) => Some(v),
        Value::Real(f) => {
            let t = f.trunc();
            if t.abs() >= 1e30 {
                return Err(Fallback); // Python's int() of it is a big integer
            }
            Some(t as i128)
        }
        _ => None,
    })
}
