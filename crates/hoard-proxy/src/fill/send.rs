//! Sending a fill's request: to the origin, to the key's owner in a
//! cluster, or to the parent tier; and making the answer's fields fit to
//! forward and store.

use std::time::SystemTime;

use http::header::{self, HeaderMap, HeaderValue};
use http::Version;

use super::coalesce::{FillPermit, Outcome};
use super::run::Sent;
use super::{FillEngine, FillJob};
use hoard_cluster::Source;

impl FillEngine {
    /// Sends the request; an error is published as `OriginError`.
    pub(super) async fn send(&self, job: &mut FillJob, permit: &mut FillPermit) -> Option<Sent> {
        let request_time = self.clock.now();
        let mut oreq = job.oreq.take().expect("invariant: a fill job is run once");
        let filters = match self.filter_origin_request(job, &mut oreq) {
            Ok(f) => f,
            Err(e) => {
                self.origin_filter_failed(job, &e);
                permit.publish(Outcome::OriginError(hoard_origin::error::ErrorKind::Filter));
                return None;
            }
        };
        let by = job.route_key.as_deref().unwrap_or(&job.key.text);
        let again = super::resume::Again::of(&oreq, by.as_bytes());
        let sent = match (&self.cluster, job.cluster_tls) {
            (Some(c), Some(tls)) => c.send(by.as_bytes(), tls, oreq, &job.upstream).await,
            (Some(c), None) if job.tier_tls.is_some() => {
                let tls = job.tier_tls.unwrap_or(false);
                c.beyond(by.as_bytes(), tls, oreq, &job.upstream).await
            }
            _ => job.upstream.send(oreq).await.map(|r| (r, Source::Origin)),
        };
        match sent {
            Ok((resp, source)) => {
                if self.cluster.is_some() && source == Source::Origin {
                    self.counters.inc(&self.counters.cluster_owner_fills);
                }
                Some(Sent {
                    resp,
                    request_time,
                    response_time: self.clock.now(),
                    source,
                    again,
                    filters,
                })
            }
            Err(e) => {
                if job.stale.is_some() {
                    self.counters.inc(&self.counters.revalidation_failed);
                }
                tracing::info!(key = %job.key.text, error = %e, "fill failed before a response");
                permit.publish(Outcome::OriginError(e.kind));
                None
            }
        }
    }

    /// Makes an origin response's fields fit to forward and store:
    /// hop-by-hop fields removed, `Date` added when missing (RFC 9110
    /// §6.6.1: a recipient with a clock dates what it forwards), `Via` added
    /// with the protocol it came over (§7.6.3).
    pub(super) fn forwardable(
        &self,
        headers: &mut HeaderMap,
        version: Version,
        response_time: SystemTime,
    ) {
        hoard_policy::headers::strip_hop_by_hop(headers);
        if !headers.contains_key(header::DATE) {
            if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(response_time)) {
                headers.insert(header::DATE, v);
            }
        }
        self.via.add(headers, version);
    }
}
