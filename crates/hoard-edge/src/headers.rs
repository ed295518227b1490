//! Header edits of a route (nginx `add_header ... always`,
//! `proxy_hide_header`, `proxy_set_header`): `remove`, then `set` (replaces
//! every field of the name), then `add` (appends). A site's
//! `response_headers` go under each route's (see [`HeaderEdits::under`]). Built once per route and
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
        Value::parse_for(text, false)
    }

    /// As [`Value::parse`]; `delivery` allows the delivery variables
    /// (`response_headers`, see `template`).
    ///
    /// # Errors
    /// The message for the operator.
    pub fn parse_for(text: &str, delivery: bool) -> Result<Value, String> {
        let t = Template::parse_for(text, 0, delivery)?;
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
    /// True when a value uses a delivery variable (`$cache_status`...).
    pub fn uses_delivery(&self) -> bool {
        self.values()
            .any(|v| matches!(v, Value::Template(t) if t.uses_delivery()))
    }

    /// True when a value uses `$cache_hits` (hits are then counted).
    pub fn uses_cache_hits(&self) -> bool {
        self.values()
            .any(|v| matches!(v, Value::Template(t) if t.uses_cache_hits()))
    }

    fn values(&self) -> impl Iterator<Item = &Value> {
        self.set.iter().chain(&self.add).map(|(_, v)| v)
    }

    /// True when there is nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.add.is_empty()
    }

    /// Every name the edits touch (removed, set or added).
    fn names(&self) -> impl Iterator<Item = &HeaderName> {
        self.remove
            .iter()
            .chain(self.set.iter().map(|(n, _)| n))
            .chain(self.add.iter().map(|(n, _)| n))
    }

    /// A site's edits (`self`) under a route's own: the site's edits of the
    /// names the route does not edit, then the route's. A route that edits
    /// a name (by `set`, `add` or `remove`) decides that field alone, and
    /// everything else the site says still applies (unlike nginx, where a
    /// location's own `add_header` drops every one it would inherit).
    pub fn under(&self, route: &HeaderEdits) -> HeaderEdits {
        let mine = |n: &HeaderName| !route.names().any(|r| r == n);
        let keep = |list: &[(HeaderName, Value)], own: &[(HeaderName, Value)]| {
            list.iter()
                .filter(|(n, _)| mine(n))
                .chain(own)
                .cloned()
                .collect()
        };
        HeaderEdits {
            remove: self
                .remove
                .iter()
                .filter(|n| mine(n))
                .chain(&route.remove)
                .cloned()
                .collect(),
            set: keep(&self.set, &route.set),
            add: keep(&self.add, &route.add),
        }
    }

    /// Sets and adds again the forwarding fields among the edits (those
    /// `hoard_proxy::pipeline::forwarding::prepare` removes from what clients
    /// send), after it ran.
    pub fn apply_forwarding(&self, headers: &mut HeaderMap, vars: &Vars<'_>) {
        let owned = |n: &HeaderName| hoard_policy::headers::FORWARDING_OWNED.contains(&n.as_str());
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fixed(v: &'static str) -> Value {
        Value::Fixed(HeaderValue::from_static(v))
    }

    fn name(n: &'static str) -> HeaderName {
        HeaderName::from_static(n)
    }

    #[test]
    fn a_route_edit_of_a_name_replaces_the_sites() {
        let site = HeaderEdits {
            remove: vec![name("x-powered-by")],
            set: vec![
                (name("strict-transport-security"), fixed("max-age=1")),
                (name("x-frame-options"), fixed("DENY")),
            ],
            add: vec![(name("x-site"), fixed("s"))],
        };
        let route = HeaderEdits {
            remove: Vec::new(),
            set: vec![(name("x-powered-by"), fixed("hoard"))],
            add: vec![(name("strict-transport-security"), fixed("max-age=0"))],
        };
        let mut h = HeaderMap::new();
        h.insert("x-powered-by", HeaderValue::from_static("PHP"));
        h.insert("strict-transport-security", HeaderValue::from_static("x"));
        let vars = Vars {
            host: "example.com",
            request_uri: "/",
            remote_addr: std::net::Ipv4Addr::LOCALHOST.into(),
            scheme: "https",
            path: "/",
            delivery: None,
        };
        site.under(&route).apply(&mut h, &vars);
        assert_eq!(h["x-powered-by"], "hoard");
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["x-site"], "s");
        let sts: Vec<_> = h.get_all("strict-transport-security").iter().collect();
        assert_eq!(sts, ["x", "max-age=0"], "the route's add alone");
        // No route edits: the site's alone.
        let alone = site.under(&HeaderEdits::default());
        assert_eq!(
            (alone.remove.len(), alone.set.len(), alone.add.len()),
            (1, 2, 1)
        );
    }
}
