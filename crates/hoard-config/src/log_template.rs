//! `[access_log] format = "custom"` with a `template`: nginx's
//! `log_format` (and varnishncsa's `-F`) habits. The template is text with
//! `$name` (or `${name}`) variables, parsed once here; the access log's
//! writer thread formats it (`hoard_proxy::access_log`).

/// A variable of a custom access log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogVar {
    /// `$remote_addr`.
    RemoteAddr,
    /// `$remote_user` (the Basic credentials' user name).
    RemoteUser,
    /// `$time_local` (`27/Nov/2026:08:15:02 +0000`).
    TimeLocal,
    /// `$time_iso8601`.
    TimeIso8601,
    /// `$msec` (seconds since the epoch, with milliseconds).
    Msec,
    /// `$request` (`GET /a HTTP/1.1`).
    Request,
    /// `$request_method`.
    RequestMethod,
    /// `$request_uri` (path and query).
    RequestUri,
    /// `$uri` (the path).
    Uri,
    /// `$args` (the query).
    Args,
    /// `$host`.
    Host,
    /// `$server_protocol`.
    ServerProtocol,
    /// `$status`.
    Status,
    /// `$body_bytes_sent`.
    BodyBytesSent,
    /// `$http_referer`.
    HttpReferer,
    /// `$http_user_agent`.
    HttpUserAgent,
    /// `$request_time` (seconds, with milliseconds).
    RequestTime,
    /// `$upstream_response_time` (seconds, or `-`).
    UpstreamResponseTime,
    /// `$cache_status` and `$upstream_cache_status` (`HIT`, `MISS`...).
    CacheStatus,
    /// `$request_id`.
    RequestId,
    /// `$upstream_tries` (servers tried).
    UpstreamTries,
}

const VARS: [(&str, LogVar); 22] = [
    ("remote_addr", LogVar::RemoteAddr),
    ("remote_user", LogVar::RemoteUser),
    ("time_local", LogVar::TimeLocal),
    ("time_iso8601", LogVar::TimeIso8601),
    ("msec", LogVar::Msec),
    ("request", LogVar::Request),
    ("request_method", LogVar::RequestMethod),
    ("request_uri", LogVar::RequestUri),
    ("uri", LogVar::Uri),
    ("args", LogVar::Args),
    ("host", LogVar::Host),
    ("server_protocol", LogVar::ServerProtocol),
    ("status", LogVar::Status),
    ("body_bytes_sent", LogVar::BodyBytesSent),
    ("http_referer", LogVar::HttpReferer),
    ("http_user_agent", LogVar::HttpUserAgent),
    ("request_time", LogVar::RequestTime),
    ("upstream_response_time", LogVar::UpstreamResponseTime),
    ("cache_status", LogVar::CacheStatus),
    ("upstream_cache_status", LogVar::CacheStatus),
    ("request_id", LogVar::RequestId),
    ("upstream_tries", LogVar::UpstreamTries),
];

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogPart {
    /// Text as written.
    Lit(String),
    /// A variable.
    Var(LogVar),
}

/// A parsed custom line (without its newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogTemplate {
    /// In order.
    pub parts: Vec<LogPart>,
}

impl LogTemplate {
    /// Parses `text`; the error names what is wrong.
    ///
    /// # Errors
    /// An unknown variable, `$` without a name, `${` without `}`.
    pub fn parse(text: &str) -> Result<LogTemplate, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            rest = &rest[at + 1..];
            if let Some(r) = rest.strip_prefix('$') {
                lit.push('$');
                rest = r;
                continue;
            }
            let (name, after) = if let Some(r) = rest.strip_prefix('{') {
                let end = r.find('}').ok_or_else(|| "`${` without `}`".to_string())?;
                (&r[..end], &r[end + 1..])
            } else {
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            };
            if name.is_empty() {
                return Err("`$` without a variable name (`$$` is a `$`)".into());
            }
            let Some((_, var)) = VARS.iter().find(|(n, _)| *n == name) else {
                let known: Vec<String> = VARS.iter().map(|(n, _)| format!("${n}")).collect();
                return Err(format!(
                    "unknown variable `${name}` (known: {})",
                    known.join(", ")
                ));
            };
            if !lit.is_empty() {
                parts.push(LogPart::Lit(std::mem::take(&mut lit)));
            }
            parts.push(LogPart::Var(*var));
            rest = after;
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(LogPart::Lit(lit));
        }
        if parts.is_empty() {
            return Err("is empty".into());
        }
        Ok(LogTemplate { parts })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nginx_style() {
        let t = LogTemplate::parse(
            "$remote_addr [${time_local}] \"$request\" $$ $upstream_cache_status",
        )
        .unwrap();
        assert_eq!(t.parts[0], LogPart::Var(LogVar::RemoteAddr));
        assert_eq!(t.parts[1], LogPart::Lit(" [".into()));
        assert_eq!(t.parts.last(), Some(&LogPart::Var(LogVar::CacheStatus)));
        assert!(LogTemplate::parse("$nope")
            .unwrap_err()
            .contains("unknown variable `$nope`"));
        assert!(LogTemplate::parse("a $").is_err());
        assert!(LogTemplate::parse("").is_err());
    }
}
