//! The checks shared by the assertions on requests (origin side) and
//! responses (client side): each returns the failure message, the caller
//! adds the whole message in context.

use crate::wire;

/// The first `name` field equals `value`.
pub(crate) fn header_is(
    headers: &[(String, String)],
    name: &str,
    value: &str,
) -> Result<(), String> {
    match wire::find(headers, name) {
        Some(v) if v == value => Ok(()),
        Some(v) => Err(format!("expected header {name}: {value:?}, got {v:?}")),
        None => Err(format!(
            "expected header {name}: {value:?}, but it is absent"
        )),
    }
}

/// The first `name` field contains `part`.
pub(crate) fn header_contains(
    headers: &[(String, String)],
    name: &str,
    part: &str,
) -> Result<(), String> {
    match wire::find(headers, name) {
        Some(v) if v.contains(part) => Ok(()),
        Some(v) => Err(format!(
            "expected header {name} to contain {part:?}, got {v:?}"
        )),
        None => Err(format!(
            "expected header {name} containing {part:?}, but it is absent"
        )),
    }
}

/// There is no `name` field.
pub(crate) fn no_header(headers: &[(String, String)], name: &str) -> Result<(), String> {
    match wire::find(headers, name) {
        Some(v) => Err(format!("expected no header {name}, got {v:?}")),
        None => Ok(()),
    }
}

/// The body is `want`.
pub(crate) fn body_is(got: &[u8], want: &[u8]) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "expected body {}, got {}",
            wire::show(want),
            wire::show(got)
        ))
    }
}
