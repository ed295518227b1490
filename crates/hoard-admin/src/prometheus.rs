//! `GET /metrics`: the Prometheus text exposition format, version 0.0.4.
//!
//! Every metric family is declared once in [`FAMILIES`] with its type and
//! help text; [`render`] writes the samples of each. Label values are
//! bounded: outcomes, results, tiers, and the names of configured
//! upstreams, servers and zones, never URLs. Counters that have no family of
//! their own are exported as `hoard_events_total{event="NAME"}` (the names
//! and meanings of `hoard_metrics::counters`).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use hoard_policy::cache_status::Outcome;
use hoard_store::disk::DiskZone;

use super::Admin;
use hoard_metrics::counters::COUNTERS;
use hoard_metrics::metrics::{Histogram, OriginResult, UpstreamStats, BUCKETS};

/// A metric family: name, type, help.
#[derive(Debug)]
pub struct Family {
    /// Metric name.
    pub name: &'static str,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    /// One line of help.
    pub help: &'static str,
}

macro_rules! families {
    ($( $id:ident = $name:literal $kind:literal $help:literal ),* $(,)?) => {
        $( const $id: &Family = &Family { name: $name, kind: $kind, help: $help }; )*
        /// Every family hoard exports, in output order.
        pub const FAMILIES: &[&Family] = &[ $( $id ),* ];
    };
}

