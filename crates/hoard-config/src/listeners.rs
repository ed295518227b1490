//! `[[listener]]`: the sockets hoard accepts on ([`ListenerConfig`]), read
//! from the file with their TLS (certificate files, or ACME names) and
//! redirect keys.
//!
//! Checks of `[[listener]]` that a listener's own keys do not show: the
//! PROXY protocol's trusted peers, and addresses two listeners would both
//! bind. Each is refused by `hoard check` (and a reload) with the key and
//! line, instead of failing at start or trusting every peer.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::PathBuf;

use toml::Spanned;

use super::acme::{self, acme_names};
use super::ops::Cidr;
use super::raw::{self, RawListener};
use super::{defaults, sites, ConfigError, Resolver};

/// The sysctl saying whether an IPv6 socket on `[::]` takes IPv4 too (`0`:
/// it does, Linux's default; hoard leaves `IPV6_V6ONLY` as the system has it).
const BINDV6ONLY: &str = "/proc/sys/net/ipv6/bindv6only";

/// A listening socket.
#[derive(Debug, Clone)]
pub struct ListenerConfig {
    /// `name`, for sites' `listeners`.
    pub name: Option<String>,
    /// Address; port 0 picks a free port.
    pub address: SocketAddr,
    /// TLS (HTTP/1.1 and h2 by ALPN); plain otherwise (HTTP/1.1 and h2c prior knowledge).
    pub tls: Option<TlsConfig>,
    /// Certificate files picked by SNI (`tls = { certs = [...] }`), each
    /// for the DNS names of its subjectAltName, the first for no or an
    /// unknown server name (see `hoard_proxy::server::sni`). Empty unless given
    /// (then `tls` is `None`); may go with `acme`.
    pub certs: Vec<TlsConfig>,
    /// Accept HTTP/2. Default: true.
    pub http2: bool,
    /// Also serve HTTP/3 over QUIC on the same port (UDP), advertised with
    /// `Alt-Svc` (TLS listeners only). Default: false.
    pub http3: bool,
    /// PROXY protocol (v1 and v2) expected before every connection's
    /// first byte, from these peers (others are closed; the file needs at
    /// least one); `None`: off.
    pub proxy_protocol: Option<Vec<Cidr>>,
    /// Certificates obtained and renewed over ACME, each for its names
    /// (`tls = { acme = ["a.example", ["b.example", "www.b.example"]] }`:
    /// a name alone is a certificate of its own, a list one certificate
    /// for all its names; lower case, sorted; see `hoard_proxy::acme`). The
    /// listener is a TLS one and picks a certificate by SNI.
    pub acme: Vec<Vec<String>>,
    /// A plain listener that answers every request (but ACME challenges)
    /// with a redirect to HTTPS on this port (`redirect_https = 443`).
    pub redirect_https: Option<u16>,
}

/// Certificate and key files (PEM).
#[derive(Debug, Clone)]
pub struct TlsConfig {
    /// Certificate chain.
    pub cert: PathBuf,
    /// Private key.
    pub key: PathBuf,
}

