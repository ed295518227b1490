//! The text formats: `combined`, exactly nginx's line, which log tools
//! (GoAccess, AWStats, most log shippers) read as they read nginx's and
//! Apache's; and `hoard`, the same line with the cache outcome, the times
//! and the request id after it.
//!
//! ```text
//! combined: $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//! hoard:    <combined> $cache $upstream_time $request_time $request_id "$host"
//! ```
//!
//! As nginx writes them: a value that is absent is `-`; the bytes `"`, `\`,
//! control bytes and bytes from 0x7f up are written `\xHH` (so a line is
//! always one line of ASCII whatever the client sent).

use std::time::{Duration, SystemTime};

use super::{civil, protocol, push_ip, Record};
use crate::request_id::RequestId;

/// Appends the `combined` line (with its newline).
pub(super) fn combined(rec: &Record, out: &mut String) {
    common(rec, out);
    out.push('\n');
}

/// Appends the `hoard` line (with its newline).
pub(super) fn hoard(rec: &Record, out: &mut String) {
    common(rec, out);
    out.push(' ');
    out.push_str(rec.cache);
    out.push(' ');
    match rec.upstream {
        Some(d) => push_secs(out, d),
        None => out.push('-'),
    }
    out.push(' ');
    push_secs(out, rec.total);
    out.push(' ');
    match &rec.request_id {
        // A kept id is any visible ASCII, quotes included: escaped as
        // nginx escapes variables, so the line stays parseable.
        Some(RequestId::Kept(v)) => push_escaped(out, v.as_bytes()),
        Some(made) => made.push_to(out),
        None => out.push('-'),
    }
    out.push_str(" \"");
    push_var(out, Some(rec.host().as_bytes()).filter(|h| !h.is_empty()));
    out.push_str("\"\n");
}

/// Appends a `custom` line (with its newline): the template's text with
/// each variable as nginx writes it (`-` when absent, escaped).
pub(super) fn custom(rec: &Record, t: &hoard_config::log_template::LogTemplate, out: &mut String) {
    use hoard_config::log_template::{LogPart, LogVar};
    let mut num = itoa::Buffer::new();
    for part in &t.parts {
        let v = match part {
            LogPart::Lit(s) => {
                out.push_str(s);
                continue;
            }
            LogPart::Var(v) => *v,
        };
        match v {
            LogVar::RemoteAddr => push_ip(out, rec.client),
            LogVar::RemoteUser => {
                let user = rec
                    .basic_auth
                    .as_ref()
                    .and_then(|v| hoard_edge::basic_auth::credentials(v.as_bytes()))
                    .map(|(user, _)| user)
                    .filter(|u| !u.is_empty());
                push_var(out, user.as_deref().map(str::as_bytes));
            }
            LogVar::TimeLocal => push_time_local(out, rec.time),
            LogVar::TimeIso8601 => super::push_rfc3339(out, rec.time),
            LogVar::Msec => {
                let ms = rec
                    .time
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                super::push_thousandths(out, ms);
            }
            LogVar::Request => {
                push_escaped(out, rec.method.as_str().as_bytes());
                out.push(' ');
                push_target(out, rec);
                out.push(' ');
                out.push_str(protocol(rec.version));
            }
            LogVar::RequestMethod => push_escaped(out, rec.method.as_str().as_bytes()),
            LogVar::RequestUri => push_escaped(out, rec.path().as_bytes()),
            LogVar::Uri => push_escaped(out, rec.uri.path().as_bytes()),
            LogVar::Args => push_var(out, rec.uri.query().map(str::as_bytes)),
            LogVar::Host => push_var(out, Some(rec.host().as_bytes()).filter(|h| !h.is_empty())),
            LogVar::ServerProtocol => out.push_str(protocol(rec.version)),
            LogVar::Status => out.push_str(num.format(rec.status)),
            LogVar::BodyBytesSent => out.push_str(num.format(rec.bytes)),
            LogVar::HttpReferer => push_var(out, rec.referer.as_ref().map(|v| v.as_bytes())),
            LogVar::HttpUserAgent => push_var(out, rec.user_agent.as_ref().map(|v| v.as_bytes())),
            LogVar::RequestTime => push_secs(out, rec.total),
            LogVar::UpstreamResponseTime => match rec.upstream {
                Some(d) => push_secs(out, d),
                None => out.push('-'),
            },
            LogVar::CacheStatus => out.push_str(cache_status(rec.cache)),
            LogVar::RequestId => match &rec.request_id {
                Some(RequestId::Kept(v)) => push_escaped(out, v.as_bytes()),
                Some(made) => made.push_to(out),
                None => out.push('-'),
            },
            LogVar::UpstreamTries => out.push_str(num.format(rec.upstream_tries)),
        }
    }
    out.push('\n');
}

/// nginx's `$upstream_cache_status` names for hoard's outcomes.
fn cache_status(outcome: &str) -> &'static str {
    match outcome {
        "hit" => "HIT",
        "miss" => "MISS",
        "stale" => "STALE",
        "revalidated" => "REVALIDATED",
        "pass" | "hit_for_pass" => "PASS",
        "error" => "ERROR",
        _ => "-",
    }
}