families! {
    REQUESTS = "hoard_requests_total" "counter" "Client requests by cache outcome (the outcome Cache-Status reports).",
    TTFB = "hoard_ttfb_seconds" "histogram" "Time from a request's head to its response head, by cache outcome.",
    CLIENT_BYTES = "hoard_client_bytes_total" "counter" "Response body bytes sent to clients.",
    ORIGIN_REQUESTS = "hoard_origin_requests_total" "counter" "Requests sent to origins, by upstream and result (status class, error, timeout).",
    ORIGIN_SECONDS = "hoard_origin_seconds" "histogram" "Time from sending a request to an origin to its response head, by upstream.",
    ORIGIN_BYTES = "hoard_origin_bytes_total" "counter" "Response body bytes received from origins, by upstream.",
    ORIGIN_CONNECTIONS = "hoard_origin_connections_total" "counter" "Connections opened to origins, by upstream and protocol (h1, h2).",
    UPSTREAM_UP = "hoard_upstream_up" "gauge" "1 when an origin server is considered up, 0 when down (out of service, draining, or down after failed requests).",
    UPSTREAM_PROBES = "hoard_upstream_probes_passed" "gauge" "Health check probes an origin server passed among the last `window` (servers of upstreams with a health_check).",
    FILLS = "hoard_fills_in_flight" "gauge" "Fills (origin responses being written into the cache) running now.",
    WAITERS = "hoard_coalesced_waiters_total" "counter" "Requests that waited for another request's fill instead of going to the origin.",
    REFRESHES = "hoard_background_refreshes_total" "counter" "Background refreshes started (stale-while-revalidate).",
    STALE = "hoard_stale_served_total" "counter" "Stale responses served, by reason.",
    EVICTIONS = "hoard_evictions_total" "counter" "Objects evicted, by tier and cause.",
    OBJECTS = "hoard_objects" "gauge" "Entries held, by tier (memory entries include variant indexes).",
    BYTES = "hoard_bytes" "gauge" "Bytes held, by tier.",
    CAPACITY = "hoard_capacity_bytes" "gauge" "Byte limit, by tier.",
    PURGES = "hoard_purges_total" "counter" "Purges, by kind.",
    PURGED = "hoard_purged_objects_total" "counter" "Objects removed or made stale by purges.",
    CATALOGUE = "hoard_catalogue_keys" "gauge" "Keys in the purge catalogue.",
    BANS = "hoard_bans_pending" "gauge" "Regex purges (bans) whose background sweep is still running.",
    CLUSTER_UP = "hoard_cluster_member_up" "gauge" "In a cluster: 1 when a member is considered up (this node always is), 0 when down.",
    CLUSTER_SHARE = "hoard_cluster_member_share" "gauge" "In a cluster: the share of keys a member owns now (0 to 1; 0 when it is left out as down).",
    BUS_BEHIND = "hoard_cluster_bus_behind_ms" "gauge" "With a cluster bus: how far each member's applied log position is behind the newest position known here (milliseconds of entry ids).",
    BUS_BEHIND_ENTRIES = "hoard_cluster_bus_behind_entries" "gauge" "With a cluster bus: how many purge entries each member has not applied yet that this node has (counted among the last 10,000 entries read).",
    NEAR_BYTES = "hoard_cluster_near_bytes" "gauge" "In a cluster: bytes held by the near tier (copies of objects other members own).",
    CLUSTER_PURGE_SECONDS = "hoard_cluster_purge_seconds" "histogram" "In a cluster: time from a purge applied here to the last member's acknowledgement (or the purge timeout).",
    RESIDENT = "hoard_process_resident_bytes" "gauge" "The process's resident memory (RSS, VmRSS of /proc/self/status).",
    MEMORY_PARTS = "hoard_memory_bytes" "gauge" "The resident memory by part: memory_tier, near_tier, catalogue and disk_index (estimated), working (the rest of the heap hoard holds: connections' buffers, fills in flight, tables), allocator_free (pages kept for reuse), program (code, stacks).",
    UPTIME = "hoard_uptime_seconds" "gauge" "Seconds since the admin listener started.",
    EVENTS = "hoard_events_total" "counter" "Internal events by name (see docs/operations.md).",
    FILTER_COUNTER = "hoard_filter_events_total" "counter" "Counters a Proxy-Wasm filter defined (proxy_define_metric), by filter and name (docs/filters.md).",
    FILTER_GAUGE = "hoard_filter_value" "gauge" "Gauges a Proxy-Wasm filter defined, by filter and name.",
    FILTER_HISTOGRAM = "hoard_filter_observed" "summary" "Histograms a Proxy-Wasm filter defined, by filter and name: the sum and count of the values recorded.",
    FILTER_CONTEXTS = "hoard_filter_contexts_total" "counter" "HTTP contexts a Proxy-Wasm filter opened (requests; fetches for origin filters), by filter; a reload starts again.",
    FILTER_VM_STARTS = "hoard_filter_vm_starts_total" "counter" "VMs a Proxy-Wasm filter started (one per worker, and again after a failure), by filter.",
    FILTER_FAILURES = "hoard_filter_failures_total" "counter" "Failures of a Proxy-Wasm filter by filter and kind: trap, budget, start, lost, body-limit.",
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Out(String);

impl Out {
    fn head(&mut self, f: &Family) {
        let _ = writeln!(self.0, "# HELP {} {}", f.name, f.help);
        let _ = writeln!(self.0, "# TYPE {} {}", f.name, f.kind);
    }

    fn sample(&mut self, f: &Family, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.named(f.name, labels, value);
    }

    fn named(&mut self, name: &str, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.0.push_str(name);
        if !labels.is_empty() {
            self.0.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.0.push(',');
                }
                let _ = write!(self.0, "{k}=\"{}\"", esc(v));
            }
            self.0.push('}');
        }
        let _ = writeln!(self.0, " {value}");
    }

    fn histogram(&mut self, f: &Family, labels: &[(&str, &str)], h: &Histogram) {
        let (cumulative, sum) = h.snapshot();
        let bucket = format!("{}_bucket", f.name);
        for (i, count) in cumulative.iter().enumerate() {
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let mut l = labels.to_vec();
            l.push(("le", &le));
            self.named(&bucket, &l, count);
        }
        self.named(&format!("{}_sum", f.name), labels, sum);
        self.named(
            &format!("{}_count", f.name),
            labels,
            cumulative.last().copied().unwrap_or(0),
        );
    }
}

