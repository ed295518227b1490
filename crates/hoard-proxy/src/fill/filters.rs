//! A route's origin filters (`origin_filters`; see `hoard_wasm` and
//! `docs/filters.md`) on a fill: Varnish's `vcl_backend_fetch` and
//! `vcl_backend_response` as Proxy-Wasm streams.
//!
//! ## Lifecycle
//! A fill that sends opens one stream per origin filter and runs its
//! request callback over the request to the origin, in order (edits go to
//! the origin). When the answer's head arrives, the response callbacks run
//! over it in reverse, after its hop-by-hop fields are gone and before it is
//! judged for storing: edits are what is stored and forwarded, and
//! `hoard.ttl` / `hoard.uncacheable` decide the storing
//! ([`FilterDecision`]). The streams end (`proxy_on_log`) there. A fill
//! is one per key, so each runs once per fetch however many clients wait.
//!
//! An origin filter cannot answer (`proxy_send_local_response`) or make
//! HTTP calls: both are `Unimplemented`. Its failure fails the fill like
//! an origin error: every waiting client gets 500, counted and logged with
//! the filter's name. An answer from the key's owner in a cluster went
//! through the owner's origin filters and is not filtered again.

use std::time::Duration;

use hoard_wasm::{FilterError, RequestHead, ResponseHead, Stream, StreamInfo, Verdict};
use http::header::{self, HeaderMap};
use http::StatusCode;

use super::{FillEngine, FillJob};
use hoard_origin::OriginRequest;

/// The streams of one fetch, in request order.
#[derive(Debug)]
pub(super) struct OriginFilters {
    streams: Vec<Stream>,
}

/// What the origin filters decided about storing the response.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct FilterDecision {
    /// The freshness lifetime to store it with (`hoard.ttl`), whatever the
    /// response says.
    pub(super) ttl: Option<Duration>,
    /// Not to store it (`hoard.uncacheable`).
    pub(super) uncacheable: bool,
}

impl FillEngine {
    /// The request callbacks over `oreq` (see the module docs); `None`
    /// when the route has no origin filters.
    pub(super) fn filter_origin_request(
        &self,
        job: &FillJob,
        oreq: &mut OriginRequest,
    ) -> Result<Option<OriginFilters>, FilterError> {
        let plugins = &job.route.origin_filters;
        if plugins.is_empty() {
            return Ok(None);
        }
        let path = oreq
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let authority = oreq
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let info = StreamInfo {
            route: match &job.route.path {
                hoard_config::PathMatch::Prefix(p) => p.clone(),
                hoard_config::PathMatch::Regex(r) => r.as_str().to_owned(),
            },
            protocol: "HTTP/1.1",
            path: path.clone(),
            method: oreq.method.as_str().to_owned(),
            host: authority.clone(),
            scheme: "http",
            origin: true,
            ..StreamInfo::default()
        };
        let mut head = RequestHead {
            method: oreq.method.clone(),
            path,
            authority,
            scheme: "http",
            headers: std::mem::take(&mut oreq.headers),
        };
        let mut streams = Vec::with_capacity(plugins.len());
        let mut outcome = Ok(());
        for plugin in plugins {
            let step = plugin
                .stream(info.clone())
                .and_then(|mut s| s.on_request(&mut head).map(|v| (s, v)));
            match step {
                // Neither answers nor calls are open to an origin filter.
                Ok((s, Verdict::Continue | Verdict::Wait(_) | Verdict::Respond(_))) => {
                    streams.push(s)
                }
                Err(e) => {
                    outcome = Err(e);
                    break;
                }
            }
        }
        // The request as the filters left it.
        oreq.headers = head.headers;
        oreq.method = head.method;
        if let Ok(v) = http::HeaderValue::from_str(&head.authority) {
            if !head.authority.is_empty() {
                oreq.headers.insert(header::HOST, v);
            }
        }
        if head.path != oreq.uri.path_and_query().map_or("/", |p| p.as_str()) {
            if let Ok(uri) = http::Uri::try_from(head.path) {
                oreq.uri = uri;
            }
        }
        outcome.map(|()| Some(OriginFilters { streams }))
    }

    /// The response callbacks over the answer's head, in reverse; the
    /// streams end after them.
    pub(super) fn filter_origin_response(
        &self,
        filters: OriginFilters,
        status: &mut StatusCode,
        headers: &mut HeaderMap,
    ) -> Result<FilterDecision, FilterError> {
        let OriginFilters { mut streams } = filters;
        hoard_policy::headers::strip_hop_by_hop(headers);
        let mut head = ResponseHead {
            status: *status,
            headers: std::mem::take(headers),
        };
        let mut decision = FilterDecision::default();
        let mut outcome = Ok(());
        for s in streams.iter_mut().rev() {
            if let Err(e) = s.on_response(&mut head) {
                outcome = Err(e);
                break;
            }
            // The filter nearest the client has the last word.
            let info = s.info();
            decision.ttl = info.ttl.or(decision.ttl);
            decision.uncacheable |= info.uncacheable;
        }
        *status = head.status;
        *headers = head.headers;
        drop(streams);
        outcome.map(|()| decision)
    }

    /// A failed origin filter: counted and logged with its name.
    pub(super) fn origin_filter_failed(&self, job: &FillJob, e: &FilterError) {
        self.counters.inc(&self.counters.filter_failures);
        tracing::warn!(filter = %e.filter, failure = e.kind.as_str(), detail = %e.detail, key = %job.key.text, "an origin filter failed a fill");
    }
}
