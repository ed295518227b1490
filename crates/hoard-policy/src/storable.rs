//! May a response be stored? (RFC 9111 §3)
//!
//! [`storability`] answers with the reason when the answer is no; the reason's
//! [`NotStorable::as_str`] appears in `Cache-Status` details, logs and metrics.

use std::time::{Duration, SystemTime};

use crate::cache_control::CacheControl;
use crate::config::CachePolicy;
use crate::facts::ResponseFacts;
use crate::freshness::{freshness_lifetime, LifetimeSource};
pub use crate::status::heuristically_cacheable;

/// Why a response was not stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotStorable {
    /// The request method is not cacheable (§3: only GET here; HEAD is fetched as GET).
    Method,
    /// The status is not final, or a kind hoard does not store (206, 304).
    Status,
    /// `no-store` in the request (§5.2.1.5).
    RequestNoStore,
    /// `no-store` in the response (§5.2.2.5).
    NoStore,
    /// `private` in the response; hoard is a shared cache (§5.2.2.7).
    Private,
    /// The request carried `Authorization` and the response did not allow
    /// storing it with `public`, `s-maxage` or `must-revalidate` (§3.5).
    Authorization,
    /// `Vary: *` can never be matched by a later request (§4.1).
    VaryStar,
    /// `Set-Cookie` on the response (a shared cache does not store it by default).
    SetCookie,
    /// No explicit or heuristic freshness and no configured default (§3, last bullet).
    NoFreshness,
    /// Stale on arrival with no validator and no stale window: useless to keep.
    StaleOnArrival,
    /// Larger than the largest object the store accepts.
    TooLarge,
    /// The route does not cache.
    RouteOff,
    /// A 5xx answered a revalidation while the stale copy may stand in (RFC 5861 §4).
    ServerError,
    /// A slice request was answered with other bytes than the ones asked for.
    UnexpectedRange,
    /// An origin filter marked the response uncacheable (`hoard.uncacheable`).
    Filter,
    /// A route's storing rule (`[[site.route.store]]`) passes it.
    StoreRule,
}

impl NotStorable {
    /// True when the reason is a property of the response (and so of the key),
    /// not of this one request: such keys are marked hit-for-pass.
    pub fn is_response_property(self) -> bool {
        matches!(
            self,
            NotStorable::NoStore
                | NotStorable::Private
                | NotStorable::VaryStar
                | NotStorable::SetCookie
                | NotStorable::NoFreshness
                | NotStorable::StaleOnArrival
                | NotStorable::TooLarge
                | NotStorable::Status
                | NotStorable::Filter
                | NotStorable::StoreRule
        )
    }

    /// A short name for `Cache-Status` details, logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            NotStorable::Method => "method",
            NotStorable::Status => "status",
            NotStorable::RequestNoStore => "request-no-store",
            NotStorable::NoStore => "no-store",
            NotStorable::Private => "private",
            NotStorable::Authorization => "authorization",
            NotStorable::VaryStar => "vary-star",
            NotStorable::SetCookie => "set-cookie",
            NotStorable::NoFreshness => "no-freshness",
            NotStorable::StaleOnArrival => "stale-on-arrival",
            NotStorable::TooLarge => "too-large",
            NotStorable::RouteOff => "route-off",
            NotStorable::ServerError => "server-error",
            NotStorable::UnexpectedRange => "unexpected-range",
            NotStorable::Filter => "filter",
            NotStorable::StoreRule => "store-rule",
        }
    }
}

/// Statuses whose caching semantics hoard implements (RFC 9110 §15).
pub fn understood(status: u16) -> bool {
    matches!(status, 200..=206 | 300..=304 | 307 | 308 | 400..=417 | 421 | 422 | 426 | 500..=505)
}

/// The request side of a storability decision.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// True for GET (and HEAD, which hoard fetches as GET).
    pub cacheable_method: bool,
    /// The request's directives.
    pub cc: &'a CacheControl,
    /// True when the request carried `Authorization`.
    pub authorization: bool,
}