/// The exposition text.
pub fn render(admin: &Admin) -> String {
    let p = &admin.pipeline;
    let c = &p.counters;
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut o = Out(String::with_capacity(16 << 10));

    o.head(REQUESTS);
    for oc in Outcome::ALL {
        o.sample(REQUESTS, &[("cache", oc.as_str())], p.metrics.requests(oc));
    }
    o.head(TTFB);
    for oc in Outcome::ALL {
        o.histogram(TTFB, &[("cache", oc.as_str())], p.metrics.ttfb(oc));
    }
    o.head(CLIENT_BYTES);
    o.sample(CLIENT_BYTES, &[], p.metrics.client_bytes());

    let run = p.run();
    o.head(ORIGIN_REQUESTS);
    for u in &run.upstreams {
        for r in OriginResult::ALL {
            let labels = [("upstream", u.cfg.name.as_str()), ("result", r.as_str())];
            o.sample(ORIGIN_REQUESTS, &labels, u.stats.result(r));
        }
    }
    o.head(ORIGIN_SECONDS);
    for u in &run.upstreams {
        o.histogram(
            ORIGIN_SECONDS,
            &[("upstream", &u.cfg.name)],
            &u.stats.seconds,
        );
    }
    o.head(ORIGIN_BYTES);
    for u in &run.upstreams {
        o.sample(
            ORIGIN_BYTES,
            &[("upstream", &u.cfg.name)],
            get(&u.stats.bytes),
        );
    }
    o.head(ORIGIN_CONNECTIONS);
    for u in &run.upstreams {
        for (k, protocol) in UpstreamStats::PROTOCOLS.iter().enumerate() {
            let labels = [("upstream", u.cfg.name.as_str()), ("protocol", protocol)];
            o.sample(ORIGIN_CONNECTIONS, &labels, get(&u.stats.connections[k]));
        }
    }
    o.head(UPSTREAM_UP);
    for u in &run.upstreams {
        for (server, up) in u.servers_up() {
            let labels = [("upstream", u.cfg.name.as_str()), ("server", server)];
            o.sample(UPSTREAM_UP, &labels, u8::from(up));
        }
    }
    o.head(UPSTREAM_PROBES);
    for u in &run.upstreams {
        for s in u.server_states() {
            if let Some(w) = s.probes {
                let labels = [("upstream", u.cfg.name.as_str()), ("server", s.address)];
                o.sample(UPSTREAM_PROBES, &labels, w.passed());
            }
        }
    }

    o.head(CLUSTER_UP);
    if let Some(cluster) = &p.cluster {
        for m in cluster.members() {
            o.sample(CLUSTER_UP, &[("member", &m.name)], u8::from(m.up));
        }
    }
    o.head(CLUSTER_SHARE);
    if let Some(cluster) = &p.cluster {
        for m in cluster.members() {
            o.sample(CLUSTER_SHARE, &[("member", &m.name)], m.share);
        }
    }
    o.head(BUS_BEHIND);
    if let Some(bus) = p.cluster.as_ref().and_then(|c| c.bus.as_ref()) {
        let mut positions: Vec<_> = bus.positions().into_iter().collect();
        positions.sort();
        let newest = positions.iter().map(|(_, at)| at.0).max().unwrap_or(0);
        for (member, at) in &positions {
            o.sample(
                BUS_BEHIND,
                &[("member", member)],
                newest.saturating_sub(at.0),
            );
        }
    }
    o.head(BUS_BEHIND_ENTRIES);
    if let Some(bus) = p.cluster.as_ref().and_then(|c| c.bus.as_ref()) {
        let mut positions: Vec<_> = bus.positions().into_iter().collect();
        positions.sort();
        for (member, at) in &positions {
            o.sample(
                BUS_BEHIND_ENTRIES,
                &[("member", member)],
                bus.entries_after(*at),
            );
        }
    }
    o.head(NEAR_BYTES);
    if let Some(near) = p.store.near() {
        o.sample(NEAR_BYTES, &[], near.weight());
    }
    let process = super::process_memory::ProcessMemory::read(p);
    o.head(RESIDENT);
    o.sample(RESIDENT, &[], process.resident);
    o.head(MEMORY_PARTS);
    for (part, bytes) in process.parts() {
        o.sample(MEMORY_PARTS, &[("part", part)], bytes);
    }
    o.head(CLUSTER_PURGE_SECONDS);
    if p.cluster.is_some() {
        o.histogram(CLUSTER_PURGE_SECONDS, &[], &p.metrics.purge_fanout);
    }

    o.head(FILLS);
    o.sample(FILLS, &[], p.fills.in_flight());
    o.head(WAITERS);
    o.sample(WAITERS, &[], get(&c.fill_waiters_total));
    o.head(REFRESHES);
    o.sample(REFRESHES, &[], get(&c.background_refreshes));
    o.head(STALE);
    o.sample(
        STALE,
        &[("reason", "stale-while-revalidate")],
        get(&c.stale_while_revalidate_served),
    );
    o.sample(
        STALE,
        &[("reason", "stale-if-error")],
        get(&c.stale_if_error_served),
    );

    let memory = p.store.memory();
    o.head(EVICTIONS);
    if let Some(m) = memory {
        let evicted = m.stats().evicted.load(Ordering::Relaxed);
        o.sample(EVICTIONS, &[("tier", "memory"), ("cause", "size")], evicted);
    }
    if p.store.has_zones() {
        o.sample(
            EVICTIONS,
            &[("tier", "disk"), ("cause", "size")],
            get(&c.disk_evicted_size),
        );
        let inactive = get(&c.disk_evicted_inactive);
        o.sample(
            EVICTIONS,
            &[("tier", "disk"), ("cause", "inactive")],
            inactive,
        );
    }
    type ZoneFigure = fn(&DiskZone) -> u64;
    let tiers: [(&Family, Option<u64>, ZoneFigure); 3] = [
        (OBJECTS, memory.map(|m| m.len() as u64), |z| z.objects()),
        (BYTES, memory.map(|m| m.weight()), |z| z.used()),
        (CAPACITY, memory.map(|m| m.capacity()), |z| {
            z.config().max_size
        }),
    ];
    for (f, mem, zone) in tiers {
        o.head(f);
        if let Some(v) = mem {
            o.sample(f, &[("tier", "memory")], v);
        }
        for z in p.store.zones() {
            o.sample(f, &[("tier", "disk"), ("zone", z.name())], zone(z));
        }
    }

    o.head(PURGES);
    for (kind, a) in [
        ("url", &c.purges_url),
        ("prefix", &c.purges_prefix),
        ("host", &c.purges_host),
        ("tag", &c.purges_tag),
        ("regex", &c.purges_regex),
    ] {
        o.sample(PURGES, &[("kind", kind)], get(a));
    }
    o.head(PURGED);
    o.sample(PURGED, &[], get(&c.purged_objects));
    o.head(CATALOGUE);
    o.sample(CATALOGUE, &[], p.store.catalog().len());
    o.head(BANS);
    o.sample(BANS, &[], p.store.bans().pending());
    o.head(UPTIME);
    o.sample(UPTIME, &[], admin.started.elapsed().as_secs());

    o.head(EVENTS);
    for (name, _) in COUNTERS {
        o.sample(EVENTS, &[("event", name)], c.get(name));
    }
    filter_metrics(&mut o, &run.cfg.filters);
    o.0
}

