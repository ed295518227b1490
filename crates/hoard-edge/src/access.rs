//! Access by client address (nginx `allow` / `deny`): an address in `deny`
//! is refused; when `allow` is set, only addresses in it are let in. So
//! `allow = ["10.0.0.0/8"]`, `deny = ["10.0.0.66/32"]` lets the network in
//! but one host. Refused requests get 403 before any lookup.

use std::net::IpAddr;

use crate::cidr::Cidr;

/// See the module docs.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// When not empty: only these.
    pub allow: Vec<Cidr>,
    /// Never these.
    pub deny: Vec<Cidr>,
}

impl Access {
    /// True when there is nothing to check.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }

    /// True when `client` may be served.
    pub fn admits(&self, client: IpAddr) -> bool {
        if self.deny.iter().any(|c| c.contains(client)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|c| c.contains(client))
    }
}
