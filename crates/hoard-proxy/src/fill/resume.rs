//! Resuming a fill whose source drops after the response head.
//!
//! ## Model
//!
//! A fill streams one response to every reader of its busy body. When its
//! source (an origin server, or the key's owner in a cluster) drops after
//! the head, the body ([`Resuming`]) asks the next choice for the rest:
//! `Range: bytes=<received>-` (the same last byte for a range that ended
//! before the whole length), guarded by `If-Range` with the strong
//! validator of the response being streamed (RFC 9110 §13.1.5): its
//! strong `ETag`, else its `Last-Modified` when that is strong
//! (§8.8.2.2: at least a second before `Date`). The answer is taken when
//! it is the same representation's bytes from where the body stopped:
//!
//! * a `206` whose `Content-Range` starts at that byte, ends where the
//!   body would have and has the same length, sharing the strong validator
//!   (§15.3.7.3): its bytes follow;
//! * a `200` sharing the strong validator and the length, to a fill of the
//!   whole object (a source that ignores `Range`): the same bytes again,
//!   those already read skipped.
//!
//! Anything else (a `200` of another version, other bytes, an error, no
//! answer) leaves the cut: the readers are cut as when nothing is tried,
//! nothing is stored, never a mixture of two versions. Every cut that
//! stays is counted (`fill_cut`, with the reason in the log), every rest
//! taken too (`fill_resumed`).
//!
//! Never resumed: a request that is not a GET or has a body, an answer
//! other than a `200` or a single-range `206`, one without a strong
//! validator. The attempts of one fill are bounded: the upstream's tries
//! (origin), the number of members (cluster).
//!
//! ## The next choice
//!
//! * An origin server: the upstream again ([`Upstream::send`]): the next
//!   server round-robin, or the same one when it has one, with failover.
//! * The key's owner: the key's next choice after the member whose answer
//!   broke off ([`Cluster::send_after`]), the tier or the origin when that
//!   is this node (a dead owner refuses the connection and is passed over
//!   as when a fill starts).
//! * A previous owner or a parent: the tier or the origin
//!   ([`Cluster::beyond`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use hoard_policy::range::{completion_validator, parse_content_range, share_strong_validator};
use http::header::{self, HeaderMap, HeaderValue};
use http::response::Parts;
use http::{Method, Response, StatusCode, Uri};
use http_body::{Body, Frame, SizeHint};

use super::{FillEngine, FillJob};
use hoard_cluster::{Cluster, Served, Source};
use hoard_metrics::counters::Counters;
use hoard_origin::error::ProxyError;
use hoard_origin::{OriginBody, OriginBodyError, OriginRequest, Upstream};

/// How going on after a dropped source ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// A `206` of the rest: its bytes follow.
    Resumed,
    /// A `200` of the same representation: what was read is skipped.
    Repeated,
    /// The request is not a GET, or has a body.
    NotGet,
    /// The response has no strong validator.
    NoValidator,
    /// The response is not a `200` or a single-range `206`.
    NotWhole,
    /// A `200` of another version (or another length).
    Changed,
    /// A `206` of other bytes or another validator, or another status.
    Mismatch,
    /// No response head from any choice.
    Unanswered,
    /// The fill's attempts are used up.
    Exhausted,
}

impl Outcome {
    /// Its name in logs.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Resumed => "resumed",
            Outcome::Repeated => "repeated",
            Outcome::NotGet => "not_get",
            Outcome::NoValidator => "no_validator",
            Outcome::NotWhole => "not_resumable",
            Outcome::Changed => "changed",
            Outcome::Mismatch => "mismatch",
            Outcome::Unanswered => "unanswered",
            Outcome::Exhausted => "exhausted",
        }
    }
}

/// A fill's request as sent, without a body: what asks for the rest.
#[derive(Debug)]
pub(super) struct Again {
    uri: Uri,
    headers: HeaderMap,
    /// What the key's owner is chosen by (in a cluster).
    by: Box<[u8]>,
}

