//! The `deliver` phase's ESI step on `esi` routes: which responses are
//! pages, the page's template (parsed once per stored object), its
//! includes as sub-requests through this pipeline, and the assembled
//! response's fields (see [`crate::esi`] for the language and the
//! streaming).
//!
//! ## Model
//! A response is a page when it is a 200 to a GET whose origin sent
//! `Surrogate-Control: content="ESI/1.0"` or whose type is `text/html`,
//! and whose body holds ESI markup. `Surrogate-Control` never reaches
//! clients. The stored copy is the template as the origin sent it; a hit
//! takes the parsed template from its object (parsed when the fill stored
//! it, or at its first delivery from a disk zone, and kept in its
//! `derived` slot) and reads no body.
//!
//! Each include is a request of its own (`GET src`, the page's fields but
//! its validators, ranges and coding; `Host` the page's, or `src`'s when
//! the route allows that host) served by [`Pipeline::recv`]: its route,
//! key, lifetime, coalescing, stale serving and hit-for-pass are its own.
//! A sub-request carries its [`Level`] (depth and the page's include
//! budget) so nesting ends at `max_depth` and `max_includes`.
//!
//! ## Fields of an assembled page
//! No `Content-Length`, `ETag`, `Last-Modified` or `Accept-Ranges` (its
//! bytes differ per request); `Content-Encoding` as the client accepts
//! among the route's `encodings`, compressed as it streams. With
//! `debug_headers`, the page's head waits for its fragments and
//! `Cache-Status` gains `esi="src=outcome ..."`.

use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use hoard_config::esi::EsiConfig;
use hoard_policy::cache_status::Outcome;
use http::header::{
    HeaderMap, HeaderName, HeaderValue, ACCEPT_ENCODING, ACCEPT_RANGES, CONTENT_ENCODING,
    CONTENT_LENGTH, CONTENT_TYPE, ETAG, HOST, LAST_MODIFIED,
};
use http::{Method, Request, Response, StatusCode};
use http_body::Body;
use http_body_util::BodyExt;

