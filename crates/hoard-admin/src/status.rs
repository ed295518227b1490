//! `GET /status`: the figures the dashboard shows, as JSON.
//!
//! Totals are read from the counters and tiers when asked. Rates come from
//! the [`Sampler`]: once a second it reads the totals and keeps the rates
//! of the last second and a history of the last [`HISTORY`] seconds.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use hoard_policy::cache_status::Outcome;
use parking_lot::Mutex;
use serde_json::{json, Value};
use tokio::sync::watch;

use super::Admin;
use hoard_metrics::metrics::OriginResult;

/// Seconds of history kept for the charts.
pub const HISTORY: usize = 300;

/// Running totals at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    requests: [u64; Outcome::ALL.len()],
    origin_requests: u64,
    client_bytes: u64,
    origin_bytes: u64,
}

impl Totals {
    fn read(admin: &Admin) -> Totals {
        let p = &admin.pipeline;
        let mut requests = [0; Outcome::ALL.len()];
        for o in Outcome::ALL {
            requests[o.index()] = p.metrics.requests(o);
        }
        let (mut origin_requests, mut origin_bytes) = (0, 0);
        for u in &p.run().upstreams {
            origin_requests += OriginResult::ALL
                .iter()
                .map(|r| u.stats.result(*r))
                .sum::<u64>();
            origin_bytes += u.stats.bytes.load(Ordering::Relaxed);
        }
        Totals {
            requests,
            origin_requests,
            client_bytes: p.metrics.client_bytes(),
            origin_bytes,
        }
    }
}

/// Per-second rates of one sample.
#[derive(Debug, Clone, Copy, Default)]
struct Rates {
    requests: [f64; Outcome::ALL.len()],
    origin_requests: f64,
    client_bytes: f64,
    origin_bytes: f64,
}

impl Rates {
    fn between(a: &Totals, b: &Totals, secs: f64) -> Rates {
        let r = |x: u64, y: u64| round(y.saturating_sub(x) as f64 / secs, 2);
        let requests = std::array::from_fn(|i| r(a.requests[i], b.requests[i]));
        Rates {
            requests,
            origin_requests: r(a.origin_requests, b.origin_requests),
            client_bytes: r(a.client_bytes, b.client_bytes),
            origin_bytes: r(a.origin_bytes, b.origin_bytes),
        }
    }

    fn total(&self) -> f64 {
        round(self.requests.iter().sum(), 2)
    }
}

#[derive(Debug, Default)]
struct Samples {
    sample: u64,
    last: Option<(Instant, Totals)>,
    rates: Rates,
    history: VecDeque<Rates>,
}

/// Takes one sample a second. See the module docs.
#[derive(Debug, Default)]
pub struct Sampler {
    inner: Mutex<Samples>,
}

impl Sampler {
    fn tick(&self, now: Instant, totals: Totals) {
        let mut s = self.inner.lock();
        if let Some((at, prev)) = s.last {
            let secs = now.duration_since(at).as_secs_f64().max(0.001);
            let rates = Rates::between(&prev, &totals, secs);
            s.rates = rates;
            if s.history.len() == HISTORY {
                s.history.pop_front();
            }
            s.history.push_back(rates);
        }
        s.last = Some((now, totals));
        s.sample += 1;
    }
}

/// Samples once a second until shutdown.
pub(super) async fn sample_loop(admin: Arc<Admin>, mut shutdown: watch::Receiver<bool>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {
                admin.sampler.tick(Instant::now(), Totals::read(&admin));
                let c = &admin.pipeline.counters;
                c.inc(&c.status_samples);
            }
            _ = shutdown.changed() => return,
        }
    }
}

fn round(x: f64, places: i32) -> f64 {
    let m = 10f64.powi(places);
    (x * m).round() / m
}

fn ratio(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        round(part as f64 / whole as f64, 4)
    }
}

