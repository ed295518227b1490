//! The access log: one line per request, written by a thread of its own.
//!
//! ## Model
//!
//! A request formats its line when its response body ends (or is dropped)
//! and hands it to a bounded queue; a dedicated writer thread drains the
//! queue into stdout, stderr or a file, flushing whenever the queue runs
//! empty. Request handling never waits for the writer: when the queue is
//! full the line is dropped and counted (`access_log_dropped`).
//!
//! ## Reopening
//!
//! [`AccessLog::reopen`] (the binary calls it on `SIGUSR1`) makes the writer
//! close and reopen its file before its next line, so logrotate can move
//! the file away and signal.

use std::io::{self, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hoard_policy::cache_status::Outcome;
use http::{HeaderValue, Method, Uri};

use crate::config::{AccessLogConfig, LogFormat, LogTarget};
use crate::counters::Counters;

/// One request, as logged. Built from cheap clones of the request's parts
/// (reference-counted bytes); the line is formatted on the writer thread.
#[derive(Debug)]
pub struct Record {
    /// When the request arrived.
    pub time: SystemTime,
    /// Client address.
    pub client: SocketAddr,
    /// Request method.
    pub method: Method,
    /// Host (or `:authority`) as sent.
    pub host: Option<HeaderValue>,
    /// The request target.
    pub uri: Uri,
    /// Response status.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// The cache outcome (`hit`, `miss`, `stale`, ...; `purge` for `PURGE`).
    pub cache: &'static str,
    /// For requests that went forward (or waited for a fill): time until
    /// the origin's response head was there.
    pub upstream: Option<Duration>,
    /// Time from the request head to the end of the response body.
    pub total: Duration,
}

impl Record {
    /// Fills in what is known when the request arrives.
    pub fn start(
        time: SystemTime,
        client: SocketAddr,
        method: Method,
        host: Option<HeaderValue>,
        uri: Uri,
    ) -> Record {
        Record {
            time,
            client,
            method,
            host,
            uri,
            status: 0,
            bytes: 0,
            cache: Outcome::Error.as_str(),
            upstream: None,
            total: Duration::ZERO,
        }
    }

    fn host(&self) -> &str {
        self.uri
            .authority()
            .map(|a| a.as_str())
            .or_else(|| self.host.as_ref().and_then(|h| h.to_str().ok()))
            .unwrap_or("")
    }

    fn path(&self) -> &str {
        self.uri.path_and_query().map_or("/", |p| p.as_str())
    }

    fn format(&self, format: LogFormat) -> String {
        let ms = |d: Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
        match format {
            LogFormat::Json => {
                let mut s = serde_json::json!({
                    "time": rfc3339(self.time),
                    "client": self.client.ip().to_string(),
                    "method": self.method.as_str(),
                    "host": self.host(),
                    "path": self.path(),
                    "status": self.status,
                    "bytes": self.bytes,
                    "cache": self.cache,
                    "upstream_ms": self.upstream.map(ms),
                    "total_ms": ms(self.total),
                })
                .to_string();
                s.push('\n');
                s
            }
            LogFormat::Combined => format!(
                "{} - - [{}] \"{} {} HTTP\" {} {} \"{}\" {} {:.3}\n",
                self.client.ip(),
                rfc3339(self.time),
                self.method,
                self.path().replace('"', "%22"),
                self.status,
                self.bytes,
                self.host().replace('"', "%22"),
                self.cache,
                self.total.as_secs_f64(),
            ),
        }
    }
}

/// The access log. See the module docs.
#[derive(Debug)]
pub struct AccessLog {
    tx: SyncSender<Option<Box<Record>>>,
    reopen: Arc<AtomicBool>,
    counters: Arc<Counters>,
}

impl AccessLog {
    /// Starts the writer thread; `None` when the log is off.
    ///
    /// # Errors
    /// When the log file cannot be opened.
    pub fn start(cfg: &AccessLogConfig, counters: Arc<Counters>) -> io::Result<Option<AccessLog>> {
        let out = match &cfg.target {
            LogTarget::Off => return Ok(None),
            t => Output::open(t)?,
        };
        let (tx, rx) = sync_channel(cfg.buffer);
        let cfg_format = cfg.format;
        let reopen = Arc::new(AtomicBool::new(false));
        let flag = reopen.clone();
        let c = counters.clone();
        std::thread::Builder::new()
            .name("hoard-access-log".into())
            .spawn(move || write_loop(rx, out, cfg_format, flag, c))?;
        Ok(Some(AccessLog {
            tx,
            reopen,
            counters,
        }))
    }

    /// Queues a line; drops it (counted) when the writer is behind.
    pub fn write(&self, rec: Box<Record>) {
        match self.tx.try_send(Some(rec)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.inc(&self.counters.access_log_dropped);
            }
        }
    }

    /// Reopens the log file before the next line (after logrotate).
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        // Wake the writer even when no request comes.
        let _ = self.tx.try_send(None);
    }
}