/// The combined part, without the newline.
fn common(rec: &Record, out: &mut String) {
    let mut num = itoa::Buffer::new();
    push_ip(out, rec.client);
    out.push_str(" - ");
    let user = rec
        .basic_auth
        .as_ref()
        .and_then(|v| hoard_edge::basic_auth::credentials(v.as_bytes()))
        .map(|(user, _)| user)
        .filter(|u| !u.is_empty());
    push_var(out, user.as_deref().map(str::as_bytes));
    out.push_str(" [");
    push_time_local(out, rec.time);
    out.push_str("] \"");
    push_escaped(out, rec.method.as_str().as_bytes());
    out.push(' ');
    push_target(out, rec);
    out.push(' ');
    out.push_str(protocol(rec.version));
    out.push_str("\" ");
    out.push_str(num.format(rec.status));
    out.push(' ');
    out.push_str(num.format(rec.bytes));
    out.push_str(" \"");
    push_var(out, rec.referer.as_ref().map(|v| v.as_bytes()));
    out.push_str("\" \"");
    push_var(out, rec.user_agent.as_ref().map(|v| v.as_bytes()));
    out.push('"');
}

/// The request target as the client sent it: absolute-form stays so over
/// HTTP/1.x; over HTTP/2 and HTTP/3 the path (nginx prints the same).
fn push_target(out: &mut String, rec: &Record) {
    let uri = &rec.uri;
    if rec.version < http::Version::HTTP_2 {
        if let (Some(scheme), Some(authority)) = (uri.scheme_str(), uri.authority()) {
            push_escaped(out, scheme.as_bytes());
            out.push_str("://");
            push_escaped(out, authority.as_str().as_bytes());
        }
    }
    match (uri.path_and_query(), uri.authority()) {
        (Some(pq), _) => push_escaped(out, pq.as_str().as_bytes()),
        (None, Some(a)) => push_escaped(out, a.as_str().as_bytes()),
        (None, None) => out.push('/'),
    }
}

/// A variable's value: `-` when absent, else escaped.
fn push_var(out: &mut String, value: Option<&[u8]>) {
    match value {
        Some(v) => push_escaped(out, v),
        None => out.push('-'),
    }
}

/// nginx's log escaping: `"`, `\`, bytes below 0x20 and from 0x7f up as
/// `\xHH` (upper-case hex).
pub(super) fn push_escaped(out: &mut String, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: u8| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\';
    if bytes.iter().all(|b| plain(*b)) {
        // ASCII: the bytes are a str.
        out.push_str(std::str::from_utf8(bytes).unwrap_or_default());
        return;
    }
    for &b in bytes {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push_str("\\x");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        }
    }
}

/// `27/Nov/2026:08:15:02 +0000` (nginx's `$time_local`, in UTC), made once
/// a second per thread.
fn push_time_local(out: &mut String, t: SystemTime) {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    super::per_second(&TIME_LOCAL_SECOND, out, secs, |out| {
        let c = civil(t);
        let two = |out: &mut String, n: u64| {
            out.push(char::from(b'0' + (n / 10 % 10) as u8));
            out.push(char::from(b'0' + (n % 10) as u8));
        };
        two(out, c.day);
        out.push('/');
        out.push_str(MONTHS[(c.month as usize).clamp(1, 12) - 1]);
        out.push('/');
        let mut num = itoa::Buffer::new();
        out.push_str(num.format(c.year));
        out.push(':');
        two(out, c.hour);
        out.push(':');
        two(out, c.minute);
        out.push(':');
        two(out, c.second);
        out.push_str(" +0000");
    });
}

thread_local! {
    /// `push_time_local`'s text for the last second it wrote.
    static TIME_LOCAL_SECOND: std::cell::RefCell<(Option<u64>, String)> =
        const { std::cell::RefCell::new((None, String::new())) };
}

/// Seconds with milliseconds, `0.012` (nginx's `$request_time`).
fn push_secs(out: &mut String, d: Duration) {
    super::push_thousandths(out, d.as_millis().min(u128::from(u64::MAX)) as u64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_nginx() {
        let mut s = String::new();
        push_escaped(&mut s, b"a\"b\\c\td\x7f\xc3\xa9 ok");
        assert_eq!(s, "a\\x22b\\x5Cc\\x09d\\x7F\\xC3\\xA9 ok");
    }

    fn line(uri: &str, version: http::Version) -> String {
        let rec = Record::start(
            SystemTime::UNIX_EPOCH,
            "2001:db8::7".parse().unwrap(),
            http::Method::GET,
            &http::HeaderMap::new(),
            uri.parse().unwrap(),
            version,
        );
        let mut s = String::new();
        combined(&rec, &mut s);
        s
    }

    #[test]
    fn request_line_as_nginx_prints_it() {
        // HTTP/2 and HTTP/3 carry the target as :scheme, :authority, :path.
        assert_eq!(
            line("https://example.com/x?y=1", http::Version::HTTP_2),
            "2001:db8::7 - - [01/Jan/1970:00:00:00 +0000] \"GET /x?y=1 HTTP/2.0\" 0 0 \"-\" \"-\"\n"
        );
        // Absolute-form over HTTP/1.x stays as sent.
        assert!(line("http://example.com/x", http::Version::HTTP_11)
            .contains("\"GET http://example.com/x HTTP/1.1\""));
        assert!(line("/x", http::Version::HTTP_10).contains("\"GET /x HTTP/1.0\""));
    }

    #[test]
    fn a_kept_request_id_is_escaped_in_the_hoard_line() {
        let mut rec = Record::start(
            SystemTime::UNIX_EPOCH,
            "192.0.2.1".parse().unwrap(),
            http::Method::GET,
            &http::HeaderMap::new(),
            "/x".parse().unwrap(),
            http::Version::HTTP_11,
        );
        rec.request_id = Some(RequestId::Kept(http::HeaderValue::from_static("lb\"7")));
        let mut s = String::new();
        hoard(&rec, &mut s);
        assert!(s.contains(" lb\\x227 \""), "{s}");
    }

    #[test]
    fn time_local() {
        let mut s = String::new();
        // 2026-11-27T08:15:02Z
        push_time_local(
            &mut s,
            SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_767_302),
        );
        assert_eq!(s, "27/Nov/2026:08:15:02 +0000");
    }
}
