//! Delivering a response: the client's preconditions, HEAD, and for stored
//! objects Age and Cache-Status.

use std::sync::Arc;
use std::time::SystemTime;

use hoard_policy::cache_status::{ttl_secs, CacheStatus};
use hoard_policy::conditional::{evaluate, Precondition};
use hoard_policy::key::CacheKey;
use hoard_store::object::StoredObject;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Response, StatusCode};
use hyper::ext::PreparedFields;

use super::answers::{cache_status_value, CACHE_STATUS};
use super::{Ctx, Pipeline};
use crate::body::ProxyBody;

/// Fields a 304 carries from the full response (RFC 9110 §15.4.5), and `Via`.
const NOT_MODIFIED_FIELDS: [header::HeaderName; 8] = [
    header::CACHE_CONTROL,
    header::CONTENT_LOCATION,
    header::DATE,
    header::ETAG,
    header::EXPIRES,
    header::VARY,
    header::LAST_MODIFIED,
    header::VIA,
];

/// Ages below this many seconds have a ready `Age` value.
const READY_AGES: u64 = 600;

/// The `Age` field's value: from a table made once for the first ten
/// minutes (a clone is a reference count, where formatting a number into
/// a new value costs two allocations per hit), formatted beyond.
pub(crate) fn age_value(secs: u64) -> HeaderValue {
    static READY: std::sync::OnceLock<Vec<HeaderValue>> = std::sync::OnceLock::new();
    match READY
        .get_or_init(|| (0..READY_AGES).map(HeaderValue::from).collect())
        .get(secs as usize)
    {
        Some(v) => v.clone(),
        None => HeaderValue::from(secs),
    }
}

/// The stored object's hits, this one included (`$cache_hits`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheHits(pub u64);

impl Pipeline {
    /// Serves a stored object to `ctx`, answering its preconditions
    /// (RFC 9110 §13.2) and adding `Age` (RFC 9111 §5.1) and `Cache-Status`.
    pub(crate) fn serve_stored(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        obj: Arc<StoredObject>,
        status: CacheStatus,
        now: SystemTime,
    ) -> Response<ProxyBody> {
        let age = obj.times.current_age(now);
        self.serve_stored_aged(ctx, key, obj, status, age)
    }

    /// [`Pipeline::serve_stored`] for an object whose `current_age` at the
    /// request's time is known (computed once for the reuse decision).
    pub(crate) fn serve_stored_aged(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        obj: Arc<StoredObject>,
        mut status: CacheStatus,
        current_age: std::time::Duration,
    ) -> Response<ProxyBody> {
        status.ttl = Some(ttl_secs(obj.times.ttl_millis_at(current_age)));
        // Only on a route that shows them (`$cache_hits`): a response
        // extension, read when the route's fields are made.
        let hits = ctx.route.count_hits.then(|| CacheHits(obj.hit()));
        // On an `esi` route, a body read from a file: the object, whose
        // parsed template it keeps (a body in memory carries its object).
        let esi = ctx.route.esi.is_some();
        let in_file = matches!(obj.body, hoard_store::object::ObjectBody::File(_));
        let page = (esi && in_file).then(|| super::esi::StoredPage(obj.clone()));
        if ctx.run.cfg.server.debug_headers {
            status.key = Some(key.text.clone());
        }
        let stored_status = obj.status;
        if let Some(encoded) = self.as_encoded(ctx, &obj) {
            // The stored fields go out as encoded on the first such hit,
            // followed by this hit's own (`Age`, `Cache-Status`), encoded
            // once for the hits that repeat them: the map stays empty.
            let via = &ctx.run.cfg.server.via;
            if let Some(own) = own_fields(current_age.as_secs(), cache_status_value(via, &status)) {
                self.counters.inc(&self.counters.cache_hit_fields_encoded);
                let fields = encoded.followed_by(&own);
                let mut resp = Response::new(ProxyBody::stored(obj, ctx.send.as_ref()));
                resp.extensions_mut().insert(fields);
                if let Some(h) = hits {
                    resp.extensions_mut().insert(h);
                }
                super::note_outcome(status.outcome());
                return resp;
            }
        }
        let age = age_value(current_age.as_secs());
        let mut headers = obj.headers.clone();
        let body = match self.choose_coding(ctx, &obj, &mut headers) {
            Some(chosen) => {
                if ctx.run.cfg.server.debug_headers && status.detail.is_none() {
                    status.detail = Some(chosen.coding.as_str());
                }
                ProxyBody::part(&chosen.body, ctx.send.as_ref())
            }
            // Whatever its chunks: the ESI step finds the object in it.
            None if esi && !in_file => ProxyBody::Stored { obj, next: 0 },
            None => ProxyBody::stored(obj, ctx.send.as_ref()),
        };
        let mut resp = self.respond(ctx, stored_status, headers, body);
        resp.headers_mut().insert(header::AGE, age);
        if let Some(h) = hits {
            resp.extensions_mut().insert(h);
        }
        if let Some(p) = page {
            resp.extensions_mut().insert(p);
        }
        self.add_cache_status_as(&ctx.run.cfg.server.via, &mut resp, &status);
        resp
    }

