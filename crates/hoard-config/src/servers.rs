//! An upstream's servers as written in the file (`servers`, `backup`) and
//! its failover keys (`retry_on`, `tries`), checked strictly: a server
//! string is a whole URL or an error, never a URL with words after it.
//! [`RetryOn`] holds the `retry_on` conditions (used by
//! `hoard_proxy::upstream::failover`).

use super::raw::RawUpstream;
use super::{ConfigError, Resolver, ServerAddr, UpstreamConfig};

/// The `retry_on` conditions of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryOn(u8);

const NAMES: [(&str, u8); 5] = [
    ("error", 1),
    ("timeout", 2),
    ("502", 4),
    ("503", 8),
    ("504", 16),
];

impl RetryOn {
    /// No condition: only requests that never reached a server go on.
    pub const NONE: RetryOn = RetryOn(0);
    /// The default, `["error"]`.
    pub const DEFAULT: RetryOn = RetryOn(1);

    /// These conditions and the one called `name`.
    pub fn with(self, name: &str) -> Result<RetryOn, String> {
        match NAMES.iter().find(|(n, _)| *n == name) {
            Some((_, bit)) => Ok(RetryOn(self.0 | bit)),
            None => Err(format!(
                "unknown condition {name:?}: expected \"error\", \"timeout\", \"502\", \"503\" or \"504\""
            )),
        }
    }

    /// Whether the condition called `name` is one of these.
    pub fn has(self, name: &str) -> bool {
        NAMES.iter().any(|(n, bit)| *n == name && self.0 & bit != 0)
    }

    /// Whether an answer with this status goes on to the next server.
    pub fn status(self, status: u16) -> bool {
        match status {
            502 => self.has("502"),
            503 => self.has("503"),
            504 => self.has("504"),
            _ => false,
        }
    }

    /// The condition names, as written in the file.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        NAMES
            .into_iter()
            .filter(move |(_, bit)| self.0 & bit != 0)
            .map(|(n, _)| n)
    }
}

/// Parses one server string: `http://host[:port]`, `https://host[:port]`
/// (ports 80 and 443 by default) or `unix:/absolute/path`.
pub(super) fn parse_server_url(s: &str) -> Result<ServerAddr, String> {
    if s.chars().any(char::is_whitespace) {
        let hint = if s.split_whitespace().nth(1).is_some_and(|w| {
            matches!(
                w,
                "backup" | "down" | "weight" | "max_fails" | "fail_timeout"
            ) || w.starts_with("weight=")
                || w.starts_with("max_fails=")
                || w.starts_with("fail_timeout=")
        }) {
            " (a backup server goes in `backup = [...]`; health is set by the upstream's `down_after`)"
        } else {
            ""
        };
        return Err(format!(
            "{s:?}: a server is one URL with no spaces or words after it{hint}"
        ));
    }
    if let Some(path) = s.strip_prefix("unix:") {
        if !path.starts_with('/') {
            return Err(format!("{s:?}: expected unix:/absolute/path"));
        }
        return Ok(ServerAddr {
            authority: s.to_string(),
            tls: false,
            host: "localhost".into(),
        });
    }
    let (rest, tls) = match (s.strip_prefix("http://"), s.strip_prefix("https://")) {
        (Some(r), _) => (r, false),
        (_, Some(r)) => (r, true),
        _ => {
            return Err(format!(
                "{s:?}: expected http://host:port, https://host:port or unix:/path"
            ))
        }
    };
    let authority = rest.strip_suffix('/').unwrap_or(rest);
    if authority.contains(['/', '?', '#']) {
        return Err(format!("{s:?}: expected a host and port with no path"));
    }
    if authority.contains('@') {
        return Err(format!(
            "{s:?}: user information is not allowed in a server URL"
        ));
    }
    let (host, port) = split_host_port(authority).map_err(|m| format!("{s:?}: {m}"))?;
    let port = port.unwrap_or(if tls { 443 } else { 80 });
    Ok(ServerAddr {
        authority: format!("{host}:{port}"),
        tls,
        host: host.to_string(),
    })
}

/// `host[:port]` with `host` a name, an IPv4 address or a bracketed IPv6
/// one (RFC 3986 §3.2.2), and `port` 1-65535.
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if authority.starts_with('[') {
        let end = authority
            .find(']')
            .ok_or("an IPv6 address without its closing `]`")?;
        let (host, after) = authority.split_at(end + 1);
        let inner = &host[1..host.len() - 1];
        if inner.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{host} is not an IPv6 address"));
        }
        match after {
            "" => (host, None),
            p => (
                host,
                Some(
                    p.strip_prefix(':')
                        .ok_or(format!("unexpected {p:?} after the address"))?,
                ),
            ),
        }
    } else {
        match authority.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("the host is empty".into());
    }
    if !host.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!("{host:?} is not a host name or address"));
    }
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Some(n),
            _ => return Err(format!("{p:?} is not a port (1-65535)")),
        },
    };
    Ok((host, port))
}

