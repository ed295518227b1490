//! The end of a complete fill: whether the object is kept after purges
//! that raced it, and where: the near tier (an owner's answer in a
//! cluster), the memory tier, or the disk copy written through.

use std::sync::Arc;

use hoard_store::busy::BusyWriter;
use hoard_store::catalog::Raced;
use hoard_store::disk::writer::{Abandoned, DiskWriter};
use hoard_store::object::ObjectBody;
use hoard_store::InsertError;
use http::StatusCode;

use super::body::compact;
use super::coded::Target;
use super::decide::Storable;
use super::run::Stored;
use super::{FillEngine, FillJob};
use hoard_cluster::Source;

impl FillEngine {
    /// Publishes the disk copy, or (without one) inserts into the memory
    /// tier. True when stored.
    pub(super) async fn store_complete(
        &self,
        job: &FillJob,
        stored: Stored,
        mut storable: Storable,
        writer: &BusyWriter,
        held: Option<&bytes::Bytes>,
        disk: Option<DiskWriter>,
    ) -> bool {
        let status = stored.status;
        if stored.detached {
            // Invalidated or purged while it ran (the slot left the table).
            self.counters.inc(&self.counters.purge_raced_fills);
            tracing::info!(key = %job.key.text, "fill detached by an invalidation or purge; not stored");
            return false;
        }
        let catalog = self.store.catalog();
        // Read before the check below: the store itself checks purges after
        // this epoch under the catalogue's admission gate, so a purge at any
        // point from here to the object's insertion is seen.
        let checked = catalog.epoch();
        match catalog.purged_since(
            stored.purge_epoch,
            &job.key.text,
            &storable.headers,
            Raced::Hard,
        ) {
            Raced::No => {}
            Raced::Soft => storable.times = storable.times.made_stale(self.clock.now()),
            Raced::Hard => {
                // Requested before a purge that selects it: the clients that
                // asked got it, the cache does not keep it.
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge; not stored");
                return false;
            }
        }
        let storable = &storable;
        let near = match stored.source {
            Source::Origin | Source::Previous | Source::Parent => false,
            Source::Owner { keep: true }
                if catalog.purged_since(
                    stored.near_epoch,
                    &job.key.text,
                    &storable.headers,
                    Raced::Hard,
                ) != Raced::No =>
            {
                // Purged here lately: the owner may have answered before it
                // applied the same purge. Served, not kept.
                self.counters.inc(&self.counters.cluster_near_declined);
                tracing::info!(key = %job.key.text, "near copy not kept: a purge of it was applied here within the purge window");
                return false;
            }
            Source::Owner { keep: true } => true,
            Source::Owner { keep: false } => {
                // Not forwarded often enough for a copy here.
                self.counters.inc(&self.counters.cluster_near_declined);
                return false;
            }
        };
        // The body, when all of it is still in memory (not spilled), and
        // the coding it is stored in (for both tiers).
        let chunks = writer.chunks().map(|mut c| {
            c.extend(held.cloned());
            compact(c)
        });
        let len = chunks
            .as_ref()
            .map_or(u64::MAX, |c| c.iter().map(|c| c.len() as u64).sum());
        let plan = crate::encode::plan(
            &job.route,
            self.store.max_object(),
            status,
            &storable.headers,
            len,
        );
        if let Some(w) = disk {
            return self
                .store_on_disk(job, w, status, storable, chunks, plan, checked)
                .await;
        }
        // Spilled to a file that was given up: not all in memory, not stored.
        let Some(chunks) = chunks else {
            return false;
        };
        // A coded body is decoded before it is stored (a corrupt one or a
        // bomb never is); an identity one is coded after, off the fill's
        // way: its clients see the end of the body at once.
        let (parts, later) = match plan {
            Some(p) if p.stored != hoard_policy::encoding::Coding::Identity => {
                match self.encode_parts(&chunks, p).await {
                    Ok(parts) => (parts, None),
                    Err(e) => {
                        self.counters.inc(&self.counters.encode_decode_failures);
                        tracing::warn!(key = %job.key.text, error = %e, "origin body not stored");
                        return false;
                    }
                }
            }
            p => (Vec::new(), p.filter(|_| !near)),
        };
        let mut obj = storable.object(job, status, ObjectBody::from_chunks(chunks.clone()));
        if job.route.esi.is_some()
            && status == http::StatusCode::OK
            && crate::esi::is_page(&obj.headers)
        {
            // A page's template, parsed once as it is stored (hits read
            // no body and parse nothing; see `pipeline::esi`).
            let body = match chunks.as_slice() {
                [one] => one.clone(),
                many => bytes::Bytes::from(many.concat()),
            };
            let parsed = crate::esi::classify(&body).unwrap_or(crate::esi::Parsed::AsIs);
            let _ = obj.derived.set(Arc::new(parsed));
        }
        if !parts.is_empty() {
            obj = obj.with_parts(parts);
        }
        let inserted = if near {
            let obj = Arc::new(obj.into_near());
            self.store
                .insert_near(job.key.digest, &job.request_headers, obj, checked)
        } else {
            let obj = Arc::new(obj);
            let r = self
                .store
                .insert(job.key.digest, &job.request_headers, obj.clone(), checked);
            if let (Ok(()), Some(plan)) = (&r, later) {
                let target = Target::Memory {
                    primary: job.key.digest,
                    request: job.request_headers.clone(),
                    obj,
                };
                self.encode_later(target, chunks, plan);
            }
            r
        };
        match inserted {
            Ok(()) if near => {
                self.counters.inc(&self.counters.cluster_near_stored);
                true
            }
            Ok(()) => {
                self.counters.inc(&self.counters.objects_stored);
                true
            }
            Err(InsertError::TooLarge) => {
                self.counters.inc(&self.counters.objects_too_large);
                false
            }
            // No memory tier and no disk copy: not stored.
            Err(InsertError::NoTier) => false,
            Err(InsertError::Purged) => {
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge; not stored");
                false
            }
        }
    }