impl Again {
    /// The copy of `req` (owner chosen by `by`); `None` for a request that
    /// is not a GET or has a body (never sent twice).
    pub(super) fn of(req: &OriginRequest, by: &[u8]) -> Option<Again> {
        (req.method == Method::GET && req.body.is_none()).then(|| Again {
            uri: req.uri.clone(),
            headers: req.headers.clone(),
            by: by.into(),
        })
    }
}

/// Where the rest is asked for.
#[derive(Debug)]
enum Next {
    /// The upstream.
    Origin,
    /// The key's choices after member `after` (see [`Cluster::send_after`]).
    Members {
        cluster: Arc<Cluster>,
        tls: bool,
        after: Option<u16>,
    },
    /// The tier or the origin ([`Cluster::beyond`]).
    Beyond { cluster: Arc<Cluster>, tls: bool },
}

/// Everything needed to ask for the rest of one response.
#[derive(Debug)]
struct Plan {
    again: Again,
    /// The `If-Range` value.
    validator: HeaderValue,
    /// The fields of the response being streamed.
    fields: HeaderMap,
    /// The representation's bytes the body holds: from `base` to `end`
    /// (exclusive) of `total` (`None`: not known).
    base: u64,
    end: Option<u64>,
    total: Option<u64>,
    upstream: Arc<Upstream>,
    next: Next,
    /// For logs.
    key: String,
}

/// The answer to a request for the rest: the body to go on with, and how
/// many of its first bytes were read already.
type Rest = Result<(OriginBody, u64), Outcome>;
type Pending = Pin<Box<dyn Future<Output = (Box<Plan>, Rest)> + Send>>;

impl Plan {
    /// The request for the rest from byte `at` of the representation.
    fn request(&self, at: u64) -> OriginRequest {
        let mut headers = self.again.headers.clone();
        for h in [
            header::RANGE,
            header::IF_RANGE,
            header::IF_NONE_MATCH,
            header::IF_MODIFIED_SINCE,
            header::IF_MATCH,
            header::IF_UNMODIFIED_SINCE,
        ] {
            headers.remove(h);
        }
        let range = match (self.end, self.total) {
            (Some(e), Some(t)) if e < t => format!("bytes={at}-{}", e - 1),
            _ => format!("bytes={at}-"),
        };
        headers.insert(
            header::RANGE,
            HeaderValue::from_str(&range).expect("invariant: ASCII digits"),
        );
        headers.insert(header::IF_RANGE, self.validator.clone());
        OriginRequest {
            method: Method::GET,
            uri: self.again.uri.clone(),
            headers,
            body: None,
            interim: None,
            tries: None,
        }
    }

    async fn send(&self, req: OriginRequest) -> Result<Response<OriginBody>, ProxyError> {
        let by = &self.again.by;
        match &self.next {
            Next::Origin => self.upstream.send(req).await,
            Next::Members {
                cluster,
                tls,
                after,
            } => cluster
                .send_after(by, *tls, req, &self.upstream, *after)
                .await
                .map(|(r, _)| r),
            Next::Beyond { cluster, tls } => cluster
                .beyond(by, *tls, req, &self.upstream)
                .await
                .map(|(r, _)| r),
        }
    }

    /// Asks for the rest from byte `at`.
    async fn rest(self: Box<Self>, at: u64) -> (Box<Self>, Rest) {
        let got = match self.send(self.request(at)).await {
            Ok(resp) => {
                let (parts, body) = resp.into_parts();
                self.take(parts.status, &parts.headers, at)
                    .map(|skip| (body, skip))
            }
            Err(e) => {
                tracing::info!(key = %self.key, error = %e, "no answer to the request for the rest of a fill");
                Err(Outcome::Unanswered)
            }
        };
        (self, got)
    }

