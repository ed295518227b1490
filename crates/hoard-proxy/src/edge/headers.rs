//! Header edits of a route (nginx `add_header ... always`,
//! `proxy_hide_header`, `proxy_set_header`): `remove`, then `set` (replaces
//! every field of the name), then `add` (appends). Built once per route and
//! reload; a value without variables is a ready [`HeaderValue`], so a hit
//! pays one insert per field and no formatting.

use http::header::{HeaderMap, HeaderName, HeaderValue};

use super::template::{Template, Vars};

/// Fields that belong to the connection or the message framing: an edit
/// could break the exchange, so the configuration refuses them.
pub const REFUSED: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
    "host",
];

/// A field value: fixed, or expanded per request.
#[derive(Debug, Clone)]
pub enum Value {
    /// No variables.
    Fixed(HeaderValue),
    /// Expanded per request.
    Template(Template),
}

/// The edits of one direction. See the module docs.
#[derive(Debug, Clone, Default)]
pub struct HeaderEdits {
    /// Removed first.
    pub remove: Vec<HeaderName>,
    /// Then replaced.
    pub set: Vec<(HeaderName, Value)>,
    /// Then appended.
    pub add: Vec<(HeaderName, Value)>,
}

impl Value {
    /// Parses a configured value.
    ///
    /// # Errors
    /// The message for the operator.
    pub fn parse(text: &str) -> Result<Value, String> {
        let t = Template::parse(text, 0)?;
        Ok(match t.fixed() {
            Some(fixed) => Value::Fixed(
                HeaderValue::from_str(fixed)
                    .map_err(|_| format!("{text:?} is not a valid field value"))?,
            ),
            None => Value::Template(t),
        })
    }

    fn get(&self, vars: &Vars<'_>) -> Option<HeaderValue> {
        match self {
            Value::Fixed(v) => Some(v.clone()),
            // A variable may bring bytes a field cannot hold: the field is left out.
            Value::Template(t) => HeaderValue::try_from(t.expand(vars, None)).ok(),
        }
    }
}

impl HeaderEdits {
    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Sets and adds again the forwarding fields among the edits (those
    /// [`crate::pipeline::forwarding::prepare`] removes from what clients
    /// send), after it ran.
    pub fn apply_forwarding(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        let owned = |n: &HeaderName| crate::pipeline::forwarding::OWNED.contains(&n.as_str());
        for (name, value) in self.set.iter().filter(|(n, _)| owned(n)) {
            if let Some(v) = value.get(vars) {
                headers.insert(name.clone(), v);
            }
        }
        for (name, value) in self.add.iter().filter(|(n, _)| owned(n)) {
            if let Some(v) = value.get(vars) {
                headers.append(name.clone(), v);
            }
        }
    }

    /// Applies the edits to `headers`.
    pub fn apply(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        for name in &self.remove {
            headers.remove(name);
        }
        for (name, value) in &self.set {
            match value.get(vars) {
                Some(v) => {
                    headers.insert(name.clone(), v);
                }
                None => {
                    headers.remove(name);
                }
            }
        }
        for (name, value) in &self.add {
            if let Some(v) = value.get(vars) {
                headers.append(name.clone(), v);
            }
        }
    }
}
