//! The glidein's `<OSGTestResult>` XML, for a strict subset of XML only.
//!
//! What ElementTree would give the Python reader (`root.find(".//status")`
//! and every `<metric name=..>`), for documents of plain ASCII elements,
//! attributes and text. Anything else — entities, comments, CDATA, a DTD,
//! namespaces, non-ASCII, carriage returns, a malformed tag — is left to the
//! Python reader (expat through ElementTree, or defusedxml).

use crate::scan::{find, memchr_pos, Fallback, R};

const MAX_METRICS: usize = 1000;
const MAX_VALUE: usize = 4096;
const MAX_NAME: usize = 200;

pub struct Doc {
    pub status: Option<String>,
    pub metrics: Vec<(String, String)>,
}

fn ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n')
}

fn name_len(s: &[u8], p: usize) -> usize {
    let mut i = p;
    while let Some(&c) = s.get(i) {
        let ok = c.is_ascii_alphabetic() || c == b'_' || (i > p && (c.is_ascii_digit() || c == b'.' || c == b'-'));
        if !ok {
            break;
        }
        i += 1;
    }
    i - p
}

fn text_of(t: Option<&[u8]>) -> Option<String> {
    t.map(|t| {
        let s = crate::scan::strip(t);
        String::from_utf8_lossy(&s[..s.len().min(MAX_VALUE)]).into_owned()
    })
}

struct Open<'a> {
    name: &'a [u8],
    text: Option<&'a [u8]>, // character data before the first child; None: none at all
    had_child: bool,
    status: bool, // the first <status> below the root: its text is the answer
    metric: Option<usize>, // a <metric>'s place in `found` (its start tag's order)
}

/// Past the white space at `p`.
fn skip_ws(x: &[u8], mut p: usize) -> usize {
    while x.get(p).is_some_and(|&c| ws(c)) {
        p += 1;
    }
    p
}

