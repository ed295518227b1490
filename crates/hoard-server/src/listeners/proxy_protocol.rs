//! The PROXY protocol (HAProxy's, v1 text and v2 binary) on listeners
//! with `proxy_protocol = true`: an L4 balancer in front says who the
//! client is before the first HTTP byte.
//!
//! The header is read exactly (v1: byte by byte up to its CRLF, at most
//! 107 bytes; v2: 16 bytes, then the length they announce), so not one
//! byte of the HTTP stream behind it is consumed; parsing is `ppp`'s. A
//! connection whose first bytes are not a valid header is closed without
//! a response and without reaching the origin. `LOCAL` (v2) and `UNKNOWN`
//! (v1) headers, a balancer's own health checks, keep the socket's peer.

use std::net::SocketAddr;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// The v2 signature.
const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header (`PROXY TCP6 ...` with both addresses and ports).
const V1_MAX: usize = 107;

/// Why a header was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// The connection closed or failed before a whole header.
    Closed,
    /// Not a PROXY header, or a malformed one.
    Invalid,
}

/// Reads the header at the start of `stream`: the client address it
/// carries, or `None` for a header without one (LOCAL, UNKNOWN).
///
/// # Errors
/// [`Refused`] when the bytes are not a whole, valid header.
pub async fn read_header(stream: &mut TcpStream) -> Result<Option<SocketAddr>, Refused> {
    let first = stream.read_u8().await.map_err(|_| Refused::Closed)?;
    match first {
        b'P' => {
            let mut line = vec![first];
            while !line.ends_with(b"\r\n") {
                if line.len() >= V1_MAX {
                    return Err(Refused::Invalid);
                }
                line.push(stream.read_u8().await.map_err(|_| Refused::Closed)?);
            }
            let text = std::str::from_utf8(&line).map_err(|_| Refused::Invalid)?;
            let header = ppp::v1::Header::try_from(text).map_err(|_| Refused::Invalid)?;
            Ok(match header.addresses {
                ppp::v1::Addresses::Tcp4(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v1::Addresses::Tcp6(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v1::Addresses::Unknown => None,
            })
        }
        b'\r' => {
            let mut head = [0u8; 16];
            head[0] = first;
            stream
                .read_exact(&mut head[1..])
                .await
                .map_err(|_| Refused::Closed)?;
            if head[..12] != V2_SIGNATURE {
                return Err(Refused::Invalid);
            }
            let len = usize::from(u16::from_be_bytes([head[14], head[15]]));
            let mut whole = Vec::with_capacity(16 + len);
            whole.extend_from_slice(&head);
            whole.resize(16 + len, 0);
            stream
                .read_exact(&mut whole[16..])
                .await
                .map_err(|_| Refused::Closed)?;
            let header = ppp::v2::Header::try_from(&whole[..]).map_err(|_| Refused::Invalid)?;
            if header.command == ppp::v2::Command::Local {
                return Ok(None);
            }
            Ok(match header.addresses {
                ppp::v2::Addresses::IPv4(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v2::Addresses::IPv6(a) => {
                    Some(SocketAddr::from((a.source_address, a.source_port)))
                }
                ppp::v2::Addresses::Unspecified | ppp::v2::Addresses::Unix(_) => None,
            })
        }
        _ => Err(Refused::Invalid),
    }
}