    /// `obj`'s fields encoded for this hit to send as they are, when the
    /// answer is the whole stored `200` with the fields the full path
    /// would give it: an HTTP/1.x GET with nothing to change them later
    /// ([`Ctx::fields_final`]), no precondition that holds it back, no
    /// `Range`, no other coding to choose, tag fields kept back.
    fn as_encoded<'o>(&self, ctx: &Ctx<'_>, obj: &'o StoredObject) -> Option<&'o PreparedFields> {
        if !ctx.fields_final
            || obj.status != StatusCode::OK
            || !obj.parts.is_empty()
            || ctx.run.cfg.admin.forward_tags
            // `Range` or a precondition: the full path answers them (one
            // pass over the request's names finds neither, commonly).
            || ctx
                .headers
                .keys()
                .any(|k| k == header::RANGE || k.as_str().starts_with("if-"))
        {
            return None;
        }
        obj.fields_derived
            .get_or_init(|| Box::new(encoded(&obj.headers)))
            .downcast_ref::<Option<PreparedFields>>()?
            .as_ref()
    }

    /// The representation of `obj` this request gets when it is not the
    /// stored body: one of the object's parts (see [`crate::encode`]), with
    /// `headers` rewritten for it. An object with parts always gets
    /// `Vary: Accept-Encoding`. A `Range` request, and one that accepts
    /// nothing stored, get the stored body (as nginx does: the field is
    /// disregarded rather than answered 406).
    fn choose_coding(
        &self,
        ctx: &Ctx<'_>,
        obj: &StoredObject,
        headers: &mut HeaderMap,
    ) -> Option<crate::encode::Chosen> {
        use hoard_policy::encoding::{content_coding, Coding};
        if obj.parts.is_empty() {
            return None;
        }
        crate::encode::vary_on_accept_encoding(headers);
        // A page is assembled from its identity bytes, then coded.
        if ctx.route.esi.is_some() && super::esi::is_page(&obj.headers) {
            return None;
        }
        let accept = ctx.accept?;
        if ctx.headers.contains_key(header::RANGE) {
            return None;
        }
        let stored = content_coding(&obj.headers).unwrap_or(Coding::Identity);
        // The stored body and at most three parts: no allocation per hit.
        let mut available = [stored; 4];
        let mut n = 1;
        for p in obj.parts.iter().take(3) {
            available[n] = p.coding;
            n += 1;
        }
        let want = accept
            .choose(&available[..n], &ctx.route.encodings)
            .unwrap_or(stored);
        if want == stored {
            return None;
        }
        let part = obj.part(want)?;
        crate::encode::recode_headers(headers, stored, want, part.body.len());
        let c = &self.counters;
        self.counters.inc(match want {
            Coding::Br => &c.served_br,
            Coding::Zstd => &c.served_zstd,
            Coding::Gzip => &c.served_gzip,
            Coding::Identity => &c.served_decoded,
        });
        Some(crate::encode::Chosen {
            coding: want,
            body: part.body.clone(),
        })
    }

    /// The answer to `ctx` from a full response: 304 or 412 when the
    /// client's preconditions say so (RFC 9110 §13.2, only for a 2xx), no
    /// body for HEAD, else the response itself.
    pub(crate) fn respond(
        &self,
        ctx: &Ctx<'_>,
        status: StatusCode,
        mut headers: HeaderMap,
        body: ProxyBody,
    ) -> Response<ProxyBody> {
        // Purge tags are for this cache, not for clients.
        if !ctx.run.cfg.admin.forward_tags {
            hoard_policy::tags::strip(&mut headers);
        }
        let pre = if status.is_success() {
            evaluate(&ctx.method, &ctx.headers, &headers)
        } else {
            Precondition::Pass
        };
        match pre {
            Precondition::NotModified => {
                let mut r = self.status_only(StatusCode::NOT_MODIFIED);
                for name in &NOT_MODIFIED_FIELDS {
                    for v in headers.get_all(name) {
                        r.headers_mut().append(name.clone(), v.clone());
                    }
                }
                r
            }
            Precondition::Failed => self.status_only(StatusCode::PRECONDITION_FAILED),
            Precondition::Pass if ctx.method == Method::HEAD => {
                // The fields a GET would get (Accept-Ranges too), no body.
                let mut r = self.ranged(ctx, status, headers, body);
                *r.body_mut() = ProxyBody::Empty;
                r
            }
            // Range after the preconditions (RFC 9110 §13.2.2 step 6).
            Precondition::Pass => self.ranged(ctx, status, headers, body),
        }
    }
}