/// The running configuration's generation and the last reload.
fn config_state(p: &hoard_proxy::pipeline::Pipeline) -> Value {
    let generation = p.run().generation;
    let last = p.last_reload.lock().clone();
    let reload = last.map(|r| {
        let at = httpdate::fmt_http_date(r.at);
        match r.result {
            Ok(g) => json!({ "number": r.number, "at": at, "result": "ok", "generation": g }),
            Err(e) => json!({ "number": r.number, "at": at, "result": "refused", "error": e }),
        }
    });
    json!({ "generation": generation, "last_reload": reload })
}

/// The `/status` document.
pub fn status(admin: &Admin) -> Value {
    let p = &admin.pipeline;
    let t = Totals::read(admin);
    let req = |o: Outcome| t.requests[o.index()];
    let total: u64 = t.requests.iter().sum();
    let samples = admin.sampler.inner.lock();
    let rates = samples.rates;
    let rate = |o: Outcome| rates.requests[o.index()];
    let mut requests = serde_json::Map::new();
    let mut rate_map = serde_json::Map::new();
    requests.insert("total".into(), json!(total));
    rate_map.insert("requests".into(), json!(rates.total()));
    for o in Outcome::ALL {
        requests.insert(o.as_str().into(), json!(req(o)));
        rate_map.insert(o.as_str().into(), json!(rate(o)));
    }
    rate_map.insert("origin_requests".into(), json!(rates.origin_requests));
    rate_map.insert("client_bytes".into(), json!(rates.client_bytes));
    rate_map.insert("origin_bytes".into(), json!(rates.origin_bytes));
    let series =
        |f: &dyn Fn(&Rates) -> f64| -> Vec<f64> { samples.history.iter().map(f).collect() };
    let history = json!({
        "requests": series(&|r| r.total()),
        "hit": series(&|r| r.requests[Outcome::Hit.index()]),
        "miss": series(&|r| r.requests[Outcome::Miss.index()]),
        "origin_requests": series(&|r| r.origin_requests),
        "client_bytes": series(&|r| r.client_bytes),
        "origin_bytes": series(&|r| r.origin_bytes),
    });
    let c = &p.counters;
    let purges = [
        &c.purges_url,
        &c.purges_prefix,
        &c.purges_host,
        &c.purges_tag,
    ]
    .iter()
    .map(|a| a.load(Ordering::Relaxed))
    .sum::<u64>();
    let mut memory = match p.store.memory() {
        Some(m) => json!({ "objects": m.len(), "bytes": m.weight(), "capacity": m.capacity() }),
        None => json!({ "objects": 0, "bytes": 0, "capacity": 0 }),
    };
    // The process's resident memory and its parts.
    let process = super::process_memory::ProcessMemory::read(p);
    let mut parts = serde_json::Map::new();
    parts.insert("resident".into(), process.resident.into());
    for (name, bytes) in process.parts() {
        parts.insert(name.into(), bytes.into());
    }
    memory["process"] = parts.into();
    let zones: Vec<Value> = p
        .store
        .zones()
        .iter()
        .map(|z| {
            json!({
                "name": z.name(),
                "objects": z.objects(),
                "bytes": z.used(),
                "max_size": z.config().max_size,
                "loading": z.loading(),
            })
        })
        .collect();
    let run = p.run();
    let upstreams: Vec<Value> = run
        .upstreams
        .iter()
        .map(|u| {
            let servers: Vec<Value> = u
                .server_states()
                .into_iter()
                .map(|s| {
                    json!({
                        "address": s.address,
                        "state": s.state,
                        "backup": s.backup,
                        "admin": s.admin.as_str(),
                        "probes": s.probes.map(|w| json!({ "passed": w.passed(), "window": w.window(), "healthy": w.healthy() })),
                        "connections": {
                            "http1_idle": s.http1_idle,
                            "http2": s.http2.0,
                            "http2_streams": s.http2.1,
                        },
                    })
                })
                .collect();
            json!({ "name": u.cfg.name, "servers": servers })
        })
        .collect();
    let filters: Vec<Value> = run
        .cfg
        .filters
        .iter()
        .map(|f| {
            let st = f.plugin.stats();
            let mut failures = serde_json::Map::new();
            for kind in hoard_wasm::Failure::ALL {
                let n = st.failures[kind.index()].load(Ordering::Relaxed);
                failures.insert(kind.as_str().into(), json!(n));
            }
            json!({
                "name": f.name,
                "abi": f.plugin.abi(),
                "contexts": st.contexts.load(Ordering::Relaxed),
                "vm_starts": st.vm_starts.load(Ordering::Relaxed),
                "failures": failures,
            })
        })
        .collect();
    let saved = if t.client_bytes == 0 {
        0.0
    } else {
        round(
            1.0 - (t.origin_bytes as f64 / t.client_bytes as f64).min(1.0),
            4,
        )
    };
    json!({
        "version": hoard_proxy::build_info::VERSION,
        "commit": hoard_proxy::build_info::commit(),
        "config": config_state(p),
        "uptime_seconds": admin.started.elapsed().as_secs(),
        "sample": samples.sample,
        "requests": requests,
        "hit_ratio": ratio(req(Outcome::Hit) + req(Outcome::Stale), total),
        "rates": rate_map,
        "client": { "bytes": t.client_bytes },
        "origin": { "requests": t.origin_requests, "bytes": t.origin_bytes },
        "bytes_saved_ratio": saved,
        "connections": connections_state(p),
        "acme": acme_state(p),
        "fills_in_flight": p.fills.in_flight(),
        "coalesced_waiters": c.fill_waiters_total.load(Ordering::Relaxed),
        "purges": purges,
        "memory": memory,
        "zones": zones,
        "upstreams": upstreams,
        "filters": filters,
        "cluster": cluster_state(p),
        "encodings": encodings_state(c),
        "history": history,
    })
}

