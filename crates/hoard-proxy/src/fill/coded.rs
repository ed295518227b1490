//! The coded parts of a stored object (see [`crate::encode`]): made
//! before storing from a coded body (decoded first), or after storing
//! from an identity body, off the fill's way.

use std::sync::Arc;

use http::HeaderMap;

use super::FillEngine;

impl FillEngine {
    /// Makes the parts of an object just stored from identity bytes, on a
    /// background thread, and puts them in if the object is still the one
    /// stored (a purge or a newer version meanwhile wins): in the memory
    /// tier by replacing the object (`MemoryStore::update`), in a zone by
    /// writing the object again with its parts (`Store::store_with_parts`).
    pub(super) fn encode_later(
        &self,
        target: Target,
        chunks: Vec<bytes::Bytes>,
        plan: crate::encode::Plan,
    ) {
        let store = self.store.clone();
        let counters = self.counters.clone();
        tokio::spawn(async move {
            let body = chunks.clone();
            let made =
                crate::encode::in_background(move || crate::encode::make_parts(&body, &plan)).await;
            let made = match made {
                Some(Ok(made)) => made,
                Some(Err(_)) => return,
                None => {
                    counters.inc(&counters.encode_skipped);
                    return;
                }
            };
            count_made(&counters, &made);
            let put = match target {
                Target::Memory {
                    primary,
                    request,
                    obj,
                } => {
                    let same = obj.with_headers(
                        obj.headers.clone(),
                        obj.times,
                        obj.lifetime_source,
                        obj.rules,
                    );
                    let with = Arc::new(same.with_parts(made.parts));
                    store
                        .memory()
                        .is_some_and(|m| m.update(primary, &request, &obj, with))
                }
                Target::Disk {
                    zone,
                    digests,
                    head,
                    at,
                    checked,
                } => {
                    let r = store
                        .store_with_parts(
                            zone,
                            digests,
                            &head,
                            &chunks,
                            &made.parts,
                            checked,
                            Some(at),
                        )
                        .await;
                    if let Err(why) = r {
                        tracing::debug!(key = %head.key, why = why.as_str(), "parts not added to the disk copy");
                    }
                    r.is_ok()
                }
            };
            if put {
                counters.inc(&counters.encode_objects);
            }
        });
    }

    /// The parts of a coded body, made on a blocking thread before it is
    /// stored (see [`crate::encode`]).
    pub(super) async fn encode_parts(
        &self,
        chunks: &[bytes::Bytes],
        plan: crate::encode::Plan,
    ) -> Result<Vec<hoard_store::object::Part>, crate::encode::EncodeError> {
        let chunks = chunks.to_vec();
        let made = tokio::task::spawn_blocking(move || crate::encode::make_parts(&chunks, &plan))
            .await
            .unwrap_or_else(|e| {
                Err(crate::encode::EncodeError::Corrupt(format!(
                    "encoding task failed: {e}"
                )))
            })?;
        count_made(&self.counters, &made);
        self.counters.inc(&self.counters.encode_objects);
        Ok(made.parts)
    }
}

/// Where parts made after an object was stored go.
pub(super) enum Target {
    /// The memory tier's object `obj`.
    Memory {
        primary: hoard_policy::key::Digest,
        request: HeaderMap,
        obj: Arc<hoard_store::object::StoredObject>,
    },
    /// The zone copy `at` (written by the fill with `head`, under the
    /// purge epoch `checked`), written again with its parts.
    Disk {
        zone: usize,
        digests: (hoard_policy::key::Digest, hoard_policy::key::Digest),
        head: Box<hoard_store::disk::format::Head>,
        at: hoard_store::object::DiskRef,
        checked: u64,
    },
}

/// Counts what making parts took.
fn count_made(c: &hoard_metrics::counters::Counters, made: &crate::encode::Made) {
    use hoard_policy::encoding::Coding;
    if let Some((_, identity, _, _)) = made.stats.first() {
        c.add(&c.encode_identity_bytes, *identity);
    }
    for (coding, bytes_in, bytes_out, took) in &made.stats {
        c.add(&c.encode_bytes_in, *bytes_in);
        c.add(&c.encode_micros, took.as_micros() as u64);
        match coding {
            Coding::Br => c.add(&c.encode_bytes_br, *bytes_out),
            Coding::Zstd => c.add(&c.encode_bytes_zstd, *bytes_out),
            Coding::Gzip => c.add(&c.encode_bytes_gzip, *bytes_out),
            Coding::Identity => {}
        }
    }
}