    /// Whether an answer with `status` and `fields` is the rest from byte
    /// `at` (see the module docs): how many of its bytes to skip.
    fn take(&self, status: StatusCode, fields: &HeaderMap, at: u64) -> Result<u64, Outcome> {
        let same = share_strong_validator(&self.fields, fields);
        match status {
            StatusCode::PARTIAL_CONTENT => {
                let exact = fields
                    .get(header::CONTENT_RANGE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(parse_content_range)
                    .is_some_and(|(r, t)| {
                        r.start == at
                            && r.end == self.end.unwrap_or(t)
                            && self.total.is_none_or(|total| total == t)
                    });
                if exact && same {
                    Ok(0)
                } else {
                    Err(Outcome::Mismatch)
                }
            }
            StatusCode::OK => {
                let whole = self.base == 0 && self.end == self.total;
                let len = content_length(fields);
                let same_len = match (len, self.total) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                };
                if whole && same && same_len {
                    Ok(at)
                } else {
                    Err(Outcome::Changed)
                }
            }
            _ => Err(Outcome::Mismatch),
        }
    }
}

fn content_length(fields: &HeaderMap) -> Option<u64> {
    fields
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

impl FillEngine {
    /// The body of a fill's response (`parts`, from `source`), which goes
    /// on from the next choice when its source drops (see the module
    /// docs). `joined`: the body is the rest of a stored partial copy of
    /// `have` bytes of `total`.
    pub(super) fn resumable(
        &self,
        job: &FillJob,
        again: Option<Again>,
        parts: &Parts,
        joined: Option<(u64, u64)>,
        source: Source,
        body: OriginBody,
    ) -> Resuming {
        let plan = self.plan(job, again, parts, joined, source);
        let tries = match &plan {
            Ok(p) => match &p.next {
                Next::Origin => {
                    let u = &p.upstream.cfg;
                    let n = u.servers.len() + u.backup.len();
                    u.tries.map_or(n, |t| n.min(t as usize))
                }
                Next::Members { cluster, .. } | Next::Beyond { cluster, .. } => {
                    cluster.view().members.len()
                }
            },
            Err(_) => 0,
        };
        Resuming {
            body: Some(body),
            plan,
            pending: None,
            received: 0,
            skip: 0,
            tries: tries.max(1),
            cut: None,
            counters: self.counters.clone(),
            key: job.key.text.clone(),
        }
    }

    fn plan(
        &self,
        job: &FillJob,
        again: Option<Again>,
        parts: &Parts,
        joined: Option<(u64, u64)>,
        source: Source,
    ) -> Result<Box<Plan>, Outcome> {
        let again = again.ok_or(Outcome::NotGet)?;
        let validator = completion_validator(&parts.headers)
            .ok_or(Outcome::NoValidator)?
            .clone();
        let (base, end, total) = match (joined, parts.status) {
            (Some((have, total)), _) => (have, Some(total), Some(total)),
            (None, StatusCode::OK) => {
                let len = content_length(&parts.headers);
                (0, len, len)
            }
            (None, StatusCode::PARTIAL_CONTENT) => parts
                .headers
                .get(header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_content_range)
                .map(|(r, t)| (r.start, Some(r.end), Some(t)))
                .ok_or(Outcome::NotWhole)?,
            _ => return Err(Outcome::NotWhole),
        };
        let tls = job.cluster_tls.or(job.tier_tls).unwrap_or(false);
        let next = match (source, &self.cluster) {
            (Source::Origin, _) | (_, None) => Next::Origin,
            (Source::Owner { .. }, Some(c)) => Next::Members {
                cluster: c.clone(),
                tls,
                after: parts.extensions.get::<Served>().map(|s| s.0),
            },
            (Source::Previous | Source::Parent, Some(c)) => Next::Beyond {
                cluster: c.clone(),
                tls,
            },
        };
        Ok(Box::new(Plan {
            again,
            validator,
            fields: parts.headers.clone(),
            base,
            end,
            total,
            upstream: job.upstream.clone(),
            next,
            key: job.key.text.clone(),
        }))
    }
}

/// A fill's origin body that goes on from the next choice when its source
/// drops (see the module docs). Yields the same frames as the body it
/// wraps, and the error of the last drop when the cut stays.
pub(super) struct Resuming {
    /// The body being read (`None` while the rest is asked for, and at the end).
    body: Option<OriginBody>,
    /// How to ask for the rest, or why it is not asked for.
    plan: Result<Box<Plan>, Outcome>,
    /// The request for the rest, while it is in flight.
    pending: Option<Pending>,
    /// Bytes yielded, from `base`.
    received: u64,
    /// Bytes of the current body still to skip (read already).
    skip: u64,
    /// Requests for the rest left.
    tries: usize,
    /// The error of the last drop.
    cut: Option<OriginBodyError>,
    counters: Arc<Counters>,
    key: String,
}

impl std::fmt::Debug for Resuming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resuming")
            .field("received", &self.received)
            .field("skip", &self.skip)
            .field("tries", &self.tries)
            .field("resuming", &self.pending.is_some())
            .finish_non_exhaustive()
    }
}

