//! Checks of `[[listener]]` that a listener's own keys do not show: the
//! PROXY protocol's trusted peers, and addresses two listeners would both
//! bind. Each is refused by `hoard check` (and a reload) with the key and
//! line, instead of failing at start or trusting every peer.

use std::net::SocketAddr;
use std::ops::Range;

use toml::Spanned;

use super::ops::Cidr;
use super::{ConfigError, ListenerConfig, Resolver};

/// The sysctl saying whether an IPv6 socket on `[::]` takes IPv4 too (`0`:
/// it does, Linux's default; hoard leaves `IPV6_V6ONLY` as the system has it).
const BINDV6ONLY: &str = "/proc/sys/net/ipv6/bindv6only";

impl Resolver<'_> {
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
    use crate::config::Config;

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