/// `null` without ACME listeners; else each certificate (its names,
/// expiry, next order, last failure and, in a cluster, the member that
/// orders it) and the counts.
fn acme_state(p: &hoard_proxy::pipeline::Pipeline) -> serde_json::Value {
    let Some(acme) = p.acme.as_ref().filter(|a| a.active()) else {
        return serde_json::Value::Null;
    };
    let date = |t: Option<std::time::SystemTime>| t.map(httpdate::fmt_http_date);
    let certificates: Vec<serde_json::Value> = acme
        .state()
        .into_iter()
        .map(|s| {
            json!({
                "names": s.names,
                "not_after": date(s.not_after),
                "next_order": date(s.next_order),
                "last_error": s.last_error,
                "orderer": s.orderer,
                "challenge": s.challenge.map(|k| k.as_str()),
            })
        })
        .collect();
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    json!({
        "certificates": certificates,
        "orders": n(&p.counters.acme_orders),
        "issued": n(&p.counters.acme_certificates_issued),
        "from_bus": n(&p.counters.acme_certificates_from_bus),
        "failures": n(&p.counters.acme_failures),
        "challenges_answered": n(&p.counters.acme_challenges_answered),
    })
}

/// Client connections (all, and QUIC) and requests by protocol.
fn connections_state(p: &hoard_proxy::pipeline::Pipeline) -> serde_json::Value {
    let c = &p.counters;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let accepted = n(&c.connections_accepted);
    let quic = n(&c.quic_connections);
    json!({
        "accepted": accepted,
        "open": accepted.saturating_sub(n(&c.connections_closed)),
        "quic": {
            "accepted": quic,
            "open": quic.saturating_sub(n(&c.quic_connections_closed)),
        },
        "requests": {
            "http1": n(&c.requests_http1),
            "http2": n(&c.requests_http2),
            "http3": n(&c.requests_http3),
        },
    })
}

