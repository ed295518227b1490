//! A route's Proxy-Wasm filters (`filters`; see `hoard_wasm` and
//! `docs/filters.md`) in the `recv` and `deliver` phases.
//!
//! In `recv`, after the route's edge rules, each filter in order opens a
//! stream for the request and runs its request callback over the request's
//! head (`:method`, `:path`, `:authority` and `:scheme` with the fields):
//! edits go on to the key and the origin, `hoard.cache_key` is added to
//! the cache key, and a local response answers the request (the filters
//! after it never see it). In `deliver`, every response of the route
//! (hits, misses, passes, hoard's own answers) goes back through the
//! streams opened, in reverse order, before the route's response edits.
//! A filter's failure answers 500 in either phase. A filter with a
//! response body callback gets the body as it streams (`filter_body`);
//! the streams end (and the filters' `proxy_on_log` runs) after the
//! body's last byte when a filter reads bodies or has `proxy_on_log`,
//! else when the response head is ready.

use std::sync::Arc;

use hoard_policy::cache_status::{CacheStatus, Outcome};
use hoard_wasm::{CallResponse, HttpCall, RequestHead, ResponseHead, Stream, StreamInfo, Verdict};
use http::Response;

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use hoard_origin::error::ProxyError;

/// The streams a request opened, in request order, and what they set.
#[derive(Debug, Default)]
pub(crate) struct Filtered {
    streams: Vec<Stream>,
    /// Added to the cache key (`hoard.cache_key`).
    pub(super) key_extra: Option<Box<str>>,
}

impl Pipeline {
    /// The request callbacks (see the module docs): the streams opened
    /// go to `ctx.filtered` (boxed: the request's future carries one
    /// pointer); the answer when a filter gave one or failed.
    async fn filter_request(&self, ctx: &mut Ctx<'_>) -> Option<Response<ProxyBody>> {
        let mut done = Filtered {
            streams: Vec::with_capacity(ctx.route.filters.len()),
            key_extra: None,
        };
        let path = ctx
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        let mut head = RequestHead {
            method: ctx.method.clone(),
            path: path.clone(),
            authority: ctx.authority.clone(),
            scheme: ctx.scheme(),
            headers: std::mem::take(&mut ctx.headers),
        };
        let info = StreamInfo {
            client: Some(std::net::SocketAddr::new(ctx.client, ctx.peer.port())),
            route: match &ctx.route.path {
                hoard_config::PathMatch::Prefix(p) => p.clone(),
                hoard_config::PathMatch::Regex(r) => r.as_str().to_owned(),
            },
            protocol: protocol(ctx.version),
            request_id: ctx.request_id.map(|id| {
                let mut s = String::new();
                id.push_to(&mut s);
                s
            }),
            path,
            method: ctx.method.as_str().to_owned(),
            host: ctx.authority.clone(),
            scheme: ctx.scheme(),
            ..StreamInfo::default()
        };
        let mut outcome = Ok(());
        let last = ctx.route.filters.len().saturating_sub(1);
        let mut info = Some(info);
        for (i, plugin) in ctx.route.filters.iter().enumerate() {
            // Each stream has its own; the last takes the original.
            let this = if i == last { info.take() } else { info.clone() };
            let mut stream = match plugin.stream(this.unwrap_or_default()) {
                Ok(s) => s,
                Err(e) => {
                    outcome = Err(self.filter_failed(&e));
                    break;
                }
            };
            let mut step = stream.on_request(&mut head);
            // HTTP calls: sent one after another, each answered with
            // `proxy_on_http_call_response`, which may call again.
            let mut waiting = std::collections::VecDeque::new();
            loop {
                match step {
                    Ok(Verdict::Wait(calls)) => waiting.extend(calls),
                    Ok(Verdict::Continue) => {}
                    Ok(Verdict::Respond(_)) | Err(_) => break,
                }
                let Some(call) = waiting.pop_front() else {
                    step = Ok(Verdict::Continue);
                    break;
                };
                let token = call.token;
                let response = self.filter_call(ctx, call).await;
                step = stream.on_call_response(token, response, &mut head);
            }
            match step {
                Ok(Verdict::Continue | Verdict::Wait(_)) => done.streams.push(stream),
                Ok(Verdict::Respond(local)) => {
                    done.streams.push(stream);
                    outcome = Err(self.filter_answer(local, &ctx.method));
                    break;
                }
                // A stream that failed is not kept: its VM is gone.
                Err(e) => {
                    outcome = Err(self.filter_failed(&e));
                    break;
                }
            }
        }
        // The request as the filters left it.
        ctx.headers = head.headers;
        ctx.method = head.method;
        if head.authority != ctx.authority {
            ctx.authority = head.authority;
        }
        if head.path != ctx.uri.path_and_query().map_or("/", |p| p.as_str()) {
            let mut uri = http::Uri::try_from(head.path).unwrap_or_else(|_| ctx.uri.clone());
            if super::prepare::normalise_target(&mut uri).is_ok() {
                ctx.uri = uri;
            }
        }
        done.key_extra = done
            .streams
            .iter()
            .rev()
            .find_map(|s| s.info().cache_key.clone())
            .map(String::into_boxed_str);
        ctx.filtered = Some(Box::new(done));
        outcome.err()
    }

