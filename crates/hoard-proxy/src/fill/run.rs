//! The lifecycle of one fill: the steps from send to store, in order
//! (see the module docs of [`super`]), and what they hand each other.
//! Each step lives with its concept: sending ([`super::send`]), what an
//! answer means ([`super::answer`]), whether it is stored
//! ([`super::decide`]), the body ([`super::stream`]), keeping the object
//! ([`super::keep`]) and its coded parts ([`super::coded`]).

use std::sync::Arc;
use std::time::SystemTime;

use http::StatusCode;

use super::coalesce::FillPermit;
use super::{FillEngine, FillJob};
use hoard_cluster::Source;
use hoard_origin::OriginBody;

type OriginResponse = http::Response<OriginBody>;

/// The origin's answer and when it came.
pub(super) struct Sent {
    pub(super) resp: OriginResponse,
    pub(super) request_time: SystemTime,
    pub(super) response_time: SystemTime,
    /// The origin, or the key's owner in a cluster.
    pub(super) source: Source,
    /// The request again, to ask for the rest if the body breaks off.
    pub(super) again: Option<super::resume::Again>,
    /// The route's origin filters, waiting for the answer's head.
    pub(super) filters: Option<super::filters::OriginFilters>,
}

/// What a fill stores besides the response: its status and the purge
/// epoch when it started.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stored {
    pub(super) status: StatusCode,
    pub(super) purge_epoch: u64,
    /// The purge epoch a cluster's purge window before the fill started:
    /// a copy of another member's object is not kept when a purge of it
    /// was applied here since (see `Cluster::purge_window`).
    pub(super) near_epoch: u64,
    /// The fill's slot was taken out of the table (invalidation, purge).
    pub(super) detached: bool,
    /// A partial copy joined to the origin's rest: the object's length,
    /// which the body must reach exactly to be stored.
    pub(super) joined: Option<u64>,
    /// Where the response came from: an owner's answer is kept in the
    /// near tier, if at all.
    pub(super) source: Source,
}

/// A stored partial copy that goes first in the body of a completion
/// (see [`PartialFill::Completing`]).
pub(super) struct Joined {
    /// The copy's body, read as the fill goes.
    pub(super) prefix: crate::body::ProxyBody,
    /// Its length.
    pub(super) have: u64,
    /// The whole object's length.
    pub(super) total: u64,
    /// The request without `Range`, if the joined object may not be stored.
    pub(super) plain: Option<Box<hoard_origin::OriginRequest>>,
}

impl FillEngine {
    /// The origin filters' response callbacks over the answer's head (see
    /// `filters`), unless it came from the key's owner; `None`: one failed,
    /// and the fill's clients were told.
    fn origin_filtered(
        &self,
        job: &FillJob,
        sent: &mut Sent,
        permit: &mut FillPermit,
    ) -> Option<super::filters::FilterDecision> {
        let Some(filters) = sent.filters.take() else {
            return Some(Default::default());
        };
        if matches!(sent.source, Source::Owner { .. }) {
            return Some(Default::default());
        }
        let mut status = sent.resp.status();
        let mut headers = std::mem::take(sent.resp.headers_mut());
        let decided = self.filter_origin_response(filters, &mut status, &mut headers);
        *sent.resp.status_mut() = status;
        *sent.resp.headers_mut() = headers;
        match decided {
            Ok(d) => Some(d),
            Err(e) => {
                self.origin_filter_failed(job, &e);
                permit.publish(super::coalesce::Outcome::OriginError(
                    hoard_origin::error::ErrorKind::Filter,
                ));
                None
            }
        }
    }

    /// Runs a fill to its end.
    pub(super) async fn run(self: Arc<Self>, job: FillJob, permit: FillPermit) {
        // `None`: an outcome was published on the way.
        let _ = self.run_steps(job, permit).await;
    }

    async fn run_steps(self: Arc<Self>, mut job: FillJob, mut permit: FillPermit) -> Option<()> {
        self.counters.inc(&self.counters.fills_started);
        // Purges from now on are newer than the response: see store_complete.
        let purge_epoch = self.store.catalog().epoch();
        let near_epoch = match &self.cluster {
            Some(c) => tokio::time::Instant::now()
                .checked_sub(c.purge_window())
                .map_or(0, |at| self.store.catalog().epoch_as_of(at)),
            None => purge_epoch,
        };
        let mut sent = self.send(&mut job, &mut permit).await?;
        let mut decision = self.origin_filtered(&job, &mut sent, &mut permit)?;
        let sent = self
            .revalidated(&job, sent, decision, purge_epoch, &mut permit)
            .await?;
        let (mut sent, mut joined) = self.completed(&mut job, sent, &mut permit).await?;
        let (status, parts, body, storable) = loop {
            let status = sent.resp.status();
            let (mut parts, body) = sent.resp.into_parts();
            self.forwardable(&mut parts.headers, parts.version, sent.response_time);
            let decided = self
                .slice_answer(&mut job, &parts)
                .and_then(|(judged_as, rekey)| {
                    let storable = self.decide(
                        &job,
                        judged_as,
                        &parts,
                        (sent.request_time, sent.response_time),
                        decision,
                    )?;
                    Ok((storable, rekey))
                });
            match decided {
                Ok((storable, rekey)) => {
                    if let Some(key) = rekey {
                        // A 206 kept as the partial copy; a stale copy being
                        // revalidated is the whole object, not this.
                        job.key = key;
                        job.stale = None;
                    }
                    break (status, parts, body, storable);
                }
                Err(_) if joined.as_ref().is_some_and(|j| j.plain.is_some()) => {
                    // The joined object may not be stored: the rest alone is
                    // not the answer. Ask for the whole object instead.
                    job.oreq = joined.take().and_then(|j| j.plain).map(|p| *p);
                    drop(body);
                    sent = self.send(&mut job, &mut permit).await?;
                    decision = self.origin_filtered(&job, &mut sent, &mut permit)?;
                }
                Err(reason) => {
                    self.uncacheable(&job, reason, sent.response_time);
                    permit.publish_uncacheable(reason, http::Response::from_parts(parts, body));
                    return None;
                }
            }
        };
        // A source that drops after the head: the rest from the next choice.
        let body = self.resumable(
            &job,
            sent.again.take(),
            &parts,
            joined.as_ref().map(|j| (j.have, j.total)),
            sent.source,
            body,
        );
        self.hfp.clear(job.key.digest);
        let kept = sent.source != (Source::Owner { keep: false });
        let writer = self.publish(
            &job,
            (status, kept),
            parts,
            &storable,
            sent.response_time,
            &mut permit,
        );
        // A copy of another member's object never goes to disk.
        let disk = match sent.source {
            Source::Origin | Source::Previous | Source::Parent => {
                self.open_disk(&job, status, &storable).await
            }
            Source::Owner { .. } => None,
        };
        let stored = Stored {
            status,
            purge_epoch,
            near_epoch,
            detached: false,
            joined: joined.as_ref().map(|j| j.total),
            source: sent.source,
        };
        self.read_and_store(job, stored, storable, joined, body, writer, disk, permit)
            .await;
        Some(())
    }
}