impl Resuming {
    /// The cut stays, for `why`: counted and logged; the error to yield.
    fn give_up(&mut self, why: Outcome) -> OriginBodyError {
        self.body = None;
        self.counters.inc(&self.counters.fill_cut);
        tracing::info!(
            key = %self.key,
            outcome = why.as_str(),
            received = self.received,
            "fill source dropped after the head; its readers are cut"
        );
        // Set before every attempt; a body that ended before the bytes
        // it repeats were skipped is a cut of its own.
        self.cut.take().unwrap_or(OriginBodyError::Timeout)
    }

    /// The body dropped with `e`: asks for the rest if it may.
    fn dropped(&mut self, e: OriginBodyError) -> Result<(), OriginBodyError> {
        self.body = None;
        self.cut = Some(e);
        let plan = match std::mem::replace(&mut self.plan, Err(Outcome::Exhausted)) {
            Ok(plan) if self.tries > 0 => plan,
            Ok(plan) => {
                self.plan = Ok(plan);
                return Err(self.give_up(Outcome::Exhausted));
            }
            Err(why) => {
                self.plan = Err(why);
                return Err(self.give_up(why));
            }
        };
        self.tries -= 1;
        let at = plan.base + self.received;
        tracing::info!(key = %self.key, at, "fill source dropped after the head; asking the next choice for the rest");
        self.pending = Some(Box::pin(plan.rest(at)));
        Ok(())
    }
}