    /// A filtered request's `recv` filters, then its route (or the
    /// filters' answer).
    pub(super) async fn route_filtered(
        self: &Arc<Self>,
        ctx: &mut Ctx<'_>,
        upgrade: Option<(super::tunnel::Asked, hyper::upgrade::OnUpgrade)>,
        body: crate::request_body::RequestBody,
    ) -> Result<Response<ProxyBody>, hoard_origin::error::ProxyError> {
        if let Some(answer) = self.filter_request(ctx).await {
            return Ok(answer);
        }
        let body = match self.filter_request_body(ctx, body).await {
            Ok(body) => body,
            Err(answer) => return Ok(answer),
        };
        self.route_request(ctx, upgrade, body).await
    }

    /// The request body through the filters' body callbacks, in order,
    /// when one of them has one (else untouched): read whole first, as
    /// nginx buffers request bodies, within the route's `max_body_size`
    /// (413) and the body read timeout (408); the origin gets the body as
    /// the filters left it. A filter may answer instead.
    async fn filter_request_body(
        &self,
        ctx: &mut Ctx<'_>,
        body: crate::request_body::RequestBody,
    ) -> Result<crate::request_body::RequestBody, Response<ProxyBody>> {
        use http_body_util::BodyExt;
        let Some(filtered) = ctx.filtered.as_mut() else {
            return Ok(body);
        };
        if http_body::Body::is_end_stream(&body)
            || !filtered.streams.iter().any(|s| s.wants_body(false))
        {
            return Ok(body);
        }
        let limits = &ctx.run.cfg.server;
        let max = ctx.route.max_body_size.unwrap_or(limits.max_body_size);
        let limited =
            http_body_util::Limited::new(body, usize::try_from(max).unwrap_or(usize::MAX));
        let mut timed =
            crate::pipeline::client_body::ClientBody::new(limited, limits.body_read_timeout);
        let mut out = Vec::new();
        loop {
            let (chunk, end) = match timed.frame().await {
                None => (bytes::Bytes::new(), true),
                // Trailers end the body (they are not sent on).
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => (data, false),
                    Err(_) => (bytes::Bytes::new(), true),
                },
                Some(Err(e)) => {
                    let e = if e.is::<http_body_util::LengthLimitError>() {
                        ProxyError::client(
                            hoard_origin::error::ErrorKind::BodyTooLarge,
                            "request body over the limit",
                        )
                    } else if e.is::<hoard_origin::error::BodyTimeout>() {
                        ProxyError::client(
                            hoard_origin::error::ErrorKind::BodyTimeout,
                            "request body stopped arriving",
                        )
                    } else {
                        ProxyError::client(
                            hoard_origin::error::ErrorKind::BadRequest,
                            format!("request body: {e}"),
                        )
                    };
                    return Err(self.error_response(&e, None));
                }
            };
            let mut passed = Some(chunk);
            for s in filtered.streams.iter_mut() {
                let Some(c) = passed.take() else { break };
                match s.on_body(false, c, end) {
                    Ok(hoard_wasm::BodyStep::Pass(b)) => passed = Some(b),
                    Ok(hoard_wasm::BodyStep::Held) => {}
                    Ok(hoard_wasm::BodyStep::Respond(local)) => {
                        return Err(self.filter_answer(local, &ctx.method))
                    }
                    Err(e) => return Err(self.filter_failed(&e)),
                }
            }
            if let Some(c) = passed {
                out.extend_from_slice(&c);
            }
            if end {
                break;
            }
        }
        ctx.headers.remove(http::header::TRANSFER_ENCODING);
        ctx.headers.insert(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from(out.len()),
        );
        Ok(crate::request_body::RequestBody::Full(Some(
            bytes::Bytes::from(out),
        )))
    }

    /// Sends a filter's HTTP call through the upstream it names; `None`
    /// when there is no such upstream, it fails, times out, or its body is
    /// over `hoard_wasm::CALL_BODY_MAX`.
    async fn filter_call(&self, ctx: &Ctx<'_>, call: HttpCall) -> Option<CallResponse> {
        self.counters.inc(&self.counters.filter_calls);
        let at = ctx
            .run
            .cfg
            .upstreams
            .iter()
            .position(|u| u.name == call.upstream);
        let Some(upstream) = at.and_then(|i| ctx.run.upstreams.get(i)) else {
            tracing::warn!(upstream = %call.upstream, "a filter called an upstream that is not configured");
            return None;
        };
        send_call(upstream, call).await
    }

    /// The response callbacks, in reverse; then the streams end.
    pub(super) fn filter_response(&self, f: Filtered, resp: &mut Response<ProxyBody>) {
        let Filtered { mut streams, .. } = f;
        let cache_status = super::noted::current_outcome().map(Outcome::as_str);
        let mut head = ResponseHead {
            status: resp.status(),
            headers: std::mem::take(resp.headers_mut()),
        };
        let mut answer = None;
        for s in streams.iter_mut().rev() {
            s.info_mut().cache_status = cache_status;
            match s.on_response(&mut head) {
                // A response callback's calls are refused (`Unimplemented`).
                Ok(Verdict::Continue | Verdict::Wait(_)) => {}
                Ok(Verdict::Respond(local)) => {
                    answer = Some(self.filter_answer(local, &http::Method::GET));
                    break;
                }
                Err(e) => {
                    answer = Some(self.filter_failed(&e));
                    break;
                }
            }
        }
        match answer {
            Some(a) => *resp = a,
            None => {
                *resp.status_mut() = head.status;
                *resp.headers_mut() = head.headers;
                let has_body = !http_body::Body::is_end_stream(resp.body());
                let reads = streams.iter().any(|s| s.wants_body(true));
                if has_body && (reads || streams.iter().any(Stream::wants_end)) {
                    // The body goes through the body callbacks, which may
                    // change its length; the streams end with it (and so
                    // `proxy_on_log` comes after its last byte).
                    if reads {
                        resp.headers_mut().remove(http::header::CONTENT_LENGTH);
                    }
                    let inner = std::mem::replace(resp.body_mut(), ProxyBody::Empty);
                    *resp.body_mut() =
                        ProxyBody::Wrapped(Box::new(super::filter_body::FilteredBody::new(
                            inner,
                            streams,
                            self.counters.clone(),
                        )));
                    return;
                }
            }
        }
        // The streams end here: `proxy_on_done`, `proxy_on_log`, `proxy_on_delete`.
        drop(streams);
    }

    /// A filter's own answer (`proxy_send_local_response`).
    fn filter_answer(
        &self,
        local: hoard_wasm::LocalResponse,
        method: &http::Method,
    ) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.filter_answers);
        let body = if *method == http::Method::HEAD || local.body.is_empty() {
            ProxyBody::Empty
        } else {
            ProxyBody::Full(Some(local.body))
        };
        let mut resp = Response::new(body);
        *resp.status_mut() = local.status;
        *resp.headers_mut() = local.headers;
        let cs = CacheStatus {
            detail: Some("filter"),
            ..Default::default()
        };
        self.add_cache_status(&mut resp, &cs);
        super::note_outcome(Outcome::Respond);
        resp
    }

    /// A filter's failure: 500, counted and logged with its name.
    fn filter_failed(&self, e: &hoard_wasm::FilterError) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.filter_failures);
        tracing::warn!(filter = %e.filter, failure = e.kind.as_str(), detail = %e.detail, "a filter failed a request");
        self.error_response(&ProxyError::filter(e.to_string()), None)
    }
}