use super::noted::{Noted, OUTCOME};
use super::{Conn, Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::esi::assemble::{Assembly, Fetch, Fragment, FragmentFuture, Page};
use crate::esi::vars::Values;
use crate::request_body::RequestBody;

/// `Cache-Status` (RFC 9211).
static CACHE_STATUS: HeaderName = HeaderName::from_static("cache-status");

/// A template read whole into memory at most this long; a longer body
/// goes out as it is.
const TEMPLATE_MAX: usize = 4 << 20;

/// A hit's stored object on an `esi` route whose body is read from its
/// file (a response extension; a body in memory carries its object): its
/// `derived` slot keeps the parsed template.
#[derive(Debug, Clone)]
pub(crate) struct StoredPage(pub Arc<hoard_store::object::StoredObject>);

/// A sub-request's place in its page (a request extension, moved into
/// [`Ctx::esi`]).
#[derive(Debug)]
pub(crate) struct Level {
    /// 1 for a page's own includes.
    pub depth: u8,
    /// Includes started for the outermost page so far.
    pub budget: Arc<AtomicU16>,
}

pub(crate) use crate::esi::is_page;
use crate::esi::Parsed;

/// Fields of a request that its includes do not get.
const NOT_FOR_FRAGMENTS: [HeaderName; 10] = [
    http::header::RANGE,
    http::header::IF_RANGE,
    http::header::IF_MATCH,
    http::header::IF_NONE_MATCH,
    http::header::IF_MODIFIED_SINCE,
    http::header::IF_UNMODIFIED_SINCE,
    CONTENT_LENGTH,
    CONTENT_TYPE,
    http::header::TRANSFER_ENCODING,
    http::header::EXPECT,
];

/// Fields a request on an `esi` route loses before its lookup: a page's
/// bytes differ per request, so ranges and validators of the template
/// would answer for bytes the client never gets.
pub(crate) const NOT_FOR_PAGES: [HeaderName; 4] = [
    http::header::RANGE,
    http::header::IF_RANGE,
    http::header::IF_NONE_MATCH,
    http::header::IF_MODIFIED_SINCE,
];

impl Pipeline {
    /// The response of a request on an `esi` route, a page assembled when
    /// it is one (see the module docs).
    pub(super) async fn esi_page(
        self: &Arc<Self>,
        ctx: &Ctx<'_>,
        cfg: &EsiConfig,
        resp: Response<ProxyBody>,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = resp.into_parts();
        let candidate = parts.status == StatusCode::OK
            && (ctx.method == Method::GET || ctx.method == Method::HEAD)
            && is_page(&parts.headers)
            && parts
                .headers
                .get(CONTENT_ENCODING)
                .is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
        parts.headers.remove(&crate::esi::SURROGATE_CONTROL);
        if !candidate {
            return Response::from_parts(parts, body);
        }
        if ctx.method == Method::HEAD {
            page_fields(&mut parts.headers);
            return Response::from_parts(parts, body);
        }
        // The stored object: the body's own (in memory), or the hit's
        // (a body read from its file).
        let stored = match &body {
            ProxyBody::Stored { obj, .. } => Some(obj.clone()),
            _ => parts.extensions.remove::<StoredPage>().map(|p| p.0),
        };
        let known = stored
            .as_ref()
            .and_then(|s| s.derived.get().cloned())
            .and_then(|d| d.downcast::<Parsed>().ok());
        let parsed = match known {
            Some(p) => {
                if matches!(*p, Parsed::AsIs) {
                    return Response::from_parts(parts, body);
                }
                p
            }
            None => {
                if body.size_hint().lower() > TEMPLATE_MAX as u64 {
                    return Response::from_parts(parts, body);
                }
                let bytes = match http_body_util::Limited::new(body, TEMPLATE_MAX)
                    .collect()
                    .await
                {
                    Ok(c) => c.to_bytes(),
                    Err(e) => {
                        // Too long, or the origin's body failed: nothing
                        // is half assembled.
                        tracing::warn!(error = %e, "ESI page not read whole; answered 502");
                        let e = hoard_origin::error::ProxyError::origin(
                            hoard_origin::error::ErrorKind::BadResponse,
                            format!("ESI page not read whole: {e}"),
                        );
                        return self.error_response(&e, None);
                    }
                };
                let parsed = Arc::new(self.parse_page(&bytes, ctx));
                if let Some(s) = &stored {
                    let _ = s.derived.set(parsed.clone());
                }
                if matches!(*parsed, Parsed::AsIs) {
                    return Response::from_parts(parts, ProxyBody::Full(Some(bytes)));
                }
                parsed
            }
        };
        let Parsed::Page(template) = &*parsed else {
            unreachable!("AsIs returned above")
        };
        self.counters.inc(&self.counters.esi_pages);
        let depth = ctx.esi.as_ref().map_or(0, |l| l.depth);
        let budget = ctx
            .esi
            .as_ref()
            .map_or_else(|| Arc::new(AtomicU16::new(0)), |l| l.budget.clone());
        let fetch = Arc::new(PageFetch {
            pipeline: self.clone(),
            headers: Arc::new(fragment_fields(&ctx.headers)),
            authority: ctx.authority.clone(),
            page_path: ctx.uri.path().to_owned(),
            peer: ctx.peer,
            tls: ctx.tls,
            listener: ctx.listener,
            depth: depth + 1,
            budget,
            cfg: cfg.clone(),
        });
        let counters = self.counters.clone();
        let mut page = Page::plan(
            &template.nodes,
            Assembly {
                values: Values::of(&ctx.headers, &ctx.authority, ctx.uri.query()),
                fetch,
                on_error: cfg.on_error,
                failed: Box::new(move |_src, _why| counters.inc(&counters.esi_fragment_failures)),
            },
        );
        page_fields(&mut parts.headers);
        if ctx.run.cfg.server.debug_headers {
            // The head waits for the fragments (debug only).
            let outcomes = page.outcomes().await;
            add_fragment_status(&mut parts.headers, &outcomes);
        }
        let body = page.into_body();
        let body = match ctx.accept.and_then(|a| {
            a.choose(&ctx.route.encodings, &ctx.route.encodings)
                .filter(|c| *c != hoard_policy::encoding::Coding::Identity)
        }) {
            Some(c) => match crate::esi::compress::CompressedBody::new(body, c) {
                Ok(b) => {
                    parts
                        .headers
                        .insert(CONTENT_ENCODING, HeaderValue::from_static(c.as_str()));
                    crate::encode::vary_on_accept_encoding(&mut parts.headers);
                    ProxyBody::Wrapped(Box::new(b))
                }
                Err(b) => ProxyBody::Wrapped(b),
            },
            None => ProxyBody::Wrapped(Box::new(body)),
        };
        Response::from_parts(parts, body)
    }

    /// What a page's body is (counted and logged when malformed).
    fn parse_page(&self, bytes: &Bytes, ctx: &Ctx<'_>) -> Parsed {
        match crate::esi::classify(bytes) {
            Ok(p) => p,
            Err(e) => {
                self.counters.inc(&self.counters.esi_malformed);
                tracing::warn!(path = ctx.uri.path(), error = %e, "malformed ESI markup; the page is sent as it is");
                Parsed::AsIs
            }
        }
    }
}

/// An assembled page's fields (see the module docs).
fn page_fields(h: &mut HeaderMap) {
    for name in [CONTENT_LENGTH, ETAG, LAST_MODIFIED, ACCEPT_RANGES] {
        h.remove(name);
    }
}

/// The page's request fields as its includes get them.
fn fragment_fields(page: &HeaderMap) -> HeaderMap {
    let mut h = page.clone();
    for name in &NOT_FOR_FRAGMENTS {
        h.remove(name);
    }
    h.remove(HOST);
    h.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    h
}

/// `Cache-Status` with the fragments' outcomes (`debug_headers`).
fn add_fragment_status(h: &mut HeaderMap, heads: &[(String, &'static str)]) {
    let list: Vec<String> = heads
        .iter()
        .map(|(src, o)| format!("{}={o}", src.replace(['"', '\\', ' '], "_")))
        .collect();
    let esi = format!("esi=\"{}\"", list.join(" "));
    let value = match h.get(&CACHE_STATUS).and_then(|v| v.to_str().ok()) {
        Some(v) => format!("{v}; {esi}"),
        None => format!("hoard; {esi}"),
    };
    if let Ok(v) = HeaderValue::from_str(&value) {
        h.insert(&CACHE_STATUS, v);
    }
}

/// A page's includes, started as sub-requests (see the module docs).
struct PageFetch {
    pipeline: Arc<Pipeline>,
    headers: Arc<HeaderMap>,
    authority: String,
    page_path: String,
    peer: std::net::SocketAddr,
    tls: bool,
    listener: u16,
    depth: u8,
    budget: Arc<AtomicU16>,
    cfg: EsiConfig,
}

/// One fragment's sub-request: its body whole and its outcome, or why it
/// failed.
type FragmentResult = Result<(Bytes, Option<Outcome>), String>;

impl Fetch for PageFetch {
    fn start(&self, src: String, alt: Option<String>) -> FragmentFuture {
        let c = &self.pipeline.counters;
        c.inc(&c.esi_fragments);
        let targets: Vec<Result<(String, String), String>> = std::iter::once(src)
            .chain(alt)
            .map(|t| self.check(&t))
            .collect();
        let me = SubRequest {
            pipeline: self.pipeline.clone(),
            headers: self.headers.clone(),
            peer: self.peer,
            tls: self.tls,
            listener: self.listener,
            level: Arc::new(Level {
                depth: self.depth,
                budget: self.budget.clone(),
            }),
        };
        Box::pin(async move {
            let mut why = String::new();
            for target in targets {
                match target {
                    Ok((authority, path)) => match me.run(&authority, &path).await {
                        Ok((body, outcome)) => {
                            return Fragment {
                                body: Ok(body),
                                outcome: outcome.map_or("error", |o| o.as_str()),
                            }
                        }
                        Err(e) => why = e,
                    },
                    Err(e) => why = e,
                }
            }
            Fragment {
                body: Err(why),
                outcome: "error",
            }
        })
    }
}

impl PageFetch {
    /// `src` as (authority, target), within the page's limits.
    fn check(&self, src: &str) -> Result<(String, String), String> {
        if self.depth > self.cfg.max_depth {
            return Err(format!(
                "nested deeper than max_depth ({})",
                self.cfg.max_depth
            ));
        }
        if self.budget.fetch_add(1, Ordering::Relaxed) >= self.cfg.max_includes {
            return Err(format!(
                "more includes than max_includes ({})",
                self.cfg.max_includes
            ));
        }
        resolve(src, &self.authority, &self.page_path, &self.cfg.allow_hosts)
    }
}

/// `src` resolved against the page: (authority, origin-form target).
/// Another host than the page's only when allowed.
fn resolve(
    src: &str,
    page_authority: &str,
    page_path: &str,
    allow: &[String],
) -> Result<(String, String), String> {
    let src = src.split('#').next().unwrap_or("").trim();
    if src.is_empty() || src.bytes().any(|b| b.is_ascii_control() || b == b' ') {
        return Err(format!("{src:?} is not a URL"));
    }
    let rest = src
        .strip_prefix("http://")
        .or_else(|| src.strip_prefix("https://"))
        .or_else(|| src.strip_prefix("//"));
    if let Some(rest) = rest {
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_owned()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_owned()),
        };
        let host = |a: &str| {
            a.rsplit_once(':')
                .filter(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                .map_or(a, |(h, _)| h)
                .to_ascii_lowercase()
        };
        let h = host(authority);
        if h != host(page_authority) && !allow.contains(&h) {
            return Err(format!("host {h:?} is not allowed (esi.allow_hosts)"));
        }
        return Ok((authority.to_owned(), path));
    }
    if src.starts_with('/') {
        return Ok((page_authority.to_owned(), src.to_owned()));
    }
    if src.contains(':') && !src.contains('/')
        || src.split_once(':').is_some_and(|(s, _)| !s.contains('/'))
    {
        return Err(format!("{src:?}: only http and https URLs"));
    }
    let base = page_path.rsplit_once('/').map_or("", |(b, _)| b);
    Ok((page_authority.to_owned(), format!("{base}/{src}")))
}

/// What a fragment's task needs to make its request.
struct SubRequest {
    pipeline: Arc<Pipeline>,
    headers: Arc<HeaderMap>,
    peer: std::net::SocketAddr,
    tls: bool,
    listener: u16,
    level: Arc<Level>,
}

impl SubRequest {
    /// `GET target` on `authority` through the pipeline: a 2xx response's
    /// body whole, or why not.
    fn run<'a>(
        &'a self,
        authority: &'a str,
        target: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = FragmentResult> + Send + 'a>> {
        Box::pin(async move {
            let host = HeaderValue::from_str(authority)
                .map_err(|_| format!("{authority:?} is not a host"))?;
            let mut req = Request::builder()
                .method(Method::GET)
                .uri(target)
                .body(RequestBody::Full(None))
                .map_err(|e| format!("{target:?}: {e}"))?;
            let mut headers = HeaderMap::clone(&self.headers);
            headers.insert(HOST, host);
            *req.headers_mut() = headers;
            req.extensions_mut().insert(self.level.clone());
            let conn = Conn {
                peer: self.peer,
                tls: self.tls,
                send: None,
                interim: None,
                redirect_https: None,
                listener: self.listener,
            };
            let p = &self.pipeline;
            let (resp, noted) = OUTCOME
                .scope(std::cell::Cell::new(Noted::default()), async {
                    let resp = match p.clone().recv(req, conn, None, false).await {
                        Ok(r) => r,
                        Err(e) => p.error_response(&e, None),
                    };
                    (resp, OUTCOME.with(std::cell::Cell::take))
                })
                .await;
            let status = resp.status();
            if !status.is_success() || status == StatusCode::PARTIAL_CONTENT {
                return Err(format!("{target}: status {}", status.as_u16()));
            }
            if resp
                .headers()
                .get(CONTENT_ENCODING)
                .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"))
            {
                return Err(format!("{target}: a coded body"));
            }
            let body = http_body_util::Limited::new(resp.into_body(), TEMPLATE_MAX)
                .collect()
                .await
                .map_err(|e| format!("{target}: body: {e}"))?
                .to_bytes();
            Ok((body, noted.outcome))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_resolve_against_the_page() {
        let r = |s: &str| {
            resolve(
                s,
                "www.example.com",
                "/news/today.html",
                &["cdn.example.com".into()],
            )
        };
        assert_eq!(
            r("/frag/a").unwrap(),
            ("www.example.com".into(), "/frag/a".into())
        );
        assert_eq!(
            r("box.html?x=1").unwrap(),
            ("www.example.com".into(), "/news/box.html?x=1".into())
        );
        assert_eq!(
            r("http://WWW.example.com:8080/b").unwrap(),
            ("WWW.example.com:8080".into(), "/b".into())
        );
        assert_eq!(
            r("https://cdn.example.com?q").unwrap(),
            ("cdn.example.com".into(), "/?q".into())
        );
        assert!(r("http://evil.example/x").is_err());
        assert!(r("//evil.example/x").is_err());
        assert!(r("javascript:alert(1)").is_err());
        assert!(r("/a b").is_err());
        assert_eq!(r("/a#frag").unwrap().1, "/a");
    }
}
