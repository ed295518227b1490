//! Opening a connection to one server of an upstream: TCP or a Unix
//! socket, TLS for an `https://` server, then the HTTP/1.1 or HTTP/2
//! handshake: HTTP/2 when it was offered and, over TLS, the server chose
//! it by ALPN (`h2`), or with prior knowledge (h2c) over plain TCP.

use std::sync::Arc;

use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::h2_watch::{WatchIo, Watched};
use super::h2pool::{self, H2Conn};
use super::{tls, ReqBody, Upstream};
use crate::error::{ErrorKind, ProxyError};

/// What a connection offers to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Offer {
    /// HTTP/1.1 (ALPN `http/1.1` over TLS).
    H1,
    /// HTTP/2: ALPN `h2` over TLS, prior knowledge over plain TCP.
    H2,
    /// Over TLS, ALPN `h2, http/1.1` and the server's choice; over plain
    /// TCP, HTTP/1.1.
    Either,
}

/// An open connection.
#[derive(Debug)]
pub(crate) enum Conn {
    H1(hyper::client::conn::http1::SendRequest<ReqBody>),
    H2(Arc<H2Conn>),
}

/// A connection's byte stream, before the HTTP handshake.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Stream for T {}

impl Upstream {
    /// Opens an HTTP/1.1 connection to server `i` (an upgrade's).
    pub(super) async fn connect_h1(
        &self,
        i: usize,
    ) -> Result<hyper::client::conn::http1::SendRequest<ReqBody>, ProxyError> {
        match self.connect(i, Offer::H1).await? {
            Conn::H1(s) => Ok(s),
            Conn::H2(_) => Err(ProxyError::internal("HTTP/2 where HTTP/1.1 was offered")),
        }
    }

    /// Opens a connection to server `i`: TCP, then TLS for an `https://`
    /// server (the whole within `connect_timeout`), then the HTTP/1.1 or
    /// HTTP/2 handshake (see the module docs); an HTTP/2 connection is
    /// ready once the server's SETTINGS arrived, within the same time.
    pub(crate) async fn connect(&self, i: usize, offer: Offer) -> Result<Conn, ProxyError> {
        let server = self.server(i);
        let authority = server.authority.as_str();
        let deadline = tokio::time::Instant::now() + self.cfg.connect_timeout;
        let timed_out = || {
            self.counters.inc(&self.counters.origin_connect_errors);
            ProxyError::origin(
                ErrorKind::ConnectTimeout,
                format!(
                    "{authority}: connect timed out after {:?}",
                    self.cfg.connect_timeout
                ),
            )
        };
        if let Some(path) = authority.strip_prefix("unix:") {
            // A Unix-socket origin: no TLS, no Nagle; the same timeouts and errors.
            let stream = match tokio::time::timeout_at(
                deadline,
                tokio::net::UnixStream::connect(path),
            )
            .await
            {
                Err(_) => return Err(timed_out()),
                Ok(Err(e)) => {
                    self.counters.inc(&self.counters.origin_connect_errors);
                    return Err(ProxyError::origin(
                        ErrorKind::ConnectRefused,
                        format!("{authority}: {e}"),
                    ));
                }
                Ok(Ok(s)) => s,
            };
            let conn = self
                .handshake(i, authority, stream, offer == Offer::H2, deadline)
                .await?;
            self.opened(&conn);
            return Ok(conn);
        }
        let stream = match tokio::time::timeout_at(deadline, TcpStream::connect(authority)).await {
            Err(_) => return Err(timed_out()),
            Ok(Err(e)) => {
                self.counters.inc(&self.counters.origin_connect_errors);
                return Err(ProxyError::origin(
                    ErrorKind::ConnectRefused,
                    format!("{authority}: {e}"),
                ));
            }
            Ok(Ok(s)) => s,
        };
        let _ = stream.set_nodelay(true);
        let conn = match (&self.cfg.tls, server.tls) {
            (Some(tls), true) => {
                let name = tls::server_name(tls, &server.host).map_err(|m| {
                    ProxyError::origin(
                        ErrorKind::Tls(crate::tls_failure::TlsFailure::Name),
                        format!("{authority}: server name {m}"),
                    )
                })?;
                let config = match offer {
                    Offer::H1 => tls.config.clone(),
                    Offer::H2 | Offer::Either => self.tls_alpn.clone().unwrap_or_else(|| {
                        let mut c = (*tls.config).clone();
                        c.alpn_protocols = alpn(offer);
                        Arc::new(c)
                    }),
                };
                let connector = tokio_rustls::TlsConnector::from(config);
                let stream = match tokio::time::timeout_at(
                    deadline,
                    connector.connect(name, stream),
                )
                .await
                {
                    Err(_) => return Err(timed_out()),
                    Ok(Err(e)) => {
                        let why = crate::tls_failure::TlsFailure::of(&e)
                            .unwrap_or(crate::tls_failure::TlsFailure::Handshake);
                        self.counters.inc(&self.counters.origin_tls_errors);
                        tracing::warn!(origin = %authority, reason = why.as_str(), error = %e, "origin TLS failed");
                        return Err(ProxyError::origin(
                            ErrorKind::Tls(why),
                            format!("{authority}: TLS: {e}"),
                        ));
                    }
                    Ok(Ok(s)) => s,
                };
                let resumed =
                    stream.get_ref().1.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
                self.counters.inc(if resumed {
                    &self.counters.origin_tls_resumed
                } else {
                    &self.counters.origin_tls_handshakes
                });
                // The server's choice; none over TLS: HTTP/2 only when
                // nothing else was offered.
                let h2 = match stream.get_ref().1.alpn_protocol() {
                    Some(p) => p == b"h2",
                    None => offer == Offer::H2,
                };
                self.handshake(i, authority, stream, h2, deadline).await?
            }
            _ => {
                self.handshake(i, authority, stream, offer == Offer::H2, deadline)
                    .await?
            }
        };
        self.opened(&conn);
        Ok(conn)
    }

