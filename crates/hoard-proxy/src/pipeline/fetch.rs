//! Going to the origin for a cacheable request: miss, revalidation, and the
//! fill that writes a storable response into the cache.
//!
//! ## The fill
//!
//! A storable response's body is read by a task of its own (the fill), which
//! appends it to a [`BusyBody`]; the client reads from that body as it
//! arrives. The fill is owned by the cache, not by the client's connection: a
//! client that goes away does not stop it. When the body is complete the fill
//! stores the object; when the origin fails mid-body, readers get an error
//! (never a truncated body that looks complete) and nothing is stored; a body
//! that grows past the largest object size is passed on but not stored.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::cache_status::{ttl_secs, CacheStatus, Fwd};
use hoard_policy::conditional::{add_validators, evaluate, merge_304, Precondition};
use hoard_policy::facts::ResponseFacts;
use hoard_policy::freshness::{freshness_lifetime, LifetimeSource, StoredTimes};
use hoard_policy::key::CacheKey;
use hoard_policy::reuse::{stale_if_error, StoredRules};
use hoard_policy::storable::{storability, NotStorable, RequestFacts};
use hoard_policy::vary::VaryNames;
use hoard_store::busy::{BusyBody, BusyWriter, FillError};
use hoard_store::object::{ObjectBody, StoredObject};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Response, StatusCode, Version};
use http_body_util::BodyExt;

