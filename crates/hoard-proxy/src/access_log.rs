//! The access log: one line per request, written by a thread of its own.
//!
//! ## Model
//!
//! When a response body is done, its request's [`Record`] (cheap clones of
//! the request's parts) is pushed onto a bounded in-memory batch: one
//! uncontended lock, no system call. The writer thread wakes every
//! [`FLUSH_EVERY`] (or as soon as the batch is half full), takes the whole
//! batch, formats it into one buffer and writes it with one call, like
//! nginx's `access_log ... buffer=`. Request handling never waits for the
//! writer: when the batch is full the line is dropped and counted
//! (`access_log_dropped`).
//!
//! ## Formats
//!
//! `json` (one object per line), `combined` (exactly nginx's line, for the
//! tools that read it) and `hoard` (combined with the cache outcome, the
//! times and the request id after it; see `nginx`). A line's values are
//! taken from the request as it arrived (the client's address as
//! `server.trusted_proxies` or the PROXY protocol give it), and formatted
//! on the writer thread only: the user name of Basic credentials is
//! decoded there, and a request id made here is written out there.
//!
//! ## Reopening
//!
//! [`AccessLog::reopen`] (the binary calls it on `SIGUSR1`) makes the writer
//! close and reopen its file before its next batch, so logrotate can move
//! the file away and signal.

mod nginx;

use std::io::{self, Write};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hoard_policy::cache_status::Outcome;
use http::header::{self, HeaderMap, HeaderValue};
use http::{Method, Uri};
use parking_lot::Mutex;

use crate::request_id::RequestId;
use hoard_config::{AccessLogConfig, LogFormat, LogTarget};
use hoard_metrics::counters::Counters;

/// One request, as logged. Built from cheap clones of the request's parts
/// (reference-counted bytes); the line is formatted on the writer thread.
#[derive(Debug)]
pub struct Record {
    /// When the request arrived.
    pub time: SystemTime,
    /// Client address: the peer's, the PROXY protocol's, or from a peer in
    /// `server.trusted_proxies` the one its `X-Forwarded-For` gives (see
    /// [`crate::pipeline::forwarding::client_addr`]).
    pub client: IpAddr,
    /// Request method.
    pub method: Method,
    /// Host (or `:authority`) as sent.
    pub host: Option<HeaderValue>,
    /// `User-Agent` as sent.
    pub user_agent: Option<HeaderValue>,
    /// `Referer` as sent.
    pub referer: Option<HeaderValue>,
    /// `Authorization` when it holds Basic credentials: the user name is
    /// logged (decoded by the writer), never the password.
    pub basic_auth: Option<HeaderValue>,
    /// The request's id (see [`crate::request_id`]).
    pub request_id: Option<RequestId>,
    /// The request target.
    pub uri: Uri,
    /// The protocol it came over (`HTTP/1.1`, `HTTP/2`, `HTTP/3`).
    pub version: http::Version,
    /// Response status.
    pub status: u16,
    /// Body bytes sent.
    pub bytes: u64,
    /// The cache outcome (`hit`, `miss`, `stale`, ...; `purge` for `PURGE`).
    pub cache: &'static str,
    /// For requests that went forward (or waited for a fill): time until
    /// the origin's response head was there.
    pub upstream: Option<Duration>,
    /// For requests that went forward: the number of servers of the
    /// upstream tried (more than 1 after a failover); 0 when not known.
    pub upstream_tries: u32,
    /// Time from the request head to the end of the response body; for
    /// a tunnel, to its close.
    pub total: Duration,
    /// For a tunnel (an upgrade answered `101`): the bytes the client sent
    /// through it (`bytes` counts those it got).
    pub tunnel_to_origin: Option<u64>,
    /// In a cluster: the member that owns the key of a request that went
    /// forward to it.
    pub owner: Option<std::sync::Arc<str>>,
}