/// Sends an HTTP call through `upstream` (see `Pipeline::filter_call`).
async fn send_call(upstream: &hoard_origin::Upstream, call: HttpCall) -> Option<CallResponse> {
    use http_body_util::BodyExt;
    let mut headers = call.headers;
    if let Ok(host) = http::HeaderValue::from_str(&call.authority) {
        if !call.authority.is_empty() {
            headers.insert(http::header::HOST, host);
        }
    }
    let uri = http::Uri::try_from(call.path).ok()?;
    let body = (!call.body.is_empty()).then(|| {
        http_body_util::Full::new(call.body)
            .map_err(|never| match never {})
            .boxed()
    });
    let req = hoard_origin::OriginRequest {
        method: call.method,
        uri,
        headers,
        body,
        interim: None,
        tries: None,
    };
    let exchange = async {
        let resp = upstream.send(req).await.ok()?;
        let (parts, body) = resp.into_parts();
        let body = http_body_util::Limited::new(body, hoard_wasm::CALL_BODY_MAX)
            .collect()
            .await
            .ok()?
            .to_bytes();
        Some(CallResponse {
            head: ResponseHead {
                status: parts.status,
                headers: parts.headers,
            },
            body,
        })
    };
    tokio::time::timeout(call.timeout, exchange)
        .await
        .ok()
        .flatten()
}

