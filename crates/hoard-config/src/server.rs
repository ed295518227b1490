//! `[server]`: limits and server behaviour ([`ServerConfig`]), read from
//! the file.

use std::time::Duration;

use super::ops::Cidr;
use super::raw::RawServer;
use super::{ConfigError, Resolver};

/// Limits and server behaviour.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Runtime worker threads; 0 = one per core. Default: 0.
    pub threads: usize,
    /// Time allowed to receive a request head. Default: 10s.
    pub header_read_timeout: Duration,
    /// Largest request head (431 beyond). Default: 16 KiB.
    pub max_header_size: usize,
    /// Most request header fields (431 beyond). Default: 100.
    pub max_headers: usize,
    /// Longest request target (414 beyond). Default: 8 KiB.
    pub max_uri_length: usize,
    /// Largest request body (413 beyond). Default: 64 MiB.
    pub max_body_size: u64,
    /// Name in `Via` and `Cache-Status`. Default: `hoard`.
    pub via: String,
    /// Add the cache key to `Cache-Status`. Default: false.
    pub debug_headers: bool,
    /// Send disk hits with `sendfile` on plain HTTP/1.1 connections.
    /// Default: true.
    pub sendfile: bool,
    /// How long a shutdown waits for connections to drain. Default: 10s.
    pub shutdown_timeout: Duration,
    /// Client connections open at most; beyond, new ones are closed at
    /// once (counted as `connections_refused`). Default: 10000.
    pub max_connections: usize,
    /// Requests one keep-alive connection may carry; the last is answered
    /// with `Connection: close`. Default: 10000.
    pub max_requests_per_connection: u64,
    /// Concurrent HTTP/2 streams per connection. Default: 256.
    pub http2_max_streams: u32,
    /// Concurrent HTTP/3 request streams per connection (QUIC's
    /// `initial_max_streams_bidi`). QUIC keeps state on every connection
    /// for each stream a client may open, so this costs memory even when
    /// idle: about 18 KB per connection at 256 against 100. Default: 100,
    /// the floor RFC 9114 §6.1 asks of a server.
    pub http3_max_streams: u32,
    /// A keep-alive connection with no request in flight and no byte either
    /// way for this long is closed (HTTP/2: GOAWAY). Default: 75s.
    pub keep_alive_timeout: Duration,
    /// A response write blocked this long (the client stopped reading)
    /// closes the connection. Default: 60s.
    pub send_timeout: Duration,
    /// HTTP/1.x, once a request (head and body) has been read: a client
    /// that then closes its connection, or only its sending side, is not
    /// looked for while the request is answered. Its request goes on (as
    /// Varnish does, and nginx with `proxy_ignore_client_abort on`); a
    /// half-closed client gets its answer, then the connection closes; a
    /// closed one is found out by a later write or read (a short response
    /// usually still leaves), and so is one that goes away during a long
    /// streamed response. Fills go on without their clients either way.
    /// Default: false (as nginx: the request is dropped as soon as the
    /// client's close arrives).
    pub ignore_client_abort: bool,
    /// An upgrade tunnel with no byte either way this long is closed.
    /// Default: 1h.
    pub tunnel_idle_timeout: Duration,
    /// A request body that stops arriving for this long gets 408. Default: 60s.
    pub body_read_timeout: Duration,
    /// Requests a client may reset (HTTP/2 `RST_STREAM`, or abandon) on one
    /// connection within 10 s before it gets GOAWAY. Default: 200.
    pub max_resets: u64,
    /// Peers whose forwarding chain (`X-Forwarded-For`, `Forwarded`,
    /// `X-Forwarded-Proto`, `X-Forwarded-Host`) is kept and extended. Default: none.
    pub trusted_proxies: Vec<Cidr>,
    /// Who serves: started as root, hoard binds and opens what needs root,
    /// then drops to this user and group (`user`, `group`). Default: none.
    pub run_as: Option<crate::privileges::RunAs>,
}

impl Resolver<'_> {
    /// `[server]`, its defaults filled in.
    pub(super) fn server(&self, s: RawServer) -> Result<ServerConfig, ConfigError> {
        let d = ServerConfig::default();
        Ok(ServerConfig {
            threads: s.threads.unwrap_or(d.threads),
            header_read_timeout: s.header_read_timeout.map_or(d.header_read_timeout, |x| x.0),
            max_header_size: s
                .max_header_size
                .map_or(d.max_header_size, |x| x.0 as usize)
                .max(8192),
            max_headers: s.max_headers.unwrap_or(d.max_headers),
            max_uri_length: s.max_uri_length.map_or(d.max_uri_length, |x| x.0 as usize),
            max_body_size: s.max_body_size.map_or(d.max_body_size, |x| x.0),
            via: self.via(s.via, d.via)?,
            debug_headers: s.debug_headers.unwrap_or(d.debug_headers),
            sendfile: s.sendfile.unwrap_or(d.sendfile),
            shutdown_timeout: s.shutdown_timeout.map_or(d.shutdown_timeout, |x| x.0),
            max_connections: s.max_connections.unwrap_or(d.max_connections).max(1),
            max_requests_per_connection: s
                .max_requests_per_connection
                .unwrap_or(d.max_requests_per_connection)
                .max(1),
            http2_max_streams: s.http2_max_streams.unwrap_or(d.http2_max_streams).max(1),
            http3_max_streams: s.http3_max_streams.unwrap_or(d.http3_max_streams).max(1),
            keep_alive_timeout: s.keep_alive_timeout.map_or(d.keep_alive_timeout, |x| x.0),
            send_timeout: s.send_timeout.map_or(d.send_timeout, |x| x.0),
            ignore_client_abort: s.ignore_client_abort.unwrap_or(d.ignore_client_abort),
            tunnel_idle_timeout: s.tunnel_idle_timeout.map_or(d.tunnel_idle_timeout, |x| x.0),
            body_read_timeout: s.body_read_timeout.map_or(d.body_read_timeout, |x| x.0),
            max_resets: s.max_resets.unwrap_or(d.max_resets).max(1),
            trusted_proxies: s
                .trusted_proxies
                .iter()
                .map(|c| {
                    Cidr::parse(c.get_ref())
                        .map_err(|m| self.err(Some(c.span()), "server.trusted_proxies".into(), m))
                })
                .collect::<Result<_, _>>()?,
            run_as: self.run_as(s.user.as_ref(), s.group.as_ref())?,
        })
    }
}