impl Resolver<'_> {
    /// Every `[[listener]]`; without one, the default listener.
    pub(super) fn listeners(
        &self,
        written: Vec<RawListener>,
    ) -> Result<Vec<ListenerConfig>, ConfigError> {
        let mut listeners = Vec::new();
        let name_spans: Vec<_> = written
            .iter()
            .map(|l| l.name.as_ref().map(|n| n.span()))
            .collect();
        let address_spans: Vec<_> = written.iter().map(|l| l.address.span()).collect();
        for (i, l) in written.into_iter().enumerate() {
            let address = l.address.get_ref().parse::<SocketAddr>().map_err(|e| {
                self.err(
                    Some(l.address.span()),
                    format!("listener[{i}].address"),
                    format!("{:?}: {e}", l.address.get_ref()),
                )
            })?;
            if let Some(h3) = l.http3.as_ref().filter(|h| *h.get_ref()) {
                if l.tls.is_none() {
                    return Err(self.err(
                        Some(h3.span()),
                        format!("listener[{i}].http3"),
                        "needs `tls` (QUIC is always encrypted)".into(),
                    ));
                }
            }
            let (tls, files, acme_names) = match l.tls {
                None => (None, Vec::new(), Vec::new()),
                Some(t) => match (t.cert, t.key, t.acme, t.certs) {
                    (Some(cert), Some(key), None, None) => {
                        (Some(self.tls_files(i, cert, key)?), Vec::new(), Vec::new())
                    }
                    (Some(_), _, _, Some(files)) | (_, Some(_), _, Some(files)) => {
                        return Err(self.err(
                            Some(files.span()),
                            format!("listener[{i}].tls.certs"),
                            "with `cert` and `key`: one or the other (every certificate in `certs`)"
                                .into(),
                        ))
                    }
                    (None, None, None, Some(files)) => {
                        (None, self.listener_certs(i, files)?, Vec::new())
                    }
                    (None, None, Some(certs), files)
                        if !certs.get_ref().is_empty() || files.is_some() =>
                    {
                        let span = certs.span();
                        let certs = certs
                            .into_inner()
                            .iter()
                            .map(|c| match c {
                                raw::RawAcmeCert::Name(n) => acme_names([n.as_str()]),
                                raw::RawAcmeCert::Names(n) => {
                                    acme_names(n.iter().map(String::as_str))
                                }
                            })
                            .collect::<Result<Vec<_>, _>>()
                            .and_then(|certs| {
                                // A name has one certificate, whichever
                                // listener presents it.
                                let mut all: Vec<Vec<String>> = listeners
                                    .iter()
                                    .flat_map(|l: &ListenerConfig| l.acme.clone())
                                    .collect();
                                all.extend(certs.iter().cloned());
                                acme::check_distinct(&all).map(|()| certs)
                            })
                            .map_err(|m| {
                                self.err(Some(span), format!("listener[{i}].tls.acme"), m)
                            })?;
                        let files = match files {
                            Some(f) => self.listener_certs(i, f)?,
                            None => Vec::new(),
                        };
                        (None, files, certs)
                    }
                    (_, _, Some(names), _) => {
                        return Err(self.err(
                            Some(names.span()),
                            format!("listener[{i}].tls.acme"),
                            "names for ACME, without `cert` and `key`".into(),
                        ))
                    }
                    _ => {
                        return Err(self.err(
                            Some(l.address.span()),
                            format!("listener[{i}].tls"),
                            "needs `cert` and `key`, `certs`, or `acme` names".into(),
                        ))
                    }
                },
            };
            if let Some(r) = &l.redirect_https {
                if tls.is_some() || !files.is_empty() || !acme_names.is_empty() {
                    return Err(self.err(
                        Some(r.span()),
                        format!("listener[{i}].redirect_https"),
                        "for a plain listener (this one is TLS)".into(),
                    ));
                }
            }
            listeners.push(ListenerConfig {
                name: l.name.map(Spanned::into_inner),
                address,
                http3: l.http3.as_ref().is_some_and(|h| *h.get_ref()),
                acme: acme_names,
                redirect_https: l.redirect_https.map(|r| r.into_inner()),
                tls,
                certs: files,
                http2: l.http2.unwrap_or(defaults::LISTENER_HTTP2),
                proxy_protocol: self.proxy_protocol(i, l.proxy_protocol, l.proxy_protocol_from)?,
            });
        }
        sites::check_listener_names(self, &listeners, &name_spans)?;
        self.check_addresses(&listeners, &address_spans)?;
        if listeners.is_empty() {
            listeners.push(ListenerConfig::default());
        }
        Ok(listeners)
    }

    /// `listener[i].proxy_protocol` and `proxy_protocol_from`: the peers
    /// whose PROXY header is believed, `None` when the option is off.
    /// The list is required: a header from any peer would let anyone claim
    /// any address, `127.0.0.1` included, for `purge_allow`, `allow` and
    /// `trusted_proxies` (as nginx takes the PROXY address only from
    /// `set_real_ip_from` peers).
    pub(super) fn proxy_protocol(
        &self,
        i: usize,
        on: Option<Spanned<bool>>,
        from: Option<Vec<Spanned<String>>>,
    ) -> Result<Option<Vec<Cidr>>, ConfigError> {
        let key = format!("listener[{i}].proxy_protocol_from");
        match (on, from) {
            (Some(on), from) if *on.get_ref() => {
                let from = from.unwrap_or_default();
                if from.is_empty() {
                    return Err(self.err(
                        Some(on.span()),
                        key,
                        "`proxy_protocol = true` needs the balancers that may send the header, \
                         as `proxy_protocol_from = [\"10.0.0.0/8\"]` (a header from any peer \
                         could claim any client address)"
                            .into(),
                    ));
                }
                from.iter()
                    .map(|c| {
                        Cidr::parse(c.get_ref())
                            .map_err(|m| self.err(Some(c.span()), key.clone(), m))
                    })
                    .collect::<Result<_, _>>()
                    .map(Some)
            }
            (_, Some(from)) if !from.is_empty() => Err(self.err(
                Some(from[0].span()),
                key,
                "needs `proxy_protocol = true`".into(),
            )),
            _ => Ok(None),
        }
    }

    /// Two listeners that would bind the same TCP address: the second is
    /// refused, naming the first. `spans` are the `address` spans, in order.
    pub(super) fn check_addresses(
        &self,
        listeners: &[ListenerConfig],
        spans: &[Range<usize>],
    ) -> Result<(), ConfigError> {
        let dual_stack = std::fs::read_to_string(BINDV6ONLY).is_ok_and(|v| v.trim() == "0");
        for (j, b) in listeners.iter().enumerate() {
            let Some(i) = listeners[..j]
                .iter()
                .position(|a| overlap(a.address, b.address, dual_stack))
            else {
                continue;
            };
            let a = listeners[i].address;
            let why = if a == b.address {
                String::new()
            } else {
                format!(
                    "; {} takes every address of its port{}",
                    if a.ip().is_unspecified() {
                        a
                    } else {
                        b.address
                    },
                    if a.is_ipv4() != b.address.is_ipv4() {
                        ", IPv4 too here (net.ipv6.bindv6only = 0)"
                    } else {
                        ""
                    }
                )
            };
            let line = spans
                .get(i)
                .map(|s| {
                    let (file, line) = self.sources.locate(s.start);
                    format!(" ({file}:{line})")
                })
                .unwrap_or_default();
            return Err(self.err(
                spans.get(j).cloned(),
                format!("listener[{j}].address"),
                format!(
                    "{} collides with listener[{i}]'s {a}{line}{why}: two listeners cannot \
                     bind one address (one listener serves every site)",
                    b.address
                ),
            ));
        }
        Ok(())
    }
}