impl Record {
    /// Fills in what is known when the request arrives (the fields are
    /// reference-counted clones).
    pub fn start(
        time: SystemTime,
        client: IpAddr,
        method: Method,
        headers: &HeaderMap,
        uri: Uri,
        version: http::Version,
    ) -> Record {
        // One pass over the fields (the first of each name, as `get`
        // would give): cheaper than a hashed look-up per name.
        let (mut host, mut user_agent, mut referer, mut basic_auth) = (None, None, None, None);
        for (name, value) in headers {
            let slot = if name == header::HOST {
                &mut host
            } else if name == header::USER_AGENT {
                &mut user_agent
            } else if name == header::REFERER {
                &mut referer
            } else if name == header::AUTHORIZATION {
                &mut basic_auth
            } else {
                continue;
            };
            if slot.is_none() {
                *slot = Some(value);
            }
        }
        let basic = |v: &&HeaderValue| {
            v.as_bytes()
                .get(..6)
                .is_some_and(|p| p.eq_ignore_ascii_case(b"basic "))
        };
        Record {
            time,
            client,
            method,
            host: host.cloned(),
            user_agent: user_agent.cloned(),
            referer: referer.cloned(),
            basic_auth: basic_auth.filter(basic).cloned(),
            request_id: None,
            uri,
            version,
            status: 0,
            bytes: 0,
            cache: Outcome::Error.as_str(),
            upstream: None,
            upstream_tries: 0,
            owner: None,
            total: Duration::ZERO,
            tunnel_to_origin: None,
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

    /// Appends the line to `out`.
    fn format_into(&self, format: &LogFormat, out: &mut String) {
        match format {
            LogFormat::Json => self.json(out),
            LogFormat::Combined => nginx::combined(self, out),
            LogFormat::Hoard => nginx::hoard(self, out),
            LogFormat::Custom(t) => nginx::custom(self, t, out),
        }
    }

    /// The JSON line, written piece by piece (no formatting machinery):
    /// the writer thread formats a line per request.
    fn json(&self, out: &mut String) {
        let mut num = itoa::Buffer::new();
        out.push_str("{\"time\":\"");
        push_rfc3339(out, self.time);
        out.push_str("\",\"client\":\"");
        push_ip(out, self.client);
        out.push_str("\",\"method\":");
        push_json_str(out, self.method.as_str());
        out.push_str(",\"host\":");
        push_json_str(out, self.host());
        out.push_str(",\"path\":");
        push_json_str(out, self.path());
        out.push_str(",\"protocol\":\"");
        out.push_str(protocol(self.version));
        out.push('"');
        out.push_str(",\"status\":");
        out.push_str(num.format(self.status));
        out.push_str(",\"bytes\":");
        out.push_str(num.format(self.bytes));
        out.push_str(",\"cache\":\"");
        out.push_str(self.cache);
        out.push_str("\",\"upstream_ms\":");
        match self.upstream {
            Some(d) => push_ms(out, d),
            None => out.push_str("null"),
        }
        if self.upstream_tries > 0 {
            out.push_str(",\"upstream_tries\":");
            out.push_str(num.format(self.upstream_tries));
        }
        out.push_str(",\"total_ms\":");
        push_ms(out, self.total);
        out.push_str(",\"request_id\":");
        match &self.request_id {
            Some(RequestId::Kept(v)) => push_json_str(out, v.to_str().unwrap_or("-")),
            Some(made) => {
                // Hex digits: nothing to escape.
                out.push('"');
                made.push_to(out);
                out.push('"');
            }
            None => out.push_str("null"),
        }
        out.push_str(",\"user_agent\":");
        push_json_field(out, self.user_agent.as_ref());
        out.push_str(",\"referer\":");
        push_json_field(out, self.referer.as_ref());
        out.push_str(",\"remote_user\":");
        match self
            .basic_auth
            .as_ref()
            .and_then(|v| hoard_edge::basic_auth::credentials(v.as_bytes()))
        {
            Some((user, _)) => push_json_str(out, &user),
            None => out.push_str("null"),
        }
        if let Some(n) = self.tunnel_to_origin {
            out.push_str(",\"tunnel_bytes_to_origin\":");
            out.push_str(num.format(n));
        }
        if let Some(owner) = &self.owner {
            out.push_str(",\"owner\":");
            push_json_str(out, owner);
        }
        out.push_str("}\n");
    }

    #[cfg(test)]
    fn format(&self, format: LogFormat) -> String {
        let mut s = String::new();
        self.format_into(&format, &mut s);
        s
    }
}

/// The protocol's name as nginx's `$server_protocol` writes it.
pub fn protocol(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// An IP address; IPv4 without the formatting machinery.
fn push_ip(out: &mut String, ip: IpAddr) {
    use std::fmt::Write as _;
    match ip {
        std::net::IpAddr::V4(v4) => {
            // Written into a buffer and appended once (one line each).
            let mut text = [0u8; 15];
            let mut n = 0;
            for (i, o) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    text[n] = b'.';
                    n += 1;
                }
                if o >= 100 {
                    text[n] = b'0' + o / 100;
                    n += 1;
                }
                if o >= 10 {
                    text[n] = b'0' + o / 10 % 10;
                    n += 1;
                }
                text[n] = b'0' + o % 10;
                n += 1;
            }
            out.push_str(std::str::from_utf8(&text[..n]).unwrap_or("-"));
        }
        v6 => {
            let _ = write!(out, "{v6}");
        }
    }
}

/// Milliseconds with three decimals, e.g. `0.412`.
fn push_ms(out: &mut String, d: Duration) {
    push_thousandths(out, d.as_micros().min(u128::from(u64::MAX)) as u64);
}

/// `n` thousandths as a decimal with three places: 1234 is `1.234`.
pub(super) fn push_thousandths(out: &mut String, n: u64) {
    let mut num = itoa::Buffer::new();
    out.push_str(num.format(n / 1000));
    out.push('.');
    let frac = n % 1000;
    if frac < 100 {
        out.push('0');
    }
    if frac < 10 {
        out.push('0');
    }
    out.push_str(num.format(frac));
}

/// A field's value as a JSON string (bytes that are not UTF-8 replaced),
/// or `null` when absent.
fn push_json_field(out: &mut String, v: Option<&HeaderValue>) {
    match v {
        Some(v) => push_json_str(out, &String::from_utf8_lossy(v.as_bytes())),
        None => out.push_str("null"),
    }
}

/// A JSON string literal (quotes, backslashes and control characters escaped).
fn push_json_str(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    out.push('"');
    if !s.bytes().any(|b| b == b'"' || b == b'\\' || b < 0x20) {
        out.push_str(s);
        out.push('"');
        return;
    }
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// How often the writer wakes to write what has come.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

struct Shared {
    batch: Mutex<Vec<Record>>,
    capacity: usize,
    reopen: AtomicBool,
}

/// The access log. See the module docs.
pub struct AccessLog {
    shared: Arc<Shared>,
    writer: std::thread::Thread,
    counters: Arc<Counters>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog")
            .field("capacity", &self.shared.capacity)
            .finish_non_exhaustive()
    }
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
        let shared = Arc::new(Shared {
            batch: Mutex::new(Vec::new()),
            capacity: cfg.buffer,
            reopen: AtomicBool::new(false),
        });
        let (sh, c, format) = (shared.clone(), counters.clone(), cfg.format.clone());
        let writer = std::thread::Builder::new()
            .name("hoard-access-log".into())
            .spawn(move || write_loop(&sh, out, &format, &c))?
            .thread()
            .clone();
        Ok(Some(AccessLog {
            shared,
            writer,
            counters,
        }))
    }