    /// Counts a connection opened, by protocol.
    fn opened(&self, conn: &Conn) {
        use std::sync::atomic::Ordering::Relaxed;
        self.counters.inc(&self.counters.origin_connections_opened);
        let (counter, k) = match conn {
            Conn::H1(_) => (&self.counters.origin_connections_h1, 0),
            Conn::H2(_) => (&self.counters.origin_connections_h2, 1),
        };
        self.counters.inc(counter);
        self.stats.connections[k].fetch_add(1, Relaxed);
    }

    /// The HTTP/1.1 or HTTP/2 handshake over an open stream; its
    /// connection task runs on its own.
    async fn handshake(
        &self,
        i: usize,
        authority: &str,
        io: impl Stream,
        h2: bool,
        deadline: tokio::time::Instant,
    ) -> Result<Conn, ProxyError> {
        if h2 {
            return self.handshake_h2(i, authority, io, deadline).await;
        }
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(TokioIo::new(io))
            .await
            .map_err(|e| {
                ProxyError::origin(
                    ErrorKind::ConnectRefused,
                    format!("{authority}: handshake: {e}"),
                )
            })?;
        tokio::spawn(async move {
            // With upgrades: a `101` hands the connection to a tunnel.
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "origin connection ended");
            }
        });
        sender.ready().await.map_err(|e| {
            ProxyError::origin(ErrorKind::ConnectRefused, format!("{authority}: {e}"))
        })?;
        Ok(Conn::H1(sender))
    }

    /// The HTTP/2 handshake: the connection's task runs on its own until
    /// the connection ends or has been idle for `idle_timeout` (see
    /// `h2pool`); ready once the server's SETTINGS arrived.
    async fn handshake_h2(
        &self,
        i: usize,
        authority: &str,
        io: impl Stream,
        deadline: tokio::time::Instant,
    ) -> Result<Conn, ProxyError> {
        let refused = |why: String| {
            self.counters.inc(&self.counters.origin_connect_errors);
            ProxyError::origin(
                ErrorKind::ConnectRefused,
                format!("{authority}: HTTP/2 {why}"),
            )
        };
        let watched = Watched::new();
        let io = TokioIo::new(WatchIo::new(io, watched.clone()));
        let (sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .handshake(io)
            .await
            .map_err(|e| refused(format!("handshake: {e}")))?;
        let h2c = H2Conn::new(sender, watched.clone());
        let pool = Arc::downgrade(&self.pools[i].h2);
        let idle = self.pools[i].h2.idle_timeout();
        let task_conn = h2c.clone();
        let ended = watched.clone();
        tokio::spawn(async move {
            tokio::select! {
                r = conn => if let Err(e) = r {
                    tracing::debug!(error = %e, "origin HTTP/2 connection ended");
                },
                () = h2pool::idle_watch(task_conn.clone(), pool, idle) => {}
            }
            task_conn.retire();
            ended.end();
        });
        match tokio::time::timeout_at(deadline, watched.settled()).await {
            Err(_) => {
                h2c.shut();
                self.counters.inc(&self.counters.origin_connect_errors);
                Err(ProxyError::origin(
                    ErrorKind::ConnectTimeout,
                    format!(
                        "{authority}: no HTTP/2 SETTINGS within {:?}",
                        self.cfg.connect_timeout
                    ),
                ))
            }
            Ok(()) if !watched.has_settings() => {
                Err(refused("connection closed before SETTINGS".into()))
            }
            // RFC 9113 §6.5.2: a server that allows no stream does not wish
            // to take requests; waiting on it would hold the request until
            // the read timeout, and the next one would open another.
            Ok(()) if watched.max_streams() == 0 => {
                h2c.shut();
                Err(refused(
                    "allows no stream (SETTINGS_MAX_CONCURRENT_STREAMS = 0)".into(),
                ))
            }
            Ok(()) => Ok(Conn::H2(h2c)),
        }
    }
}

/// The ALPN protocols offered for `offer`.
pub(crate) fn alpn(offer: Offer) -> Vec<Vec<u8>> {
    match offer {
        Offer::H1 => vec![b"http/1.1".to_vec()],
        Offer::H2 => vec![b"h2".to_vec()],
        Offer::Either => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
    }
}