/// Decides whether the response may be stored, and with which lifetime (§3).
pub fn storability(
    req: RequestFacts<'_>,
    resp: &ResponseFacts,
    policy: &CachePolicy,
    response_time: SystemTime,
) -> Result<(Duration, LifetimeSource), NotStorable> {
    if !req.cacheable_method {
        return Err(NotStorable::Method);
    }
    // §3: final status that the cache understands. 206 needs range support in the
    // store and 304 is handled as a revalidation, not stored on its own.
    if resp.status < 200 || resp.status == 206 || resp.status == 304 {
        return Err(NotStorable::Status);
    }
    if req.cc.no_store {
        return Err(NotStorable::RequestNoStore);
    }
    // §5.2.2.3: must-understand lets a cache that understands the status
    // ignore no-store; one that does not must not store.
    if resp.cc.must_understand && !understood(resp.status) {
        return Err(NotStorable::Status);
    }
    if resp.cc.no_store && !(resp.cc.must_understand && understood(resp.status)) {
        return Err(NotStorable::NoStore);
    }
    if resp.cc.private {
        return Err(NotStorable::Private);
    }
    // §3.5: Authorization in a shared cache.
    if req.authorization
        && !(resp.cc.public || resp.cc.s_maxage.is_some() || resp.cc.must_revalidate)
    {
        return Err(NotStorable::Authorization);
    }
    if resp.vary_star {
        return Err(NotStorable::VaryStar);
    }
    if resp.set_cookie {
        return Err(NotStorable::SetCookie);
    }
    // A heuristically cacheable response with a validator but no lifetime is
    // stored stale: every reuse revalidates it (e.g. `no-cache` with an ETag).
    let (lifetime, source) = match freshness_lifetime(resp, policy, response_time) {
        Some(found) => found,
        None if heuristically_cacheable(resp.status) && resp.has_validator => {
            (Duration::ZERO, LifetimeSource::Heuristic)
        }
        None => return Err(NotStorable::NoFreshness),
    };
    let has_stale_window = resp.cc.stale_while_revalidate.is_some_and(|s| s > 0)
        || resp.cc.stale_if_error.is_some_and(|s| s > 0)
        || policy.stale_while_revalidate.is_some()
        || policy.stale_if_error.is_some();
    if lifetime.is_zero() && !resp.has_validator && !has_stale_window {
        return Err(NotStorable::StaleOnArrival);
    }
    Ok((lifetime, source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderMap;

    fn decide(
        req_cc: &str,
        auth: bool,
        status: u16,
        hdrs: &[(&str, &str)],
    ) -> Result<LifetimeSource, NotStorable> {
        let mut h = HeaderMap::new();
        for (k, v) in hdrs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let p = CachePolicy::default();
        let f = ResponseFacts::read(status, &h, &p);
        let cc = CacheControl::parse(req_cc);
        storability(
            RequestFacts {
                cacheable_method: true,
                cc: &cc,
                authorization: auth,
            },
            &f,
            &p,
            SystemTime::UNIX_EPOCH,
        )
        .map(|(_, s)| s)
    }

    #[test]
    fn table() {
        use NotStorable::*;
        let lm = ("last-modified", "Mon, 01 Jan 2001 00:00:00 GMT");
        let cases: Vec<(
            &str,
            bool,
            u16,
            Vec<(&str, &str)>,
            Result<LifetimeSource, NotStorable>,
        )> = vec![
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=5")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "no-store",
                false,
                200,
                vec![("cache-control", "max-age=5")],
                Err(RequestNoStore),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=5, no-store")],
                Err(NoStore),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "private, max-age=5")],
                Err(Private),
            ),
            (
                "",
                true,
                200,
                vec![("cache-control", "max-age=5")],
                Err(Authorization),
            ),
            (
                "",
                true,
                200,
                vec![("cache-control", "max-age=5, public")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                true,
                200,
                vec![("cache-control", "s-maxage=5")],
                Ok(LifetimeSource::SMaxAge),
            ),
            (
                "",
                true,
                200,
                vec![("cache-control", "max-age=5, must-revalidate")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=5"), ("vary", "*")],
                Err(VaryStar),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=5"), ("set-cookie", "a=b")],
                Err(SetCookie),
            ),
            ("", false, 200, vec![], Err(NoFreshness)),
            ("", false, 200, vec![lm], Ok(LifetimeSource::Heuristic)),
            ("", false, 500, vec![lm], Err(NoFreshness)),
            (
                "",
                false,
                500,
                vec![("cache-control", "max-age=5")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                206,
                vec![("cache-control", "max-age=5")],
                Err(Status),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=0")],
                Err(StaleOnArrival),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=0"), ("etag", "\"x\"")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "no-cache"), ("etag", "\"x\"")],
                Ok(LifetimeSource::Heuristic),
            ),
            ("", false, 302, vec![("etag", "\"x\"")], Err(NoFreshness)),
            (
                "",
                false,
                200,
                vec![("cache-control", "no-cache, max-age=60"), ("etag", "\"x\"")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                200,
                vec![
                    ("cdn-cache-control", "max-age=5"),
                    ("cache-control", "private"),
                ],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                200,
                vec![("cache-control", "max-age=5, no-store, must-understand")],
                Ok(LifetimeSource::MaxAge),
            ),
            (
                "",
                false,
                299,
                vec![("cache-control", "max-age=5, no-store, must-understand")],
                Err(Status),
            ),
        ];
        for (req, auth, status, h, want) in cases {
            assert_eq!(
                decide(req, auth, status, &h),
                want,
                "req {req:?} auth {auth} status {status} {h:?}"
            );
        }
    }
}