pub fn parse(x: &[u8]) -> R<Doc> {
    if x.iter().any(|&c| c >= 0x80 || c == b'\r' || c == b'&' || c == 0 || (c < 0x20 && c != b'\t' && c != b'\n')) {
        return Err(Fallback);
    }
    if find(x, b"<!", 0, x.len()).is_some() || find(x, b"]]>", 0, x.len()).is_some() {
        return Err(Fallback);
    }
    let mut p = 0;
    if x.starts_with(b"<?xml") {
        let end = find(x, b"?>", 0, x.len()).ok_or(Fallback)?;
        let decl = &x[5..end];
        let ok = [
            &b" version=\"1.0\""[..],
            b" version='1.0'",
            b" version=\"1.0\" encoding=\"utf-8\"",
            b" version=\"1.0\" encoding=\"UTF-8\"",
        ]
        .contains(&decl);
        if !ok {
            return Err(Fallback);
        }
        p = end + 2;
    }
    if find(x, b"<?", p, x.len()).is_some() {
        return Err(Fallback);
    }
    let mut doc = Doc { status: None, metrics: Vec::new() };
    let mut status_found = false;
    let mut stack: Vec<Open<'_>> = Vec::new();
    let mut root_done = false;
    let mut found: Vec<(&[u8], String)> = Vec::new(); // every <metric>: (name, text), in start-tag order
    loop {
        // character data up to the next tag
        let lt = memchr_pos(b'<', x, p);
        let text = &x[p..lt.unwrap_or(x.len())];
        match stack.last_mut() {
            Some(top) => {
                if !text.is_empty() && !top.had_child {
                    top.text = Some(text);
                }
            }
            None => {
                if !text.iter().all(|&c| ws(c)) {
                    return Err(Fallback); // text outside the root
                }
            }
        }
        let Some(lt) = lt else { break };
        if root_done {
            return Err(Fallback); // a second root
        }
        p = lt + 1;
        if x.get(p) == Some(&b'/') {
            p += 1;
            let n = name_len(x, p);
            let name = &x[p..p + n];
            p += n;
            p = skip_ws(x, p);
            if x.get(p) != Some(&b'>') {
                return Err(Fallback);
            }
            p += 1;
            let top = stack.pop().ok_or(Fallback)?;
            if top.name != name || n == 0 {
                return Err(Fallback);
            }
            close(&mut doc.status, &mut found, &top);
            if stack.is_empty() {
                root_done = true;
            }
            continue;
        }
        let n = name_len(x, p);
        if n == 0 {
            return Err(Fallback);
        }
        let name = &x[p..p + n];
        p += n;
        let mut attrs: Vec<(&[u8], &[u8])> = Vec::new();
        let self_closing;
        loop {
            let w0 = p;
            p = skip_ws(x, p);
            match x.get(p) {
                Some(b'>') => {
                    p += 1;
                    self_closing = false;
                    break;
                }
                Some(b'/') if x.get(p + 1) == Some(&b'>') => {
                    p += 2;
                    self_closing = true;
                    break;
                }
                _ => {}
            }
            if p == w0 {
                return Err(Fallback); // attributes must be separated by white space
            }
            let an = name_len(x, p);
            if an == 0 {
                return Err(Fallback);
            }
            let aname = &x[p..p + an];
            p = skip_ws(x, p + an);
            if x.get(p) != Some(&b'=') {
                return Err(Fallback);
            }
            p = skip_ws(x, p + 1);
            let q = *x.get(p).ok_or(Fallback)?;
            if q != b'"' && q != b'\'' {
                return Err(Fallback);
            }
            let v0 = p + 1;
            let v1 = memchr_pos(q, x, v0).ok_or(Fallback)?;
            let value = &x[v0..v1];
            // expat turns tabs and newlines in attribute values into spaces; "<" is an error
            if value.iter().any(|&c| c == b'<' || c == b'\t' || c == b'\n')
                || aname.starts_with(b"xmlns")
                || attrs.iter().any(|(a, _)| *a == aname)
            {
                return Err(Fallback);
            }
            attrs.push((aname, value));
            p = v1 + 1;
        }
        if let Some(parent) = stack.last_mut() {
            parent.had_child = true;
        } else if root_done {
            return Err(Fallback);
        }
        let is_status = !stack.is_empty() && !status_found && name == b"status";
        if is_status {
            status_found = true;
        }
        // Metrics are taken in document (start-tag) order: their place is taken now, the text at the end tag.
        let mut metric = None;
        if name == b"metric" {
            let mname = attrs.iter().find(|(a, _)| *a == b"name").map_or(&b""[..], |(_, v)| *v);
            if mname.len() > MAX_NAME {
                return Err(Fallback);
            }
            metric = Some(found.len());
            found.push((mname, String::new()));
        }
        let open = Open { name, text: None, had_child: false, status: is_status, metric };
        if self_closing {
            close(&mut doc.status, &mut found, &open);
            if stack.is_empty() {
                root_done = true;
            }
        } else {
            stack.push(open);
        }
    }
    if !stack.is_empty() || !root_done {
        return Err(Fallback);
    }
    // The metrics in start-tag order: first of each name, empty names skipped, at most MAX_METRICS.
    let mut metrics: Vec<(String, String)> = Vec::new();
    for (name, text) in found {
        if name.is_empty() || metrics.iter().any(|(n, _)| n.as_bytes() == name) {
            continue;
        }
        metrics.push((String::from_utf8_lossy(name).into_owned(), text));
        if metrics.len() >= MAX_METRICS {
            break;
        }
    }
    doc.metrics = metrics;
    Ok(doc)
}

/// An element ends: its text is final.
fn close(status: &mut Option<String>, found: &mut [(&[u8], String)], el: &Open<'_>) {
    if el.status {
        *status = text_of(el.text);
    }
    if let Some(i) = el.metric {
        found[i].1 = text_of(el.text).unwrap_or_default();
    }
}