/// Whether binding `a` and then `b` (TCP, `SO_REUSEADDR`) fails: the same
/// port (not 0, which picks a free one) and the same address, or a
/// wildcard of the family (`0.0.0.0`, `[::]`), or `[::]` and IPv4 on a
/// dual-stack system.
fn overlap(a: SocketAddr, b: SocketAddr, dual_stack: bool) -> bool {
    if a.port() != b.port() || a.port() == 0 {
        return false;
    }
    let covers = |w: SocketAddr, o: SocketAddr| {
        w.ip().is_unspecified() && (w.is_ipv4() == o.is_ipv4() || (w.is_ipv6() && dual_stack))
    };
    a.ip() == b.ip() || covers(a, b) || covers(b, a)
}

#[cfg(test)]
mod tests {
    use super::overlap;
    use crate::Config;

    const UP: &str = "[upstream.app]\nservers = [\"http://a:1\"]\n";

    #[test]
    fn proxy_protocol_needs_its_peers() {
        for from in ["", "proxy_protocol_from = []\n"] {
            let e = Config::from_toml(
                "hoard.toml",
                &format!("[[listener]]\naddress = \"127.0.0.1:0\"\n[[listener]]\naddress = \"127.0.0.1:1\"\nproxy_protocol = true\n{from}{UP}"),
            )
            .unwrap_err();
            assert_eq!(
                (e.line, e.key.as_str()),
                (Some(5), "listener[1].proxy_protocol_from"),
                "{e}"
            );
            assert!(
                e.message.contains("proxy_protocol_from = [\"10.0.0.0/8\"]"),
                "{e}"
            );
        }
        let c = Config::from_toml(
            "hoard.toml",
            &format!("[[listener]]\naddress = \"127.0.0.1:0\"\nproxy_protocol = false\nproxy_protocol_from = []\n{UP}"),
        )
        .unwrap();
        assert_eq!(c.listeners[0].proxy_protocol, None);
    }

    #[test]
    fn two_listeners_on_one_address_are_refused() {
        for (first, second) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("0.0.0.0:8080", "127.0.0.1:8080"),
        ] {
            let e = Config::from_toml(
                "hoard.toml",
                &format!("[[listener]]\naddress = \"{first}\"\n[[listener]]\naddress = \"127.0.0.1:9\"\n[[listener]]\naddress = \"{second}\"\n{UP}"),
            )
            .unwrap_err();
            assert_eq!(
                (e.line, e.key.as_str()),
                (Some(6), "listener[2].address"),
                "{e}"
            );
            assert!(
                e.message
                    .contains(&format!("listener[0]'s {first} (hoard.toml:2)")),
                "{e}"
            );
        }
        // Port 0 picks a free port each time.
        assert!(Config::from_toml(
            "hoard.toml",
            &format!("[[listener]]\naddress = \"127.0.0.1:0\"\n[[listener]]\naddress = \"127.0.0.1:0\"\n{UP}"),
        )
        .is_ok());
    }

    #[test]
    fn overlapping_addresses() {
        let o = |a: &str, b: &str, dual| overlap(a.parse().unwrap(), b.parse().unwrap(), dual);
        assert!(o("127.0.0.1:80", "127.0.0.1:80", false));
        assert!(o("0.0.0.0:80", "127.0.0.1:80", false));
        assert!(o("10.0.0.1:80", "0.0.0.0:80", false));
        assert!(o("[::]:80", "[::1]:80", false));
        assert!(o("[::]:80", "0.0.0.0:80", true));
        assert!(o("127.0.0.1:80", "[::]:80", true));
        assert!(!o("[::]:80", "0.0.0.0:80", false));
        assert!(!o("127.0.0.1:80", "127.0.0.2:80", true));
        assert!(!o("0.0.0.0:80", "0.0.0.0:443", true));
        assert!(!o("127.0.0.1:0", "127.0.0.1:0", true));
    }
}