/// `null` outside a cluster; else this node, the members with their state,
/// and what crossed the peer channel.
fn cluster_state(p: &hoard_proxy::pipeline::Pipeline) -> serde_json::Value {
    let Some(cluster) = &p.cluster else {
        return serde_json::Value::Null;
    };
    let c = &p.counters;
    let members: Vec<serde_json::Value> = cluster
        .members()
        .into_iter()
        .map(|m| {
            json!({
                "name": &*m.name,
                "addr": m.addr.to_string(),
                "up": m.up,
                "state": if m.up { "up" } else { "down" },
                "share": m.share,
            })
        })
        .collect();
    let near = p.store.near().map_or(serde_json::Value::Null, |n| {
        json!({
            "size": n.capacity(),
            "bytes": n.weight(),
            "objects": n.len(),
            "stored": c.cluster_near_stored.load(Ordering::Relaxed),
            "declined": c.cluster_near_declined.load(Ordering::Relaxed),
            "hits": c.cluster_near_hits.load(Ordering::Relaxed),
        })
    });
    let bus = cluster.bus.as_ref().map_or(serde_json::Value::Null, |b| {
        let positions: serde_json::Map<String, serde_json::Value> = b
            .positions()
            .into_iter()
            .map(|(node, at)| (node, at.to_string().into()))
            .collect();
        json!({
            "connected": b.connected(),
            "unsure": b.unsure(),
            "positions": positions,
            "applied": c.cluster_bus_applied.load(Ordering::Relaxed),
            "replayed": c.cluster_bus_replayed.load(Ordering::Relaxed),
            "generation_bumps": c.cluster_bus_generation_bumps.load(Ordering::Relaxed),
            "lost": c.cluster_bus_lost.load(Ordering::Relaxed),
        })
    });
    let tier = cluster
        .parents()
        .map_or(serde_json::Value::Null, |(name, parents)| {
            json!({
                "name": name,
                "parents": parents
                    .iter()
                    .map(|(n, up)| json!({ "name": &**n, "up": up }))
                    .collect::<Vec<_>>(),
                "fills": c.cluster_parent_fills.load(Ordering::Relaxed),
                "retries": c.cluster_parent_retries.load(Ordering::Relaxed),
            })
        });
    json!({
        "node": cluster.node(),
        "members": members,
        "discovery": cluster.discovery_name(),
        "joined": c.cluster_members_joined.load(Ordering::Relaxed),
        "left": c.cluster_members_left.load(Ordering::Relaxed),
        "rampup_until_ms": cluster.rampup_until_ms(),
        "rampup_hits": c.cluster_rampup_hits.load(Ordering::Relaxed),
        "rampup_misses": c.cluster_rampup_misses.load(Ordering::Relaxed),
        "tier": tier,
        "bus": bus,
        "owner_fills": c.cluster_owner_fills.load(Ordering::Relaxed),
        "near": near,
        "forwarded": c.cluster_forwarded.load(Ordering::Relaxed),
        "forward_retries": c.cluster_forward_retries.load(Ordering::Relaxed),
        "peer_requests": c.cluster_peer_requests.load(Ordering::Relaxed),
        "peer_refused": c.cluster_peer_refused.load(Ordering::Relaxed),
        "purges_not_acked": c.cluster_purge_not_acked.load(Ordering::Relaxed),
    })
}

/// Content codings made and served (see `hoard_proxy::encode`): for each coding
/// its bytes as a share of the identity bytes they were made from, and
/// the hits it served.
fn encodings_state(c: &hoard_metrics::counters::Counters) -> serde_json::Value {
    let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let identity = get(&c.encode_identity_bytes);
    let share = |b: u64| {
        if identity == 0 {
            serde_json::Value::Null
        } else {
            json!(round(b as f64 / identity as f64, 4))
        }
    };
    json!({
        "objects": get(&c.encode_objects),
        "identity_bytes": identity,
        "br": { "bytes": get(&c.encode_bytes_br), "share": share(get(&c.encode_bytes_br)), "served": get(&c.served_br) },
        "zstd": { "bytes": get(&c.encode_bytes_zstd), "share": share(get(&c.encode_bytes_zstd)), "served": get(&c.served_zstd) },
        "gzip": { "bytes": get(&c.encode_bytes_gzip), "share": share(get(&c.encode_bytes_gzip)), "served": get(&c.served_gzip) },
        "decoded_served": get(&c.served_decoded),
        "skipped": get(&c.encode_skipped),
        "decode_failures": get(&c.encode_decode_failures),
    })
}