    /// Queues a line; drops it (counted) when the batch is full.
    pub fn write(&self, rec: Record) {
        let len = {
            let mut batch = self.shared.batch.lock();
            if batch.len() >= self.shared.capacity {
                drop(batch);
                self.counters.inc(&self.counters.access_log_dropped);
                return;
            }
            batch.push(rec);
            batch.len()
        };
        if len == self.shared.capacity / 2 + 1 {
            self.writer.unpark();
        }
    }

    /// Reopens the log file before the next batch (after logrotate).
    pub fn reopen(&self) {
        self.shared.reopen.store(true, Ordering::Release);
        self.writer.unpark();
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

fn write_loop(shared: &Shared, mut out: Output, format: &LogFormat, counters: &Counters) {
    let mut text = String::with_capacity(64 << 10);
    let mut taken = Vec::new();
    loop {
        std::thread::park_timeout(FLUSH_EVERY);
        if shared.reopen.swap(false, Ordering::AcqRel) {
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
        std::mem::swap(&mut *shared.batch.lock(), &mut taken);
        if taken.is_empty() {
            continue;
        }
        text.clear();
        let n = taken.len() as u64;
        for rec in taken.drain(..) {
            rec.format_into(format, &mut text);
        }
        match out.write(&text).and_then(|()| out.flush()) {
            Ok(()) => counters.add(&counters.access_log_lines, n),
            Err(e) => tracing::warn!(error = %e, "access log: write failed"),
        }
    }
}

/// `2026-11-23T11:17:10.123Z`.
pub fn rfc3339(t: SystemTime) -> String {
    let mut s = String::with_capacity(24);
    push_rfc3339(&mut s, t);
    s
}

/// A time's calendar fields, in UTC.
struct Civil {
    year: u64,
    month: u64,
    day: u64,
    hour: u64,
    minute: u64,
    second: u64,
}

/// The calendar fields of `t` (UTC; times before 1970 count as 1970).
fn civil(t: SystemTime) -> Civil {
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
    Civil {
        year: year.max(0) as u64,
        month: month as u64,
        day: day as u64,
        hour: rem / 3600,
        minute: rem % 3600 / 60,
        second: rem % 60,
    }
}

/// Appends `2026-11-23T11:17:10.123Z`. The text up to the seconds is
/// made once a second per thread (the writer formats many lines a second;
/// nginx keeps its time strings the same way), the milliseconds each time.
fn push_rfc3339(out: &mut String, t: SystemTime) {
    let d = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    per_second(&RFC3339_SECOND, out, d.as_secs(), |text| {
        let c = civil(t);
        let digits = |out: &mut String, n: u64, width: usize| {
            let mut num = itoa::Buffer::new();
            let s = num.format(n);
            for _ in s.len()..width {
                out.push('0');
            }
            out.push_str(s);
        };
        digits(text, c.year, 4);
        text.push('-');
        digits(text, c.month, 2);
        text.push('-');
        digits(text, c.day, 2);
        text.push('T');
        digits(text, c.hour, 2);
        text.push(':');
        digits(text, c.minute, 2);
        text.push(':');
        digits(text, c.second, 2);
        text.push('.');
    });
    let ms = d.subsec_millis();
    let tail = [
        b'0' + (ms / 100 % 10) as u8,
        b'0' + (ms / 10 % 10) as u8,
        b'0' + (ms % 10) as u8,
        b'Z',
    ];
    out.push_str(std::str::from_utf8(&tail).unwrap_or("000Z"));
}

thread_local! {
    /// `push_rfc3339`'s text for the last second it wrote (see [`per_second`]).
    static RFC3339_SECOND: std::cell::RefCell<(Option<u64>, String)> =
        const { std::cell::RefCell::new((None, String::new())) };
}

/// Appends the text `make` writes for the whole second `secs`, made again
/// only when the second changed since this thread last asked `cache`.
fn per_second(
    cache: &'static std::thread::LocalKey<std::cell::RefCell<(Option<u64>, String)>>,
    out: &mut String,
    secs: u64,
    make: impl FnOnce(&mut String),
) {
    cache.with(|c| {
        let mut c = c.borrow_mut();
        if c.0 != Some(secs) {
            c.1.clear();
            make(&mut c.1);
            c.0 = Some(secs);
        }
        out.push_str(&c.1);
    });
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
        let mut h = HeaderMap::new();
        h.insert(header::HOST, HeaderValue::from_static("example.com"));
        h.insert(header::USER_AGENT, HeaderValue::from_static("curl/8.5.0"));
        // "ann:pw"
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Basic YW5uOnB3"),
        );
        let mut r = Record::start(
            SystemTime::UNIX_EPOCH,
            "127.0.0.1".parse().unwrap(),
            Method::GET,
            &h,
            "/a%22b?x=1".parse().unwrap(),
            http::Version::HTTP_3,
        );
        r.status = 200;
        r.bytes = 5;
        r.cache = "hit";
        r.total = Duration::from_micros(1500);
        r.request_id = Some(RequestId::Made([1, 0xab]));
        let json = r.format(LogFormat::Json);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["path"], "/a%22b?x=1");
        assert_eq!(v["host"], "example.com");
        assert_eq!(v["cache"], "hit");
        assert_eq!(v["protocol"], "HTTP/3.0");
        assert_eq!(v["total_ms"], 1.5);
        assert!(v["upstream_ms"].is_null());
        assert_eq!(v["user_agent"], "curl/8.5.0");
        assert!(v["referer"].is_null());
        assert_eq!(v["remote_user"], "ann");
        assert_eq!(v["request_id"], "000000000000000100000000000000ab");
        assert_eq!(
            r.format(LogFormat::Combined),
            "127.0.0.1 - ann [01/Jan/1970:00:00:00 +0000] \"GET /a%22b?x=1 HTTP/3.0\" 200 5 \"-\" \"curl/8.5.0\"\n"
        );
        assert_eq!(
            r.format(LogFormat::Hoard),
            "127.0.0.1 - ann [01/Jan/1970:00:00:00 +0000] \"GET /a%22b?x=1 HTTP/3.0\" 200 5 \"-\" \"curl/8.5.0\" hit - 0.001 000000000000000100000000000000ab \"example.com\"\n"
        );
    }
}