enum Output {
    Stdout,
    Stderr,
    File(PathBuf, io::BufWriter<std::fs::File>),
}

impl Output {
    fn open(t: &LogTarget) -> io::Result<Output> {
        Ok(match t {
            LogTarget::Stdout | LogTarget::Off => Output::Stdout,
            LogTarget::Stderr => Output::Stderr,
            LogTarget::File(p) => Output::File(p.clone(), open_file(p)?),
        })
    }

    fn write(&mut self, line: &str) -> io::Result<()> {
        match self {
            Output::Stdout => io::stdout().lock().write_all(line.as_bytes()),
            Output::Stderr => io::stderr().lock().write_all(line.as_bytes()),
            Output::File(_, w) => w.write_all(line.as_bytes()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Output::Stdout => io::stdout().flush(),
            Output::Stderr => Ok(()),
            Output::File(_, w) => w.flush(),
        }
    }
}

fn open_file(p: &PathBuf) -> io::Result<io::BufWriter<std::fs::File>> {
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(p)
        .map_err(|e| io::Error::new(e.kind(), format!("access log {}: {e}", p.display())))?;
    Ok(io::BufWriter::with_capacity(64 << 10, f))
}

fn write_loop(
    rx: Receiver<Option<Box<Record>>>,
    mut out: Output,
    format: LogFormat,
    reopen: Arc<AtomicBool>,
    counters: Arc<Counters>,
) {
    while let Ok(first) = rx.recv() {
        if reopen.swap(false, Ordering::AcqRel) {
            let _ = out.flush();
            if let Output::File(path, w) = &mut out {
                match open_file(path) {
                    Ok(n) => *w = n,
                    Err(e) => {
                        tracing::warn!(error = %e, "access log: reopen failed; still writing the old file")
                    }
                }
            }
        }
        let mut line = Some(first);
        let mut written = 0;
        while let Some(l) = line.take() {
            let Some(rec) = l else {
                // A wake-up from reopen.
                line = rx.try_recv().ok();
                continue;
            };
            if let Err(e) = out.write(&rec.format(format)) {
                tracing::warn!(error = %e, "access log: write failed");
            } else {
                written += 1;
            }
            line = rx.try_recv().ok();
        }
        let _ = out.flush();
        counters.add(&counters.access_log_lines, written);
    }
    let _ = out.flush();
}

/// `2026-11-23T11:17:10.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_432_630_123);
        assert_eq!(rfc3339(t), "2026-11-23T11:17:10.123Z");
        let leap = SystemTime::UNIX_EPOCH + Duration::from_secs(951_782_400);
        assert_eq!(rfc3339(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn lines() {
        let mut r = Record::start(
            SystemTime::UNIX_EPOCH,
            "127.0.0.1:5000".parse().unwrap(),
            Method::GET,
            Some(HeaderValue::from_static("example.com")),
            "/a%22b?x=1".parse().unwrap(),
        );
        r.status = 200;
        r.bytes = 5;
        r.cache = "hit";
        r.total = Duration::from_micros(1500);
        let json = r.format(LogFormat::Json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["path"], "/a%22b?x=1");
        assert_eq!(v["host"], "example.com");
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["total_ms"], 1.5);
        assert!(v["upstream_ms"].is_null());
        let combined = r.format(LogFormat::Combined);
        assert!(
            combined.starts_with("127.0.0.1 - - [1970-01-01T00:00:00.000Z] \"GET /a%22b?x=1 HTTP\" 200 5 \"example.com\" hit 0.002"),
            "{combined}"
        );
    }
}
