//! Counters: every one declared once, with its documentation.
//!
//! Hot-path increments are relaxed atomic adds. Tests read counters by name
//! ([`Counters::get`]) and wait for a value ([`Counters::wait_for`]) without
//! sleeping: increments wake waiters, but only while someone is waiting, so
//! the hot path pays one relaxed load when nobody is.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::sync::Notify;

macro_rules! counters {
    ($( $(#[doc = $doc:literal])+ $name:ident ),* $(,)?) => {
        /// Every counter of the proxy. See the module docs.
        #[derive(Debug, Default)]
        pub struct Counters {
            $( $(#[doc = $doc])+ pub $name: AtomicU64, )*
            waiters: AtomicUsize,
            notify: Notify,
        }

        /// Names and one-line docs of all counters, in declaration order.
        pub const COUNTERS: &[(&str, &str)] = &[ $( (stringify!($name), concat!($($doc),+)) ),* ];

        impl Counters {
            fn cell(&self, name: &str) -> Option<&AtomicU64> {
                match name {
                    $( stringify!($name) => Some(&self.$name), )*
                    _ => None,
                }
            }
        }
    };
}

counters! {
    /// Requests received from clients.
    requests_total,
    /// Requests answered from cache without contacting the origin.
    cache_hit,
    /// HTTP/1.x answers from a stored object (hits, and answers after a revalidation or from
    /// a stale copy) that sent its stored fields as lines encoded once per object (per answer
    /// in a disk zone, whose objects are read afresh) instead of copying the stored map (see
    /// `pipeline::hit`).
    cache_hit_fields_encoded,
    /// Cacheable requests with nothing usable stored (uri-miss or vary-miss).
    cache_miss,
    /// Stored responses that had to be validated with the origin.
    cache_revalidate,
    /// Revalidations answered 304 Not Modified (stored object refreshed).
    cache_revalidated_304,
    /// Revalidations answered with a 5xx or not at all; the stored copy was kept.
    revalidation_failed,
    /// Stale responses served because the origin failed or is known down (stale-if-error).
    stale_if_error_served,
    /// Requests passed to the origin without cache lookup (method or route).
    cache_pass,
    /// Responses fetched for the cache that turned out not storable.
    not_storable,
    /// Objects stored (new or replaced).
    objects_stored,
    /// Objects that grew past the largest storable size while being filled.
    objects_too_large,
    /// Stored objects removed by unsafe methods (RFC 9111 §4.4).
    invalidations,
    /// `only-if-cached` requests answered 504 (nothing usable stored).
    only_if_cached_miss,
    /// Requests sent to origin servers.
    origin_requests,
    /// Watchers of `GET /trace` that started.
    trace_watchers,
    /// Health check probes sent (`health_check`; not in `origin_requests`).
    health_probes,
    /// Health check probes that failed (no answer in time, or another status).
    health_probe_failures,
    /// New TCP connections to origin servers.
    origin_connections_opened,
    /// Of those, connections that speak HTTP/1.1.
    origin_connections_h1,
    /// Of those, connections that speak HTTP/2 (`protocol = "h2"`, or
    /// `"auto"` and the server chose `h2`).
    origin_connections_h2,
    /// HTTP/2 requests an origin refused before processing them
    /// (`REFUSED_STREAM`, or above the last stream of a `GOAWAY`); each was
    /// retried on another connection or server.
    origin_streams_refused,
    /// Requests sent on a reused idle origin connection (or as a stream on
    /// an open HTTP/2 connection).
    origin_connections_reused,
    /// Requests retried once because a reused connection proved dead.
    origin_retries,
    /// Origin connect failures (answered 502 or 504 unless another server answered).
    origin_connect_errors,
    /// Requests tried on the next server of their upstream after a server
    /// failed (failover: `retry_on`, `tries`, `backup`); one per extra try.
    origin_failovers,
    /// Origin TLS connections that made a full handshake.
    origin_tls_handshakes,
    /// Origin TLS connections that resumed an earlier session.
    origin_tls_resumed,
    /// Origin TLS connections that failed (certificate, name, handshake).
    origin_tls_errors,
    /// Upgrade tunnels opened (a `101` from the origin).
    tunnels_opened,
    /// Of those, WebSockets a client opened over HTTP/2 (extended
    /// CONNECT, RFC 8441).
    tunnels_opened_http2,
    /// Upgrade tunnels ended (either side closed).
    tunnels_closed,
    /// Bytes from clients to origins through ended tunnels.
    tunnel_bytes_to_origin,
    /// Bytes from origins to clients through ended tunnels.
    tunnel_bytes_to_client,
    /// Client connections closed for a missing or invalid PROXY protocol
    /// header, or from a peer not in `proxy_protocol_from`.
    proxy_protocol_refused,
    /// Origin timeouts waiting for response headers (answered 504).
    origin_timeouts,
    /// Origin responses that failed mid-body.
    origin_body_errors,
    /// Origin responses refused for untrustworthy framing (Transfer-Encoding
    /// with Content-Length, a 204 with a body); answered 502, connection dropped.
    origin_broken_responses,
    /// Fills started (origin responses being written into the cache).
    fills_started,
    /// Fills that completed their body.
    fills_completed,
    /// Fills that ended without a complete body (nothing stored).
    fills_aborted,
    /// Fill bodies whose source (an origin server, a cluster owner) dropped
    /// after the head and that went on from the next choice with `Range`
    /// and `If-Range`: their readers saw one uncut body.
    fill_resumed,
    /// Fill bodies whose source dropped after the head and could not go on
    /// (no strong validator, the object changed, no answer): their readers
    /// were cut and nothing was stored.
    fill_cut,
    /// Fills cancelled at shutdown after the shutdown timeout (waiters and readers were told).
    fills_cancelled,
    /// Requests rejected with a 4xx generated by hoard.
    client_errors,
    /// Listeners closed by a shutdown (their connections then drain).
    listeners_closed,
    /// Client connections accepted and served.
    connections_accepted,
    /// Of those, QUIC (HTTP/3) connections.
    quic_connections,
    /// QUIC connections that ended.
    quic_connections_closed,
    /// Requests that came over HTTP/1.x.
    requests_http1,
    /// Requests that came over HTTP/2.
    requests_http2,
    /// Requests that came over HTTP/3.
    requests_http3,
    /// ACME orders started (a first certificate or a renewal).
    acme_orders,
    /// Certificates obtained over ACME.
    acme_certificates_issued,
    /// ACME orders that failed (retried later; the certificate in hand is kept).
    acme_failures,
    /// HTTP-01 challenge requests answered by hoard itself.
    acme_challenges_answered,
    /// ACME certificates taken from the cluster's bus (kept there by the
    /// member that ordered them) instead of ordered or fetched.
    acme_certificates_from_bus,
    /// Client connections closed at once: `max_connections` were open.
    connections_refused,
    /// Connections that had sent nothing, closed to make room for a new one
    /// when `max_connections` were open.
    connections_reclaimed,
    /// Client connections closed because they sent nothing within `header_read_timeout`.
    connections_silent,
    /// Client connections dropped because a request head begun was not
    /// finished within `header_read_timeout`.
    connections_head_timeout,
    /// Keep-alive connections closed after `keep_alive_timeout` without a request.
    connections_idle_closed,
    /// HTTP/1.x connections parked between two requests: quiet for a
    /// watchdog tick, their buffers were freed until the next byte.
    connections_parked,
    /// Connections dropped because the client stopped reading for `send_timeout`.
    connections_send_timeout,
    /// Connections sent GOAWAY for resetting more than `max_resets` requests.
    connections_reset_flood,
    /// Request bodies that stopped arriving for `body_read_timeout` (408).
    client_body_timeouts,
    /// Misses sent to the origin uncached (or 503 for a slice) because the
    /// in-flight table held `cache.max_fills`.
    fills_refused,
    /// Requests a route's bypass rule sent to the origin without a lookup.
    bypass_rule_matches,
    /// Requests answered with a route's configured redirect.
    edge_redirects,
    /// Requests answered with a route's fixed answer (`respond`).
    edge_responds,
    /// Requests answered by a Proxy-Wasm filter (`proxy_send_local_response`).
    filter_answers,
    /// HTTP calls Proxy-Wasm filters sent (`proxy_http_call`).
    filter_calls,
    /// Root context callbacks of Proxy-Wasm filters (ticks, shared queues,
    /// the answers to their HTTP calls).
    filter_root_callbacks,
    /// Requests failed 500 by a Proxy-Wasm filter (a trap, a spent budget,
    /// a VM that would not start); logged with the filter's name.
    filter_failures,
    /// Pages assembled from ESI fragments (`esi` routes).
    esi_pages,
    /// ESI includes fetched (through the pipeline: each fragment is a
    /// request of its own route, cached under its own key).
    esi_fragments,
    /// ESI includes that failed (after their `alt`): dropped, answered by
    /// an `esi:except`, or the page cut (`on_error = "abort"`).
    esi_fragment_failures,
    /// Pages on `esi` routes whose markup is malformed: served as they
    /// are, never half processed.
    esi_malformed,
    /// Requests refused 403 by a route's `allow`/`deny`.
    edge_access_denied,
    /// Requests refused 401 by a route's `basic_auth` (no or wrong credentials).
    edge_auth_failed,
    /// Requests refused 429 by a route's `limit` rate.
    edge_rate_limited,
    /// Requests refused 429 by a route's `limit_connections`.
    edge_connections_limited,
    /// Requests refused 403 by a route's `signed_urls` (no, a repeated or a wrong signature or expiry).
    edge_signature_refused,
    /// Requests refused 410 by a route's `signed_urls`: a valid signature past its expiry.
    edge_link_expired,
    /// Fills sent to their key's owner, another cluster member, instead of the origin.
    cluster_forwarded,
    /// Fills whose owner could not be reached (refused, connect timeout, hop dropped before
    /// the response head) and went to the key's next choice.
    cluster_forward_retries,
    /// Requests received from another member (a valid peer field): never forwarded again.
    cluster_peer_requests,
    /// Peer fields refused (forged, stale, unknown member) and removed; the request was
    /// routed like any client's.
    cluster_peer_refused,
    /// Probes from other members answered (see `cluster::probe`).
    cluster_probes_answered,
    /// Times this node found it had stood still past the cluster grace period and fenced what
    /// it had stored (revalidated before it is served as fresh).
    cluster_fenced,
    /// Times a member was found down by its probes (frozen or gone).
    cluster_members_down,
    /// Purges a member did not acknowledge (timeout or unreachable), one per member and purge.
    cluster_purge_not_acked,
    /// Fills this node sent to the origin in a cluster: as the key's owner, for a peer, or as
    /// the next choice of an unreachable owner.
    cluster_owner_fills,
    /// Copies of other members' objects kept in the near tier.
    cluster_near_stored,
    /// Answers from owners not kept here: the key was not forwarded often enough yet.
    cluster_near_declined,
    /// Hits on near copies (objects another member owns).
    cluster_near_hits,
    /// Entries of the cluster's invalidation log read and applied (or found to be this node's own).
    cluster_bus_applied,
    /// Entries applied while this node was catching up (after a start or a loss of the bus).
    cluster_bus_replayed,
    /// Times the log no longer reached this node's position (trimmed, or lost with its Redis):
    /// what it stored before was fenced.
    cluster_bus_generation_bumps,
    /// Times the bus was lost past the grace period (stored objects revalidated until caught up).
    cluster_bus_lost,
    /// Times this node read the log to its end after a start or a loss of the bus (from then
    /// on its stored objects are served again).
    cluster_bus_caught_up,
    /// Peer requests answered as misses: the sending member had applied purges this node had
    /// not read yet (after waiting briefly for its reader).
    cluster_bus_behind_misses,
    /// Members that joined this node's view (discovered, probed and caught up with the log).
    cluster_members_joined,
    /// Probes of a discovered address that did not make it a member yet: no answer, or behind
    /// this node in the invalidation log (asked again at the next refresh).
    cluster_members_not_ready,
    /// Members that left this node's view (no longer discovered).
    cluster_members_left,
    /// Failed resolutions of the member list (DNS, Redis); the view was kept.
    cluster_discovery_errors,
    /// Resolutions of the member list that succeeded.
    cluster_discovery_reads,
    /// Misses this node owns that its previous owner answered while this node ramped up.
    cluster_rampup_hits,
    /// Misses asked of the previous owner while ramping up that it did not hold (then fetched).
    cluster_rampup_misses,
    /// Misses this node owns that a parent of the tier answered.
    cluster_parent_fills,
    /// Parents that could not be reached for a miss (next parent, or the origin).
    cluster_parent_retries,
    /// Milliseconds this node spent unsure of the log (revalidating what it stored).
    cluster_fenced_ms,
    /// Objects stored with parts in other content codings (made once, off the request path).
    encode_objects,
    /// Identity bytes of the objects encoded, once per coding made.
    encode_bytes_in,
    /// Identity bytes of the objects encoded, once per object.
    encode_identity_bytes,
    /// Bytes of the br parts made.
    encode_bytes_br,
    /// Bytes of the zstd parts made.
    encode_bytes_zstd,
    /// Bytes of the gzip parts made.
    encode_bytes_gzip,
    /// Microseconds spent making parts (on blocking threads).
    encode_micros,
    /// Objects stored without parts: the encoding thread's queue was full.
    encode_skipped,
    /// Coded origin bodies that did not decode (corrupt, truncated, or past the decoding
    /// limit): not stored.
    encode_decode_failures,
    /// Hits served from a br part.
    served_br,
    /// Hits served from a zstd part.
    served_zstd,
    /// Hits served from a gzip part.
    served_gzip,
    /// Hits served decoded, from an identity part (the origin sent a coding the client does not
    /// accept).
    served_decoded,
    /// Responses of a fill decoded as they streamed, for a client that does not accept the
    /// coding the origin sent (see `decode`).
    stream_decoded,
    /// Requests a route's no-store rule kept from being stored.
    no_store_rule_matches,
    /// Client connections that ended (their permit returned).
    connections_closed,
    /// Requests that waited for another request's fill (coalesced).
    fill_waiters_total,
    /// Waits for a fill that timed out (a follower after the route's coalesce timeout, or a
    /// leader after its safety limit); the request went to the origin uncached.
    fill_wait_timeouts,
    /// Requests that found their fill ended without an outcome (task cancelled or panicked).
    fill_dangling,
    /// Requests sent straight to the origin because their key is marked hit-for-pass.
    hit_for_pass,
    /// Keys marked hit-for-pass after an uncacheable response.
    hit_for_pass_marks,
    /// Background refreshes started (stale-while-revalidate).
    background_refreshes,
    /// Stale responses served while a background refresh runs (stale-while-revalidate).
    stale_while_revalidate_served,
    /// Lookups answered from a disk zone.
    disk_hits,
    /// Objects read from disk and admitted to the memory tier (second disk hit).
    memory_promotions,
    /// Objects published in a disk zone.
    disk_stored,
    /// Disk objects evicted to keep a zone under its max_size (or min_free).
    disk_evicted_size,
    /// Evicted objects' files taken over by new objects (overwritten in place, not unlinked).
    disk_files_recycled,
    /// Disk objects removed after `inactive` without a request.
    disk_evicted_inactive,
    /// Files the disk loader looked at.
    disk_load_scanned,
    /// Objects the disk loader indexed.
    disk_loaded,
    /// Disk zones whose loader finished.
    disk_load_done,
    /// Disk files removed: not a hoard object, or a torn prefix.
    disk_rejected_bad_prefix,
    /// Disk files removed: written by another format version.
    disk_rejected_version,
    /// Disk files removed: no intact head.
    disk_rejected_bad_head,
    /// Disk files removed: shorter than their prefix says.
    disk_rejected_truncated,
    /// Disk files removed: a body block or the block table failed its checksum.
    disk_rejected_checksum,
    /// Disk files removed: temporary files of writes that never completed.
    disk_rejected_temporary,
    /// Disk files removed: an intact head that names another key than the
    /// file's prefix (a planted or misplaced file).
    disk_rejected_foreign_head,
    /// Disk operations that failed (I/O errors, no space).
    disk_errors,
    /// Disk files that could not be unlinked, recorded as tombstones so that a restart does not index them.
    disk_tombstones,
    /// Tombstones dropped by the loader once their files were removed.
    disk_tombstones_cleared,
    /// Files and directories synced to the device (`durability = "power"`).
    disk_syncs,
    /// 304s that refreshed nothing because a purge of their key came after their request left.
    revalidations_purged,
    /// Range requests answered with 206 from a stored object.
    range_hits,
    /// Range requests answered with 206 from a fill in progress (cold or joining).
    range_misses,
    /// Range requests answered with 416 (no satisfiable range).
    range_not_satisfiable,
    /// Range requests answered with the whole response (If-Range mismatch, length not known yet, too many ranges).
    range_ignored,
    /// Origin 206 responses stored as an object's partial copy (RFC 9111 §3.3).
    partial_stored,
    /// Range requests answered with 206 from a stored partial copy.
    partial_hits,
    /// Stored partial copies completed: the rest fetched with `Range` and joined to them (RFC 9111 §3.4).
    partial_completed,
    /// Completions whose answer did not match the partial copy (another version): the copy was dropped and the whole object fetched.
    partial_mismatches,
    /// Slice fills started (slice mode: one origin request with `Range` per slice).
    slice_fills,
    /// Slice fills started ahead of the slices a request needs.
    slice_prefetches,
    /// Slices whose validator or length differed from the object's other slices; the object's slices were dropped.
    slice_validator_mismatches,
    /// Short ranges far ahead of their slice's fill, fetched from the origin directly (uncached) instead of waiting for the fill.
    slice_direct_fetches,
    /// Slice requests the origin answered with the whole object (it ignored `Range`); stored whole.
    slice_range_ignored,
    /// Body bytes of disk hits sent with sendfile (plain HTTP/1.1, page-cached, verified file).
    disk_sendfile_bytes,
    /// Fills whose disk copy was given up (no room, too large, error); the client still got the body.
    disk_writes_abandoned,
    /// Times a disk directory was taken out of service.
    disk_dirs_offline,
    /// Times a disk directory came back into service.
    disk_dirs_online,
    /// Purges of one URL (admin API, `PURGE` method, `hoard purge`).
    purges_url,
    /// Purges by URL prefix.
    purges_prefix,
    /// Purges of a host.
    purges_host,
    /// Purges by tag (`Surrogate-Key`, `Cache-Tag`).
    purges_tag,
    /// Purges that marked objects stale instead of removing them (soft).
    purges_soft,
    /// Purges by a regular expression over the path (bans added; admin API, `hoard purge --regex`).
    purges_regex,
    /// Regex purges refused because `admin.max_pending_bans` bans were pending (a member's was applied at once instead).
    bans_refused,
    /// Objects a pending ban selected at lookup (removed, or made stale by a soft ban).
    bans_lookup_removed,
    /// Objects a ban's background sweep removed or made stale.
    bans_swept_objects,
    /// Bans whose sweep finished (and that were dropped from the list).
    bans_swept,
    /// Objects removed or marked stale by purges.
    purged_objects,
    /// Fills not stored because a purge or an invalidation (unsafe request) that selects them came while they ran.
    purge_raced_fills,
    /// `PURGE` requests refused (method off, or client not in `purge_allow`).
    purges_refused,
    /// Admin API requests refused for a missing or wrong token.
    admin_unauthorized,
    /// Access log lines dropped because the writer fell behind.
    access_log_dropped,
    /// Access log lines written (counted after they are flushed).
    access_log_lines,
    /// Samples the admin listener took for `/status` rates (one a second).
    status_samples,
}

impl hoard_store::StoreEvents for Counters {
    fn event(&self, zone: &str, event: hoard_store::StoreEvent) {
        use hoard_store::disk::format::Reject;
        use hoard_store::StoreEvent as E;
        tracing::trace!(zone, event = event.as_str(), "store event");
        let c = match event {
            E::DiskHit => &self.disk_hits,
            E::MemoryPromotion => &self.memory_promotions,
            E::DiskStored => &self.disk_stored,
            E::EvictedSize => &self.disk_evicted_size,
            E::DiskRecycled => &self.disk_files_recycled,
            E::EvictedInactive => &self.disk_evicted_inactive,
            E::LoadScanned => &self.disk_load_scanned,
            E::Loaded => &self.disk_loaded,
            E::LoadDone => &self.disk_load_done,
            E::Rejected(Reject::BadPrefix) => &self.disk_rejected_bad_prefix,
            E::Rejected(Reject::Version) => &self.disk_rejected_version,
            E::Rejected(Reject::BadHead) => &self.disk_rejected_bad_head,
            E::Rejected(Reject::Truncated) => &self.disk_rejected_truncated,
            E::Rejected(Reject::Checksum) => &self.disk_rejected_checksum,
            E::Rejected(Reject::Temporary) => &self.disk_rejected_temporary,
            E::Rejected(Reject::ForeignHead) => &self.disk_rejected_foreign_head,
            E::DiskError => &self.disk_errors,
            E::WriteAbandoned => &self.disk_writes_abandoned,
            E::DirOffline => &self.disk_dirs_offline,
            E::DirOnline => &self.disk_dirs_online,
            E::BannedAtLookup => &self.bans_lookup_removed,
            E::BannedBySweep => &self.bans_swept_objects,
            E::BanSwept => &self.bans_swept,
            E::Tombstoned => &self.disk_tombstones,
            E::TombstoneCleared => &self.disk_tombstones_cleared,
            E::Synced => &self.disk_syncs,
        };
        self.inc(c);
    }
}

impl Counters {
    /// Adds one to a counter.
    #[inline]
    pub fn inc(&self, c: &AtomicU64) {
        self.add(c, 1);
    }

    /// Adds `n` to a counter.
    #[inline]
    pub fn add(&self, c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// The value of a counter by name.
    ///
    /// # Panics
    /// If no counter has that name (a test typo should fail loudly).
    pub fn get(&self, name: &str) -> u64 {
        self.cell(name)
            .unwrap_or_else(|| panic!("no counter named {name:?}"))
            .load(Ordering::Relaxed)
    }

    /// Waits until counter `name` reaches at least `value`.
    pub async fn wait_for(&self, name: &str, value: u64) {
        self.waiters.fetch_add(1, Ordering::AcqRel);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.get(name) >= value {
                break;
            }
            notified.await;
        }
        self.waiters.fetch_sub(1, Ordering::AcqRel);
    }

    /// All counters with their values, in declaration order.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        COUNTERS.iter().map(|(n, _)| (*n, self.get(n))).collect()
    }
}
