//! Why a TLS connection failed, classified for the log, the metrics and
//! `Cache-Status` (`detail=tls-untrusted`, ...): a plain value that the
//! errors of every layer can carry.

use rustls::CertificateError;

/// Why a connection's TLS failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsFailure {
    /// The certificate does not chain to a trusted root (or is self-signed).
    Untrusted,
    /// The certificate is expired or not yet valid.
    Expired,
    /// The certificate is not valid for the name verified.
    Name,
    /// The origin asked for a client certificate hoard does not have, or
    /// refused the one it sent.
    ClientCert,
    /// Anything else: not TLS at all (a plaintext server), no common
    /// version or cipher, a broken message.
    Handshake,
}

impl TlsFailure {
    /// The name in logs, metrics and `Cache-Status`.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsFailure::Untrusted => "tls-untrusted",
            TlsFailure::Expired => "tls-expired",
            TlsFailure::Name => "tls-name",
            TlsFailure::ClientCert => "tls-client-cert",
            TlsFailure::Handshake => "tls-handshake",
        }
    }

    /// Classifies an error of a TLS connection (its source chain is walked
    /// for a [`rustls::Error`]); `None` when it is not a TLS error.
    pub fn of(e: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
        let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
        while let Some(err) = cur {
            if let Some(r) = err.downcast_ref::<rustls::Error>() {
                return Some(Self::of_rustls(r));
            }
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                if let Some(inner) = io.get_ref() {
                    if let Some(r) = inner.downcast_ref::<rustls::Error>() {
                        return Some(Self::of_rustls(r));
                    }
                }
            }
            cur = err.source();
        }
        None
    }

    fn of_rustls(e: &rustls::Error) -> TlsFailure {
        use rustls::AlertDescription as A;
        match e {
            rustls::Error::InvalidCertificate(c) => match c {
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => TlsFailure::Expired,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. } => TlsFailure::Name,
                _ => TlsFailure::Untrusted,
            },
            rustls::Error::AlertReceived(
                A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::AccessDenied,
            ) => TlsFailure::ClientCert,
            _ => TlsFailure::Handshake,
        }
    }
}