    /// Publishes the disk copy a fill wrote through. A body in a coding
    /// hoard knows is decoded first, and the object written again with
    /// its parts as one file (the copy written through is given up: a
    /// corrupt body or a bomb is never stored); an identity body that is
    /// worth coding is published at once and its parts added after (see
    /// [`Self::encode_later`]). `chunks` is the body when all of it is
    /// still in memory, `plan` its coding. True when stored.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn store_on_disk(
        &self,
        job: &FillJob,
        w: DiskWriter,
        status: StatusCode,
        storable: &Storable,
        chunks: Option<Vec<bytes::Bytes>>,
        plan: Option<crate::encode::Plan>,
        checked: u64,
    ) -> bool {
        let head =
            hoard_store::store::head_of(&storable.object(job, status, ObjectBody::default()));
        let zone = w.zone_number();
        let digests = (job.key.digest, storable.vary.variant(&job.request_headers));
        let (coded, later) = match plan {
            Some(p) if p.stored != hoard_policy::encoding::Coding::Identity => (Some(p), None),
            p => (None, p.zip(chunks.clone())),
        };
        let committed = match coded {
            Some(p) => {
                drop(w);
                let Some(chunks) = chunks else {
                    self.counters.inc(&self.counters.encode_skipped);
                    tracing::info!(key = %job.key.text, "coded body too large to decode in memory; not stored");
                    return false;
                };
                let parts = match self.encode_parts(&chunks, p).await {
                    Ok(parts) => parts,
                    Err(e) => {
                        self.counters.inc(&self.counters.encode_decode_failures);
                        tracing::warn!(key = %job.key.text, error = %e, "origin body not stored");
                        return false;
                    }
                };
                let store = self.store.clone();
                let head = head.clone();
                // Spawned: a client of the fill is never kept waiting by
                // the write (see the timeout below).
                let write = tokio::spawn(async move {
                    store
                        .store_with_parts(zone, digests, &head, &chunks, &parts, checked, None)
                        .await
                });
                tokio::time::timeout(job.upstream.cfg.read_timeout, write)
                    .await
                    .map(|r| r.unwrap_or(Err(Abandoned::Io)))
            }
            None => {
                let finish = self.store.finish_disk(w, job.key.digest, &head, checked);
                tokio::time::timeout(job.upstream.cfg.read_timeout, finish).await
            }
        };
        match committed {
            Ok(Ok(r)) => {
                self.counters.inc(&self.counters.objects_stored);
                if let Some((p, chunks)) = later {
                    let target = Target::Disk {
                        zone,
                        digests,
                        head: Box::new(head),
                        at: r,
                        checked,
                    };
                    self.encode_later(target, chunks, p);
                }
                true
            }
            Ok(Err(Abandoned::Purged)) => {
                self.counters.inc(&self.counters.purge_raced_fills);
                tracing::info!(key = %job.key.text, "fill raced a purge at its disk commit; not stored");
                false
            }
            Ok(Err(why)) => {
                tracing::info!(key = %job.key.text, why = why.as_str(), "disk copy given up");
                false
            }
            Err(_) => {
                // The commit goes on by itself and publishes the object
                // (or removes it): the clients are not kept waiting.
                tracing::warn!(key = %job.key.text, "disk stalled at the end of a fill; the copy completes in the background");
                false
            }
        }
    }
}