/// What hoard does for a configuration's filters' root contexts (see
/// `hoard_wasm::Services`): counts their callbacks, and sends their HTTP
/// calls through the configuration's upstreams on the runtime.
pub(super) struct FilterServices {
    pub(super) counters: Arc<hoard_metrics::counters::Counters>,
    /// By name.
    pub(super) upstreams: Vec<(String, Arc<hoard_origin::Upstream>)>,
    pub(super) runtime: Option<tokio::runtime::Handle>,
}

impl hoard_wasm::Services for FilterServices {
    fn root_called(&self) {
        self.counters.inc(&self.counters.filter_root_callbacks);
    }

    fn call(&self, call: HttpCall, done: Box<dyn FnOnce(Option<CallResponse>) + Send>) {
        self.counters.inc(&self.counters.filter_calls);
        let upstream = self
            .upstreams
            .iter()
            .find(|(name, _)| *name == call.upstream)
            .map(|(_, u)| u.clone());
        let (Some(upstream), Some(rt)) = (upstream, self.runtime.as_ref()) else {
            tracing::warn!(upstream = %call.upstream, "a filter's root context called an upstream that is not configured");
            return done(None);
        };
        rt.spawn(async move { done(send_call(&upstream, call).await) });
    }
}

fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2",
        http::Version::HTTP_3 => "HTTP/3",
        _ => "HTTP/1.1",
    }
}
