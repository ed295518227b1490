//! Active health checks (`health_check`): every `interval`, a GET of its
//! `path` to each server of the upstream, whether or not clients come; a
//! probe passes when the whole answer arrives within `timeout` with the
//! status expected. Each server's last `window` probes decide whether it
//! is in service (see [`crate::health`]).
//!
//! ## Lifecycle
//! [`start`] spawns one task per upstream that has a health check. It
//! holds the upstream weakly and ends when the upstream is dropped or told
//! to ([`Upstream::retire_probes`] when a reload replaced it: the
//! successor's own task goes on with the same health when the check did
//! not change; [`Upstream::stop_probes`] at a shutdown, which waits until
//! no probe is in flight).
//! Probes of one round run concurrently, one per server; a round never
//! overlaps the next (a slow server delays only its own next probe).
//!
//! Probes are not requests: they count in `health_probes` and
//! `health_probe_failures`, not in `origin_requests`, and leave the
//! passive health (what requests found) alone. Each change of a server's
//! state is logged.

use std::sync::{Arc, Weak};

use http::{HeaderValue, Method};
use http_body_util::BodyExt;

use crate::{OriginRequest, Upstream};

/// The most of a probe's answer that is read (the rest is not waited for).
const PROBE_BODY_MAX: usize = 64 << 10;

/// Starts the upstream's probes, if it has a health check (see the module
/// docs); needs a Tokio runtime.
pub fn start(upstream: &Arc<Upstream>) {
    if upstream.cfg.health_check.is_none() {
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(upstream = %upstream.cfg.name, "no runtime: health checks are off");
        return;
    };
    let stop = upstream.probe_stop.subscribe();
    let task = rt.spawn(run(Arc::downgrade(upstream), stop));
    *upstream.probe_task.lock() = Some(task);
}

async fn run(weak: Weak<Upstream>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let interval = match weak.upgrade().and_then(|u| u.cfg.health_check.clone()) {
        Some(hc) => hc.interval,
        None => return,
    };
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {}
        }
        let Some(up) = weak.upgrade() else { return };
        let mut round = tokio::task::JoinSet::new();
        for i in 0..up.health.len() {
            let up = up.clone();
            round.spawn(async move { probe(&up, i).await });
        }
        drop(up);
        loop {
            tokio::select! {
                biased;
                () = stopped(&mut stop) => {
                    round.shutdown().await;
                    return;
                }
                done = round.join_next() => if done.is_none() { break },
            }
        }
    }
}

/// Until the upstream's probes are told to end.
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// One probe of server `i`: recorded in its health.
async fn probe(up: &Upstream, i: usize) {
    let Some(hc) = up.cfg.health_check.as_ref() else {
        return;
    };
    let server = &up.server(i).authority;
    let passed = tokio::time::timeout(hc.timeout, ask(up, i))
        .await
        .map_err(|_| "timed out".to_string())
        .and_then(|r| r)
        .and_then(|status| {
            if hc.passes(status) {
                Ok(())
            } else {
                Err(format!("status {status}"))
            }
        });
    up.counters.inc(&up.counters.health_probes);
    if passed.is_err() {
        up.counters.inc(&up.counters.health_probe_failures);
    }
    let h = &up.health[i];
    if h.probed(passed.is_ok()) {
        let w = h
            .probe_window()
            .unwrap_or_else(|| crate::health::ProbeWindow::new(1, 1));
        let state = if w.healthy() {
            "in service"
        } else {
            "out of service"
        };
        match &passed {
            Ok(()) => {
                tracing::info!(upstream = %up.cfg.name, server = %server, passed = w.passed(), window = w.window(), "health check: server {state}")
            }
            Err(why) => {
                tracing::warn!(upstream = %up.cfg.name, server = %server, passed = w.passed(), window = w.window(), reason = %why, "health check: server {state}")
            }
        }
    }
}

/// Sends the probe and reads its answer; the status.
async fn ask(up: &Upstream, i: usize) -> Result<u16, String> {
    let hc = up.cfg.health_check.as_ref().ok_or("no health check")?;
    let mut req = OriginRequest {
        method: Method::GET,
        uri: http::Uri::try_from(hc.path.as_str()).map_err(|e| e.to_string())?,
        headers: http::HeaderMap::new(),
        body: None,
        interim: None,
        tries: None,
    };
    let host = match (&hc.host, &up.cfg.host) {
        (Some(h), _) | (None, hoard_config::HostHeader::Fixed(h)) => HeaderValue::from_str(h).ok(),
        _ => None,
    };
    match host {
        Some(h) => {
            req.headers.insert(http::header::HOST, h);
        }
        None => up.default_host(i, &mut req),
    }
    req.headers.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static("hoard-health-check"),
    );
    let resp = Box::pin(up.send_to(i, &mut req, true, false))
        .await
        .map_err(|(_, e)| e.to_string())?;
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut read = 0;
    while read < PROBE_BODY_MAX {
        match body.frame().await {
            None => break,
            Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
            Some(Err(e)) => return Err(format!("body: {e}")),
        }
    }
    Ok(status)
}
