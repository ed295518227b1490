//! Listening sockets handed from one hoard process to the next (a binary
//! upgrade, `SIGUSR2`).
//!
//! The old process lists its sockets ([`crate::Proxy::inheritable`]): each
//! client listener's TCP socket, its HTTP/3 UDP socket, and the admin
//! listener. The new process receives them as open file descriptors and
//! finds them named in the environment variable [`ENV`], one entry per
//! socket, `KIND:FD:ADDRESS` joined by commas (`tcp:7:0.0.0.0:80,
//! udp:9:0.0.0.0:443,admin:8:127.0.0.1:8001`), where ADDRESS is the address
//! the old configuration gave. A listener of the new configuration with
//! the same kind and configured address adopts the socket instead of
//! binding (so the port never closes: connections waiting in its queue are
//! accepted by the new process); a socket no listener adopts is closed once
//! the proxy has started ([`Inherited`] dropped).
//!
//! This module only names and checks sockets; taking ownership of a
//! descriptor number is the binary's (it knows the numbers are its own).

use std::net::SocketAddr;
use std::os::fd::{OwnedFd, RawFd};

/// The environment variable naming the inherited sockets.
pub const ENV: &str = "HOARD_INHERIT";

/// What an inherited socket is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketKind {
    /// A client listener's TCP socket.
    Tcp,
    /// A client listener's HTTP/3 (QUIC) UDP socket.
    Udp,
    /// The admin listener.
    Admin,
}

impl SocketKind {
    /// The name used in [`ENV`] and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            SocketKind::Tcp => "tcp",
            SocketKind::Udp => "udp",
            SocketKind::Admin => "admin",
        }
    }

    fn parse(s: &str) -> Option<SocketKind> {
        match s {
            "tcp" => Some(SocketKind::Tcp),
            "udp" => Some(SocketKind::Udp),
            "admin" => Some(SocketKind::Admin),
            _ => None,
        }
    }

    fn socket_type(self) -> socket2::Type {
        match self {
            SocketKind::Udp => socket2::Type::DGRAM,
            SocketKind::Tcp | SocketKind::Admin => socket2::Type::STREAM,
        }
    }
}

/// One entry of [`ENV`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// What the socket is for.
    pub kind: SocketKind,
    /// Its descriptor number in the new process.
    pub fd: RawFd,
    /// The address the old configuration gave its listener.
    pub addr: SocketAddr,
}

/// The value of [`ENV`] for these entries.
pub fn env_value(entries: &[Entry]) -> String {
    let parts: Vec<String> = entries
        .iter()
        .map(|e| format!("{}:{}:{}", e.kind.as_str(), e.fd, e.addr))
        .collect();
    parts.join(",")
}

/// Parses the value of [`ENV`].
///
/// # Errors
/// An entry that is not `KIND:FD:ADDRESS`, named in the message.
pub fn parse_env(value: &str) -> Result<Vec<Entry>, String> {
    let mut out = Vec::new();
    for part in value.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("{ENV}: {part:?} is not KIND:FD:ADDRESS");
        let mut it = part.splitn(3, ':');
        let kind = it.next().and_then(SocketKind::parse).ok_or_else(bad)?;
        let fd: RawFd = it.next().and_then(|f| f.parse().ok()).ok_or_else(bad)?;
        let addr: SocketAddr = it.next().and_then(|a| a.parse().ok()).ok_or_else(bad)?;
        if fd < 3 {
            return Err(bad());
        }
        out.push(Entry { kind, fd, addr });
    }
    Ok(out)
}

/// Sockets received from the previous process, taken one by one by the
/// listeners that match them; the rest are closed when this is dropped.
#[derive(Debug, Default)]
pub struct Inherited {
    sockets: parking_lot::Mutex<Vec<(SocketKind, SocketAddr, OwnedFd)>>,
}

impl Inherited {
    /// Sockets named by kind and configured address.
    pub fn new(sockets: Vec<(SocketKind, SocketAddr, OwnedFd)>) -> Inherited {
        Inherited {
            sockets: parking_lot::Mutex::new(sockets),
        }
    }

    /// True when nothing was inherited.
    pub fn is_empty(&self) -> bool {
        self.sockets.lock().is_empty()
    }

    /// Takes the socket of `kind` whose listener was configured at `addr`,
    /// when it is a socket of the right type bound where it should be.
    fn take(&self, kind: SocketKind, addr: SocketAddr) -> Option<OwnedFd> {
        let mut sockets = self.sockets.lock();
        let at = sockets
            .iter()
            .position(|(k, a, _)| *k == kind && *a == addr)?;
        let (_, _, fd) = sockets.remove(at);
        let sock = socket2::SockRef::from(&fd);
        let bound = sock.local_addr().ok().and_then(|a| a.as_socket());
        let fits = sock.r#type().ok() == Some(kind.socket_type())
            && bound.is_some_and(|b| addr.port() == 0 || b == addr);
        if !fits {
            tracing::warn!(kind = kind.as_str(), %addr, ?bound, "inherited socket does not fit its listener; binding a new one");
            return None;
        }
        // Owned again by this process alone: not passed on by accident.
        if let Err(e) = sock.set_cloexec(true) {
            tracing::warn!(error = %e, "inherited socket: cannot set FD_CLOEXEC");
        }
        if let Err(e) = sock.set_nonblocking(true) {
            tracing::warn!(error = %e, "inherited socket: cannot make it non-blocking");
            return None;
        }
        tracing::info!(kind = kind.as_str(), %addr, "listening socket inherited");
        Some(fd)
    }

    /// The TCP socket a client listener configured at `addr` adopts.
    pub fn tcp(&self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        self.take(SocketKind::Tcp, addr).map(Into::into)
    }

    /// The UDP socket of the HTTP/3 endpoint of the listener at `addr`.
    pub fn udp(&self, addr: SocketAddr) -> Option<std::net::UdpSocket> {
        self.take(SocketKind::Udp, addr).map(Into::into)
    }

    /// The admin listener's socket.
    pub fn admin(&self, addr: SocketAddr) -> Option<std::net::TcpListener> {
        self.take(SocketKind::Admin, addr).map(Into::into)
    }
}

impl Drop for Inherited {
    fn drop(&mut self) {
        for (kind, addr, _) in self.sockets.lock().iter() {
            tracing::info!(kind = kind.as_str(), %addr, "inherited socket no longer configured; closed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_round_trip() {
        let entries = vec![
            Entry {
                kind: SocketKind::Tcp,
                fd: 7,
                addr: "0.0.0.0:80".parse().unwrap(),
            },
            Entry {
                kind: SocketKind::Udp,
                fd: 9,
                addr: "[::1]:443".parse().unwrap(),
            },
            Entry {
                kind: SocketKind::Admin,
                fd: 8,
                addr: "127.0.0.1:8001".parse().unwrap(),
            },
        ];
        let v = env_value(&entries);
        assert_eq!(v, "tcp:7:0.0.0.0:80,udp:9:[::1]:443,admin:8:127.0.0.1:8001");
        assert_eq!(parse_env(&v).unwrap(), entries);
        assert_eq!(parse_env("").unwrap(), vec![]);
    }

    #[test]
    fn env_errors_name_the_entry() {
        for bad in [
            "sctp:7:0.0.0.0:80",
            "tcp:x:0.0.0.0:80",
            "tcp:7:nowhere",
            "tcp:1:0.0.0.0:80",
        ] {
            let e = parse_env(bad).unwrap_err();
            assert!(e.contains(bad), "{e}");
        }
    }
}