use super::{Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::error::ProxyError;
use crate::upstream::{OriginBody, OriginBodyError};

/// What the fill needs to build the stored object once the body is complete.
struct FillPlan {
    primary: hoard_policy::key::Digest,
    key_text: String,
    request_headers: HeaderMap,
    vary: VaryNames,
    status: StatusCode,
    headers: HeaderMap,
    times: StoredTimes,
    source: LifetimeSource,
    rules: StoredRules,
    max_object: u64,
}

impl Pipeline {
    /// Fetches from the origin for a cacheable request; `stale` is the stored
    /// object being revalidated, if any.
    pub(crate) async fn fetch(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        req_cc: &CacheControl,
        fwd: Fwd,
        stale: Option<Arc<StoredObject>>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        let mut oreq = self.origin_request(ctx, true, None);
        if let Some(obj) = &stale {
            add_validators(&mut oreq.headers, &obj.headers);
        }
        let request_time = self.clock.now();
        let resp = match ctx.upstream.send(oreq).await {
            Ok(r) => r,
            Err(e) => {
                if let Some(obj) = stale.filter(|o| e.may_serve_stale() && stale_if_error(&o.times, &o.rules, req_cc, self.clock.now())) {
                    return Ok(self.serve_stale_on_error(ctx, key, obj, None));
                }
                return Err(e);
            }
        };
        let response_time = self.clock.now();
        let status = resp.status();
        if let Some(obj) = &stale {
            if status.is_server_error() && stale_if_error(&obj.times, &obj.rules, req_cc, response_time) {
                return Ok(self.serve_stale_on_error(ctx, key, obj.clone(), Some(status.as_u16())));
            }
            if status == StatusCode::NOT_MODIFIED {
                let (parts, _body) = resp.into_parts();
                return Ok(self.refresh_from_304(ctx, key, obj, fwd, parts.headers, request_time, response_time));
            }
        }
        let (parts, body) = resp.into_parts();
        let mut headers = parts.headers;
        hoard_policy::headers::strip_hop_by_hop(&mut headers);
        let policy = &ctx.route.policy;
        let facts = ResponseFacts::read(status.as_u16(), &headers, policy);
        let req_facts = RequestFacts {
            cacheable_method: true,
            cc: req_cc,
            authorization: ctx.headers.contains_key(header::AUTHORIZATION),
        };
        let content_length = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
        let max_object = self.store.max_object();
        let decision = storability(req_facts, &facts, policy, response_time).and_then(|ok| match content_length {
            Some(len) if len > max_object => Err(NotStorable::TooLarge),
            _ => Ok(ok),
        });
        self.add_via(&mut headers, Version::HTTP_11);
        let mut cs = CacheStatus { fwd: Some(fwd), fwd_status: Some(status.as_u16()), ..Default::default() };
        if self.cfg.server.debug_headers {
            cs.key = Some(key.text.clone());
        }
        match decision {
            Ok((lifetime, source)) => {
                let times = StoredTimes {
                    request_time,
                    response_time,
                    date: facts.date.unwrap_or(response_time),
                    age_value: facts.age,
                    lifetime,
                };
                let rules = StoredRules::new(&facts.cc, policy.stale_while_revalidate, policy.stale_if_error);
                let mut stored_headers = headers.clone();
                stored_headers.remove(header::SET_COOKIE);
                hoard_policy::headers::strip_never_stored(&mut stored_headers);
                let plan = FillPlan {
                    primary: key.digest,
                    key_text: key.text.clone(),
                    request_headers: ctx.headers.clone(),
                    vary: if policy.ignore_vary { VaryNames::default() } else { VaryNames::from_response(&headers) },
                    status,
                    headers: stored_headers,
                    times,
                    source,
                    rules,
                    max_object,
                };
                cs.stored = true;
                cs.ttl = Some(ttl_secs(times.ttl_millis(response_time)));
                let reader = self.start_fill(plan, body);
                Ok(self.deliver_fetched(ctx, status, headers, ProxyBody::Busy(reader), &cs))
            }
            Err(reason) => {
                self.counters.inc(&self.counters.not_storable);
                if stale.is_some() {
                    // The stored copy was replaced by a response that may not be
                    // stored: keeping the old one would keep serving it.
                    self.store.remove_all(key.digest);
                }
                cs.detail = Some(reason.as_str());
                tracing::debug!(key = %key.text, reason = reason.as_str(), "not storable");
                Ok(self.deliver_fetched(ctx, status, headers, ProxyBody::Origin(body), &cs))
            }
        }
    }

    /// Answers the client from a response just fetched: its preconditions are
    /// evaluated against it (they were not forwarded), HEAD gets no body.
    fn deliver_fetched(&self, ctx: &Ctx<'_>, status: StatusCode, headers: HeaderMap, body: ProxyBody, cs: &CacheStatus) -> Response<ProxyBody> {
        let pre = if status.is_success() { evaluate(&ctx.method, &ctx.headers, &headers) } else { Precondition::Pass };
        let mut resp = match pre {
            Precondition::NotModified => {
                let mut r = self.status_only(StatusCode::NOT_MODIFIED);
                for name in [header::CACHE_CONTROL, header::DATE, header::ETAG, header::EXPIRES, header::VARY, header::LAST_MODIFIED, header::VIA] {
                    for v in headers.get_all(&name) {
                        r.headers_mut().append(name.clone(), v.clone());
                    }
                }
                r
            }
            Precondition::Failed => self.status_only(StatusCode::PRECONDITION_FAILED),
            Precondition::Pass => {
                let body = if ctx.method == Method::HEAD { ProxyBody::Empty } else { body };
                let mut r = Response::new(body);
                *r.status_mut() = status;
                *r.headers_mut() = headers;
                r
            }
        };
        self.add_cache_status(resp.headers_mut(), cs);
        resp
    }

    /// Spawns the fill task and returns a reader of its body.
    fn start_fill(&self, plan: FillPlan, body: OriginBody) -> hoard_store::busy::BusyReader {
        let (busy, writer) = BusyBody::new();
        let reader = busy.reader().expect("invariant: a new busy body accepts readers");
        self.counters.inc(&self.counters.fills_started);
        let store = self.store.clone();
        let counters = self.counters.clone();
        tokio::spawn(async move {
            let outcome = run_fill(body, &writer, plan.max_object).await;
            match outcome {
                Ok(keep) => {
                    counters.inc(&counters.fills_completed);
                    // Store before readers see the end: a client holding the
                    // complete body can count on the next request hitting.
                    match writer.chunks().filter(|_| keep) {
                        Some(chunks) => {
                            let obj = build_object(plan, chunks);
                            if store.insert(obj.0, &obj.1, Arc::new(obj.2)).is_ok() {
                                counters.inc(&counters.objects_stored);
                            } else {
                                counters.inc(&counters.objects_too_large);
                            }
                        }
                        None => counters.inc(&counters.objects_too_large),
                    }
                    writer.finish();
                }
                Err(e) => {
                    counters.inc(&counters.fills_aborted);
                    counters.inc(&counters.origin_body_errors);
                    tracing::info!(key = %plan.key_text, error = e.as_str(), "fill aborted; nothing stored");
                    writer.abort(e);
                }
            }
        });
        reader
    }

    fn serve_stale_on_error(&self, ctx: &Ctx<'_>, key: &CacheKey, obj: Arc<StoredObject>, fwd_status: Option<u16>) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.stale_if_error_served);
        let status = CacheStatus { hit: true, fwd: Some(Fwd::Stale), fwd_status, detail: Some("stale-if-error"), ..Default::default() };
        self.serve_stored(ctx, key, obj, status, self.clock.now())
    }

    #[allow(clippy::too_many_arguments)]
    /// A 304 answered a revalidation: merge its fields into the stored
    /// response (RFC 9111 §4.3.4), store the refreshed copy and serve it.
    fn refresh_from_304(
        &self,
        ctx: &Ctx<'_>,
        key: &CacheKey,
        obj: &Arc<StoredObject>,
        fwd: Fwd,
        not_modified: HeaderMap,
        request_time: SystemTime,
        response_time: SystemTime,
    ) -> Response<ProxyBody> {
        self.counters.inc(&self.counters.cache_revalidated_304);
        let mut headers = obj.headers.clone();
        let mut update = not_modified;
        hoard_policy::headers::strip_hop_by_hop(&mut update);
        update.remove(header::SET_COOKIE);
        update.remove(header::VIA);
        hoard_policy::headers::strip_never_stored(&mut update);
        merge_304(&mut headers, &update);
        let policy = &ctx.route.policy;
        let facts = ResponseFacts::read(obj.status.as_u16(), &headers, policy);
        let (lifetime, source) = freshness_lifetime(&facts, policy, response_time).unwrap_or((std::time::Duration::ZERO, obj.lifetime_source));
        let times = StoredTimes {
            request_time,
            response_time,
            date: facts.date.unwrap_or(response_time),
            age_value: facts.age,
            lifetime,
        };
        let rules = StoredRules::new(&facts.cc, policy.stale_while_revalidate, policy.stale_if_error);
        let fresh = Arc::new(obj.with_headers(headers, times, source, rules));
        if facts.cc.no_store || facts.cc.private {
            self.store.remove_all(key.digest);
        } else {
            self.store.update(key.digest, &ctx.headers, fresh.clone());
        }
        let status = CacheStatus { fwd: Some(fwd), fwd_status: Some(304), stored: true, ..Default::default() };
        self.serve_stored(ctx, key, fresh, status, response_time)
    }
}

/// Reads the origin body into the busy body. `Ok(true)`: complete and
/// storable; `Ok(false)`: complete but too large to store.
async fn run_fill(mut body: OriginBody, writer: &BusyWriter, max_object: u64) -> Result<bool, FillError> {
    let mut keep = true;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    writer.append(data);
                    if keep && writer.len() > max_object {
                        keep = false;
                        writer.release_history();
                    }
                }
            }
            Err(OriginBodyError::Timeout) => return Err(FillError::OriginTimeout),
            Err(OriginBodyError::Aborted(_)) => return Err(FillError::OriginAborted),
        }
    }
    Ok(keep)
}

fn build_object(plan: FillPlan, chunks: Vec<Bytes>) -> (hoard_policy::key::Digest, HeaderMap, StoredObject) {
    let body = ObjectBody::from_chunks(compact(chunks));
    let mut headers = plan.headers;
    headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
    let obj = StoredObject::new(plan.key_text, plan.vary, plan.status, headers, plan.times, plan.source, plan.rules, body);
    (plan.primary, plan.request_headers, obj)
}

/// Joins small chunks so a hit writes few, large buffers (up to 1 MiB each).
fn compact(chunks: Vec<Bytes>) -> Vec<Bytes> {
    const TARGET: usize = 1 << 20;
    if chunks.len() <= 1 {
        return chunks;
    }
    let mut out = Vec::new();
    let mut cur = bytes::BytesMut::new();
    for c in chunks {
        if !cur.is_empty() && cur.len() + c.len() > TARGET {
            out.push(std::mem::take(&mut cur).freeze());
        }
        cur.extend_from_slice(&c);
    }
    if !cur.is_empty() {
        out.push(cur.freeze());
    }
    out
}