thread_local! {
    /// The thread's last hit's own fields, encoded: its age in seconds and
    /// cache status, and their lines.
    static LAST_OWN: std::cell::RefCell<Option<(u64, Option<HeaderValue>, PreparedFields)>> =
        const { std::cell::RefCell::new(None) };
}

/// A hit's own fields (`Age`, then `Cache-Status` when it has one) as the
/// lines that follow the stored ones: the hits of one object within a
/// second repeat them, so the thread's last lines are reused when both
/// are the same (two reference counts; making them is one allocation).
fn own_fields(age: u64, status: Option<HeaderValue>) -> Option<PreparedFields> {
    LAST_OWN.with(|last| {
        let mut last = last.borrow_mut();
        if let Some((a, s, lines)) = last.as_ref() {
            if *a == age && *s == status {
                return Some(lines.clone());
            }
        }
        let age_v = age_value(age);
        let named = status.as_ref().map(|v| (&CACHE_STATUS, v));
        let fields = || std::iter::once((&header::AGE, &age_v)).chain(named);
        let len = fields().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
        let lines = PreparedFields::encode(len, fields())?;
        *last = Some((age, status, lines.clone()));
        Some(lines)
    })
}

/// A stored `200`'s fields as an HTTP/1.1 hit sends them, encoded on the
/// first such hit and kept with the object
/// (`StoredObject::fields_derived`, counted in its weight; a disk zone's
/// hit reads its object afresh each time, so it encodes them each time,
/// in one sized buffer, for about what the map's clone cost): every stored
/// field but `Age` (each hit's own), `Content-Length` (hyper's, from the
/// body) and the tag fields (this cache's), then `Accept-Ranges: bytes`
/// unless the origin sent its own.
///
/// `None` (the full path, every hit) for fields a later layer replaces
/// (`Alt-Svc`) or that hyper must see (see [`PreparedFields::encode`]).
fn encoded(stored: &HeaderMap) -> Option<PreparedFields> {
    if stored.contains_key(header::ALT_SVC) {
        return None;
    }
    let ranges = (header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    let add_ranges = !stored.contains_key(header::ACCEPT_RANGES);
    let keep = |name: &HeaderName| {
        name != header::AGE
            && name != header::CONTENT_LENGTH
            && name != hoard_policy::tags::SURROGATE_KEY
            && name != hoard_policy::tags::CACHE_TAG
    };
    let ranges = add_ranges.then_some((&ranges.0, &ranges.1));
    let kept = || stored.iter().filter(|(name, _)| keep(name)).chain(ranges);
    let len = kept().map(|(n, v)| n.as_str().len() + v.len() + 4).sum();
    PreparedFields::encode(len, kept())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (n, v) in fields {
            h.append(*n, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn a_hits_own_fields_are_reused_while_they_repeat() {
        let lines = |f: &PreparedFields| String::from_utf8(f.as_bytes().to_vec()).unwrap();
        let hit = HeaderValue::from_static("hoard; hit; ttl=60");
        let a = own_fields(3, Some(hit.clone())).unwrap();
        assert_eq!(lines(&a), "age: 3\r\ncache-status: hoard; hit; ttl=60\r\n");
        // The same age and status: the same lines (one buffer).
        let b = own_fields(3, Some(hit.clone())).unwrap();
        assert_eq!(a.as_bytes().as_ptr(), b.as_bytes().as_ptr());
        // Either differs: new lines.
        let c = own_fields(4, Some(hit)).unwrap();
        assert_eq!(lines(&c), "age: 4\r\ncache-status: hoard; hit; ttl=60\r\n");
        let d = own_fields(4, Some(HeaderValue::from_static("hoard; hit; ttl=59"))).unwrap();
        assert_eq!(lines(&d), "age: 4\r\ncache-status: hoard; hit; ttl=59\r\n");
        assert_eq!(lines(&own_fields(4, None).unwrap()), "age: 4\r\n");
    }

    #[test]
    fn encoded_keeps_back_what_each_hit_sets() {
        let e = encoded(&map(&[
            ("content-type", "text/plain"),
            ("age", "7"),
            ("content-length", "10"),
            ("surrogate-key", "a b"),
            ("cache-tag", "c"),
            ("x-multi", "1"),
            ("x-multi", "2"),
        ]))
        .expect("encodable");
        assert_eq!(
            e.as_bytes(),
            b"content-type: text/plain\r\nx-multi: 1\r\nx-multi: 2\r\naccept-ranges: bytes\r\n"
        );
        // The origin's own `Accept-Ranges` stands.
        let e = encoded(&map(&[("accept-ranges", "none")])).expect("encodable");
        assert_eq!(e.as_bytes(), b"accept-ranges: none\r\n");
    }

    #[test]
    fn fields_a_later_layer_sets_take_the_full_path() {
        assert!(encoded(&map(&[("alt-svc", "h3=\":443\"")])).is_none());
        assert!(encoded(&map(&[("connection", "x")])).is_none());
        assert!(encoded(&map(&[("transfer-encoding", "chunked")])).is_none());
    }
}
