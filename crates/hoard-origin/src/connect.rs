//! Opening a connection to one server of an upstream: TCP or a Unix
//! socket, TLS for an `https://` server, then the HTTP/1.1 handshake.

use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::{tls, ReqBody, Upstream};
use crate::error::{ErrorKind, ProxyError};

impl Upstream {
    /// Opens a connection to server `i`: TCP, then TLS for an `https://`
    /// server (the whole within `connect_timeout`), then the HTTP/1.1
    /// handshake.
    pub(super) async fn connect(
        &self,
        i: usize,
    ) -> Result<hyper::client::conn::http1::SendRequest<ReqBody>, ProxyError> {
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
            let sender = self.handshake(authority, TokioIo::new(stream)).await?;
            self.counters.inc(&self.counters.origin_connections_opened);
            return Ok(sender);
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
        let sender = match (&self.cfg.tls, server.tls) {
            (Some(tls), true) => {
                let name = tls::server_name(tls, &server.host).map_err(|m| {
                    ProxyError::origin(
                        ErrorKind::Tls(crate::tls_failure::TlsFailure::Name),
                        format!("{authority}: server name {m}"),
                    )
                })?;
                let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
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
                self.handshake(authority, TokioIo::new(stream)).await?
            }
            _ => self.handshake(authority, TokioIo::new(stream)).await?,
        };
        self.counters.inc(&self.counters.origin_connections_opened);
        Ok(sender)
    }

    /// The HTTP/1.1 handshake over an open stream; its connection task runs
    /// on its own.
    async fn handshake<T>(
        &self,
        authority: &str,
        io: T,
    ) -> Result<hyper::client::conn::http1::SendRequest<ReqBody>, ProxyError>
    where
        T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
            .handshake(io)
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
        Ok(sender)
    }
}