impl Body for Resuming {
    type Data = Bytes;
    type Error = OriginBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, OriginBodyError>>> {
        let this = &mut *self;
        loop {
            if let Some(p) = &mut this.pending {
                let (plan, rest) = ready!(p.as_mut().poll(cx));
                this.pending = None;
                this.plan = Ok(plan);
                match rest {
                    Ok((body, skip)) => {
                        let how = if skip > 0 {
                            Outcome::Repeated
                        } else {
                            Outcome::Resumed
                        };
                        this.counters.inc(&this.counters.fill_resumed);
                        tracing::info!(key = %this.key, outcome = how.as_str(), "fill goes on from the next choice");
                        this.body = Some(body);
                        this.skip = skip;
                    }
                    Err(why) => return Poll::Ready(Some(Err(this.give_up(why)))),
                }
            }
            let Some(body) = &mut this.body else {
                return Poll::Ready(None);
            };
            match ready!(Pin::new(body).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    let mut data = match frame.into_data() {
                        Ok(data) => data,
                        Err(other) => return Poll::Ready(Some(Ok(other))),
                    };
                    if this.skip > 0 {
                        let n = this.skip.min(data.len() as u64);
                        this.skip -= n;
                        data = data.slice(n as usize..);
                        if data.is_empty() {
                            continue;
                        }
                    }
                    this.received += data.len() as u64;
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(e)) => {
                    if let Err(e) = this.dropped(e) {
                        return Poll::Ready(Some(Err(e)));
                    }
                }
                None if this.skip > 0 => {
                    return Poll::Ready(Some(Err(this.give_up(Outcome::Changed))));
                }
                None => {
                    this.body = None;
                    return Poll::Ready(None);
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.pending.is_none() && self.body.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(n, v)| {
                (
                    http::header::HeaderName::from_bytes(n.as_bytes()).unwrap(),
                    HeaderValue::from_str(v).unwrap(),
                )
            })
            .collect()
    }

    fn plan(base: u64, end: Option<u64>, total: Option<u64>) -> Plan {
        let up = hoard_config::UpstreamConfig::new("o", Vec::new());
        let clock: Arc<dyn hoard_policy::clock::Clock> = Arc::new(hoard_policy::clock::SystemClock);
        Plan {
            again: Again {
                uri: "/x".parse().unwrap(),
                headers: h(&[
                    ("host", "h"),
                    ("if-none-match", "\"v0\""),
                    ("range", "bytes=0-"),
                ]),
                by: Box::from(&b"k"[..]),
            },
            validator: HeaderValue::from_static("\"v1\""),
            fields: h(&[("etag", "\"v1\"")]),
            base,
            end,
            total,
            upstream: Arc::new(Upstream::new(up, Arc::default(), clock)),
            next: Next::Origin,
            key: "k".into(),
        }
    }

    #[test]
    fn the_rest_is_asked_with_range_and_if_range_only() {
        let r = plan(0, Some(100), Some(100)).request(40);
        assert_eq!(r.headers["range"], "bytes=40-");
        assert_eq!(r.headers["if-range"], "\"v1\"");
        assert_eq!(r.headers["host"], "h");
        assert!(r.headers.get("if-none-match").is_none());
        assert_eq!(r.method, Method::GET);
        // A range that ended before the whole length keeps its last byte.
        let r = plan(100, Some(200), Some(1000)).request(140);
        assert_eq!(r.headers["range"], "bytes=140-199");
    }

    #[test]
    fn only_the_same_bytes_from_the_cut_are_taken() {
        let p = plan(0, Some(100), Some(100));
        let ok = h(&[("etag", "\"v1\""), ("content-range", "bytes 40-99/100")]);
        assert_eq!(p.take(StatusCode::PARTIAL_CONTENT, &ok, 40), Ok(0));
        for bad in [
            h(&[("etag", "\"v1\""), ("content-range", "bytes 41-99/100")]),
            h(&[("etag", "\"v1\""), ("content-range", "bytes 40-98/100")]),
            h(&[("etag", "\"v1\""), ("content-range", "bytes 40-99/101")]),
            h(&[("etag", "\"v2\""), ("content-range", "bytes 40-99/100")]),
            h(&[("content-range", "bytes 40-99/100")]),
        ] {
            assert_eq!(
                p.take(StatusCode::PARTIAL_CONTENT, &bad, 40),
                Err(Outcome::Mismatch),
                "{bad:?}"
            );
        }
        // The same representation again: what was read is skipped.
        let same = h(&[("etag", "\"v1\""), ("content-length", "100")]);
        assert_eq!(p.take(StatusCode::OK, &same, 40), Ok(40));
        let changed = h(&[("etag", "\"v2\""), ("content-length", "100")]);
        assert_eq!(p.take(StatusCode::OK, &changed, 40), Err(Outcome::Changed));
        assert_eq!(
            p.take(StatusCode::NOT_FOUND, &same, 40),
            Err(Outcome::Mismatch)
        );
        // A slice is never taken from a whole answer.
        let slice = plan(100, Some(200), Some(1000));
        let whole = h(&[("etag", "\"v1\""), ("content-length", "1000")]);
        assert_eq!(
            slice.take(StatusCode::OK, &whole, 140),
            Err(Outcome::Changed)
        );
        // Of unknown length: the 206's length is taken.
        let chunked = plan(0, None, None);
        let rest = h(&[("etag", "\"v1\""), ("content-range", "bytes 40-99/100")]);
        assert_eq!(chunked.take(StatusCode::PARTIAL_CONTENT, &rest, 40), Ok(0));
    }
}
