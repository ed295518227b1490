//! Helpers shared by the fuzz targets: header maps built from raw bytes, as
//! hyper would hand them over, so that every byte string is some input.

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// Field lines `name: value`, one per `\n`. Lines that are not a valid field
/// (no colon, a bad name, a control character in the value) are skipped, so
/// any byte string gives a (possibly empty) map. One space after the colon
/// is dropped; anything else is kept as sent.
pub fn header_map(data: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let value = &line[colon + 1..];
        let value = value.strip_prefix(b" ").unwrap_or(value);
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            h.append(n, v);
        }
    }
    h
}

/// Lines of one field `name`, one per `\n` of `data`; invalid lines are skipped.
pub fn field_lines(name: &HeaderName, data: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for line in data.split(|&b| b == b'\n') {
        if let Ok(v) = HeaderValue::from_bytes(line) {
            h.append(name.clone(), v);
        }
    }
    h
}

/// Sets `name` to `value` when `value` is a valid field value.
pub fn set(h: &mut HeaderMap, name: HeaderName, value: Option<&str>) {
    if let Some(v) = value.and_then(|v| HeaderValue::from_str(v).ok()) {
        h.insert(name, v);
    }
}