impl Resolver<'_> {
    /// A list of server strings (`servers` or `backup`), each checked.
    pub(super) fn server_list(
        &self,
        name: &str,
        key: &str,
        list: &[toml::Spanned<String>],
    ) -> Result<Vec<ServerAddr>, ConfigError> {
        list.iter()
            .enumerate()
            .map(|(j, s)| {
                parse_server_url(s.get_ref())
                    .map_err(|m| self.err(Some(s.span()), format!("upstream.{name}.{key}[{j}]"), m))
            })
            .collect()
    }

    /// `backup`, `retry_on` and `tries` of upstream `name`.
    pub(super) fn failover(
        &self,
        name: &str,
        u: &RawUpstream,
        up: &mut UpstreamConfig,
    ) -> Result<(), ConfigError> {
        up.backup = self.server_list(name, "backup", &u.backup)?;
        if let Some(list) = &u.retry_on {
            let mut on = RetryOn::NONE;
            for (j, c) in list.iter().enumerate() {
                on = on.with(c.get_ref()).map_err(|m| {
                    self.err(Some(c.span()), format!("upstream.{name}.retry_on[{j}]"), m)
                })?;
            }
            up.retry_on = on;
        }
        if let Some(t) = &u.tries {
            if *t.get_ref() == 0 {
                return Err(self.err(
                    Some(t.span()),
                    format!("upstream.{name}.tries"),
                    "must be at least 1 (1 tries one server: no failover)".into(),
                ));
            }
            up.tries = Some(*t.get_ref());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Config, ConfigError};
    use super::RetryOn;

    fn error(text: &str) -> ConfigError {
        Config::from_toml("hoard.toml", text).unwrap_err()
    }

    #[test]
    fn a_server_string_is_one_whole_url() {
        for (server, part) in [
            ("http://127.0.0.1:1 backup", "`backup = [...]`"),
            ("http://a:80 weight=5", "no spaces"),
            ("http://a :80", "no spaces"),
            ("http://a:0", "not a port"),
            ("http://a:65536", "not a port"),
            ("http://a:8o", "not a port"),
            ("http://a:", "not a port"),
            ("http://:80", "host is empty"),
            ("http://", "host is empty"),
            ("http://a:80/app", "no path"),
            ("http://a?x", "no path"),
            ("http://u@a:80", "user information"),
            ("http://a,b:80", "not a host name"),
            ("http://[::1:80", "closing"),
            ("http://[zz]:80", "not an IPv6"),
        ] {
            let e = error(&format!(
                "[upstream.app]\nservers = [\"http://ok:1\",\n  {server:?}]\n"
            ));
            assert_eq!(
                (e.line, e.key.as_str()),
                (Some(3), "upstream.app.servers[1]"),
                "{server}: {e}"
            );
            assert!(e.message.contains(part), "{server}: {e}");
        }
        let e =
            error("[upstream.app]\nservers = [\"http://a:1\"]\nbackup = [\"http://b:2 backup\"]\n");
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(3), "upstream.app.backup[0]"),
            "{e}"
        );
        let c = Config::from_toml(
            "hoard.toml",
            "[upstream.app]\nservers = [\"http://a\", \"https://[::1]:8443/\", \"http://my_host.internal:81\"]\n",
        )
        .unwrap();
        let s = &c.upstreams[0].servers;
        assert_eq!(
            s.iter().map(|s| s.authority.as_str()).collect::<Vec<_>>(),
            ["a:80", "[::1]:8443", "my_host.internal:81"]
        );
        assert_eq!(s[1].host, "[::1]");
    }

    #[test]
    fn backup_retry_on_and_tries() {
        let c = Config::from_toml("hoard.toml", "[upstream.app]\nservers = [\"http://a:1\"]\n")
            .unwrap();
        let u = &c.upstreams[0];
        assert!(u.backup.is_empty());
        assert_eq!((u.retry_on, u.tries), (RetryOn::DEFAULT, None));

        let c = Config::from_toml(
            "hoard.toml",
            "[upstream.app]\nservers = [\"http://a:1\"]\nbackup = [\"https://b\", \"http://c:3\"]\n\
             retry_on = [\"error\", \"timeout\", \"502\", \"503\", \"504\"]\ntries = 2\n",
        )
        .unwrap();
        let u = &c.upstreams[0];
        assert_eq!(u.backup[0].authority, "b:443");
        assert!(u.tls.is_some(), "an https backup gets the TLS client");
        assert_eq!(
            u.retry_on.names().collect::<Vec<_>>(),
            ["error", "timeout", "502", "503", "504"]
        );
        assert_eq!(u.tries, Some(2));
        let c = Config::from_toml(
            "hoard.toml",
            "[upstream.app]\nservers = [\"http://a:1\"]\nretry_on = []\n",
        )
        .unwrap();
        assert_eq!(c.upstreams[0].retry_on, RetryOn::NONE);

        let e =
            error("[upstream.app]\nservers = [\"http://a:1\"]\nretry_on = [\"error\", \"500\"]\n");
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(3), "upstream.app.retry_on[1]"),
            "{e}"
        );
        assert!(e.message.contains("unknown condition \"500\""), "{e}");
        let e = error("[upstream.app]\nservers = [\"http://a:1\"]\n\ntries = 0\n");
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(4), "upstream.app.tries"),
            "{e}"
        );
        assert!(e.message.contains("at least 1"), "{e}");
        let e = error("[upstream.app]\nservers = [\"http://a:1\"]\ntries = -1\n");
        assert_eq!(e.line, Some(3), "{e}");
        let e = error("[upstream.app]\nservers = [\"http://a:1\"]\nretry_on = \"error\"\n");
        assert_eq!(e.line, Some(3), "{e}");
    }
}