/// The metrics the running configuration's filters defined (names are the
/// filters', bounded by `hoard_wasm::MAX_METRICS` each).
fn filter_metrics(o: &mut Out, filters: &[hoard_config::filters::FilterConfig]) {
    use hoard_wasm::MetricKind;
    o.head(FILTER_CONTEXTS);
    for f in filters {
        let n = f.plugin.stats().contexts.load(Ordering::Relaxed);
        o.sample(FILTER_CONTEXTS, &[("filter", &f.name)], n);
    }
    o.head(FILTER_VM_STARTS);
    for f in filters {
        let n = f.plugin.stats().vm_starts.load(Ordering::Relaxed);
        o.sample(FILTER_VM_STARTS, &[("filter", &f.name)], n);
    }
    o.head(FILTER_FAILURES);
    for f in filters {
        for kind in hoard_wasm::Failure::ALL {
            let n = f.plugin.stats().failures[kind.index()].load(Ordering::Relaxed);
            o.sample(
                FILTER_FAILURES,
                &[("filter", &f.name), ("failure", kind.as_str())],
                n,
            );
        }
    }
    let all: Vec<_> = filters
        .iter()
        .flat_map(|f| {
            f.plugin
                .metrics()
                .snapshot()
                .into_iter()
                .map(move |m| (f.name.as_str(), m))
        })
        .collect();
    let value = |m: &hoard_wasm::Metric| m.value.load(Ordering::Relaxed);
    o.head(FILTER_COUNTER);
    for (f, m) in all.iter().filter(|(_, m)| m.kind == MetricKind::Counter) {
        o.sample(
            FILTER_COUNTER,
            &[("filter", f), ("name", &m.name)],
            value(m),
        );
    }
    o.head(FILTER_GAUGE);
    for (f, m) in all.iter().filter(|(_, m)| m.kind == MetricKind::Gauge) {
        o.sample(FILTER_GAUGE, &[("filter", f), ("name", &m.name)], value(m));
    }
    o.head(FILTER_HISTOGRAM);
    for (f, m) in all.iter().filter(|(_, m)| m.kind == MetricKind::Histogram) {
        let labels = [("filter", *f), ("name", m.name.as_str())];
        o.named("hoard_filter_observed_sum", &labels, value(m));
        o.named(
            "hoard_filter_observed_count",
            &labels,
            m.count.load(Ordering::Relaxed),
        );
    }
}
