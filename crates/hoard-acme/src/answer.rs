//! A challenge's answer (RFC 8555 §8): what this node presents when the
//! CA validates a name, as the orderer makes it and as members receive it
//! (`crate::share`).

/// One challenge's answer.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Answer {
    /// HTTP-01 (RFC 8555 §8.3).
    Http01 {
        /// The token asked for at `/.well-known/acme-challenge/`.
        token: String,
        /// The answer.
        key_authorization: String,
    },
    /// TLS-ALPN-01 (RFC 8737): the SHA-256 of the key authorization.
    TlsAlpn01 {
        /// The name validated (the handshake's SNI).
        name: String,
        /// SHA-256 of the key authorization.
        #[serde(with = "b64")]
        digest: Vec<u8>,
    },
}

/// Bytes as base64 text in the members' JSON messages.
pub(crate) mod b64 {
    use base64::Engine;
    pub fn serialize<S: serde::Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}
