//! Address ranges (`10.0.0.0/8`, `::1/128`), as `allow`, `deny`, `purge_allow`
//! and the trusted proxies of forwarding rules name them.

use std::net::IpAddr;

/// An address range, `10.0.0.0/8` or `::1/128` (a bare address is one host).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub bits: u8,
}

impl Cidr {
    /// Parses `ADDR/BITS` or `ADDR`.
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|e| format!("{s:?}: not an address range ({e})"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let bits = match bits {
            None => max,
            Some(b) => b
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| format!("{s:?}: prefix length must be 0..={max}"))?,
        };
        Ok(Cidr { addr, bits })
    }

    /// True when `ip` is in the range (IPv4-mapped IPv6 addresses count as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.addr, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidr_ranges() {
        let c = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(c.contains("10.1.2.3".parse().unwrap()));
        assert!(!c.contains("11.0.0.1".parse().unwrap()));
        assert!(c.contains("::ffff:10.9.9.9".parse().unwrap()));
        let one = Cidr::parse("127.0.0.1").unwrap();
        assert_eq!(one.bits, 32);
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(Cidr::parse("0.0.0.0/0")
            .unwrap()
            .contains("8.8.8.8".parse().unwrap()));
        assert!(Cidr::parse("::1/128")
            .unwrap()
            .contains("::1".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").unwrap_err().contains("0..=32"));
        assert!(Cidr::parse("nope/8").is_err());
    }
}
