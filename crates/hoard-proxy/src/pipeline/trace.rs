//! Requests as they happen, for `GET /trace` and `hoard trace` (what
//! `varnishlog` answers: why was this a miss?). When someone watches, the
//! `log` phase publishes each request's [`Traced`] on a broadcast channel
//! as its response head leaves: the method and target, the status, the
//! outcome, the `Cache-Status` (the lookup's result, why it went forward,
//! the origin's status, whether it was stored and for how long, which rule
//! or filter decided), the time to the head, the servers tried. With no
//! one watching it costs one atomic load per request.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use tokio::sync::broadcast;

/// Traced requests a slow watcher may lag behind before it misses some.
pub const TRACE_BACKLOG: usize = 1024;

/// One request (see the module docs).
#[derive(Debug, Clone)]
pub struct Traced {
    /// When it arrived.
    pub time: SystemTime,
    /// The client.
    pub client: IpAddr,
    /// Its method.
    pub method: http::Method,
    /// Its Host.
    pub host: String,
    /// Its target (path and query).
    pub target: String,
    /// The status sent.
    pub status: u16,
    /// The outcome (`hit`, `miss`, `pass`...).
    pub outcome: &'static str,
    /// The `Cache-Status` sent, if any.
    pub cache_status: String,
    /// Time to the response head.
    pub ttfb: Duration,
    /// Servers of the upstream tried (0: none).
    pub tries: u32,
}

impl Traced {
    /// One JSON line.
    pub fn to_json(&self) -> String {
        let unix = self
            .time
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        format!(
            "{}\n",
            serde_json::json!({
                "time": unix,
                "client": self.client.to_string(),
                "method": self.method.as_str(),
                "host": self.host,
                "url": self.target,
                "status": self.status,
                "outcome": self.outcome,
                "cache_status": self.cache_status,
                "ttfb_ms": self.ttfb.as_secs_f64() * 1000.0,
                "tries": self.tries,
            })
        )
    }
}

/// The channel (see the module docs).
#[derive(Debug)]
pub struct Trace {
    tx: broadcast::Sender<std::sync::Arc<Traced>>,
}

impl Default for Trace {
    fn default() -> Trace {
        Trace {
            tx: broadcast::Sender::new(TRACE_BACKLOG),
        }
    }
}

impl Trace {
    /// Someone watches.
    #[inline]
    pub fn on(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// Publishes one request.
    pub(crate) fn publish(&self, t: Traced) {
        let _ = self.tx.send(std::sync::Arc::new(t));
    }

    /// Watches from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<std::sync::Arc<Traced>> {
        self.tx.subscribe()
    }
}
