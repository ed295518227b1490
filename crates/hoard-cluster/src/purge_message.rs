//! A purge as peers and the cluster's log carry it: one JSON object with
//! the selector and `soft`, sent in a peer's `POST` of `crate::purge::PATH`
//! and kept as a log entry (`crate::bus`).

use hoard_store::catalog::Selector;

/// The JSON body a member receives.
pub fn encode(selector: &Selector, soft: bool) -> serde_json::Value {
    let sel = match selector {
        Selector::Url {
            scheme,
            host,
            target,
        } => serde_json::json!({ "url": { "scheme": scheme, "host": host, "target": target } }),
        Selector::Prefix(p) => serde_json::json!({ "prefix": p }),
        Selector::Host(h) => serde_json::json!({ "host": h }),
        Selector::Tag(t) => serde_json::json!({ "tag": t }),
        Selector::Key(k) => serde_json::json!({ "key": k }),
        Selector::Regex(r) => serde_json::json!({ "regex": r.as_str() }),
    };
    serde_json::json!({ "selector": sel, "soft": soft })
}

/// The selector and `soft` of a body made by [`encode`].
pub fn decode(body: &[u8]) -> Option<(Selector, bool)> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let soft = v.get("soft")?.as_bool()?;
    let s = v.get("selector")?.as_object()?;
    let (kind, value) = s.iter().next()?;
    let text = |v: &serde_json::Value| v.as_str().map(str::to_string);
    let sel = match kind.as_str() {
        "url" => Selector::Url {
            scheme: text(value.get("scheme")?)?,
            host: text(value.get("host")?)?,
            target: text(value.get("target")?)?,
        },
        "prefix" => Selector::Prefix(text(value)?),
        "host" => Selector::Host(text(value)?),
        "tag" => Selector::Tag(text(value)?),
        "key" => Selector::Key(text(value)?),
        "regex" => Selector::Regex(hoard_store::catalog::PathRegex::new(&text(value)?).ok()?),
        _ => return None,
    };
    Some((sel, soft))
}
