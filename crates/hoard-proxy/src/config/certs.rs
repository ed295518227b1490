//! A listener's certificate files: `tls = { cert = "...", key = "..." }`
//! (one certificate) or `tls = { certs = [{ cert, key }, ...] }` (picked
//! by SNI, see `crate::server::sni`).
//!
//! The file mirrors here deserialize with messages that say what to
//! write when a table stands where a file name or a list belongs (the
//! usual slip between the two forms), and [`Resolver::listener_certs`]
//! and [`Resolver::tls_files`] read each pair at check time, so that
//! `hoard check` and a reload refuse a missing or broken file or a key
//! that is not the certificate's, naming `listener[i].tls.certs[j]` (or
//! `listener[i].tls.cert`, `.key`) and its line. A certificate of `certs`
//! also needs DNS names (SNI picks by them); the one certificate of
//! `cert` and `key` does not. ACME certificates are not files: they are
//! not read here.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

use super::{ConfigError, Resolver, TlsConfig};
use crate::server::sni;

/// What to write for several certificates (in error messages).
const SEVERAL: &str =
    "`tls = { certs = [{ cert = \"a.pem\", key = \"a.key\" }, { cert = \"b.pem\", key = \"b.key\" }] }`";

/// A file name (`cert`, `key`): a string.
#[derive(Debug, Clone)]
pub struct FileName(pub String);

impl<'de> Deserialize<'de> for FileName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = FileName;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a file name (a string, as `cert = \"cert.pem\"`)")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FileName, E> {
                Ok(FileName(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<FileName, A::Error> {
                Err(de::Error::custom(format!(
                    "a table where a file name belongs: one certificate is \
                     `tls = {{ cert = \"cert.pem\", key = \"key.pem\" }}`, several are {SEVERAL}"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `tls.certs`: a list of certificate tables.
#[derive(Debug)]
pub struct CertList(pub Vec<Spanned<RawCertFiles>>);

/// One certificate of `tls.certs`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCertFiles {
    pub cert: FileName,
    pub key: FileName,
}

impl<'de> Deserialize<'de> for CertList {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CertList;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "a list of certificate tables, as {SEVERAL}")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<CertList, A::Error> {
                let mut out = Vec::new();
                while let Some(c) = seq.next_element()? {
                    out.push(c);
                }
                Ok(CertList(out))
            }
            fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<CertList, A::Error> {
                Err(de::Error::custom(format!(
                    "`certs` is a list, one table per certificate: write \
                     `certs = [{{ cert = \"a.pem\", key = \"a.key\" }}]` (brackets around \
                     the table), as {SEVERAL}"
                )))
            }
        }
        d.deserialize_any(V)
    }
}

/// `[[listener]] tls`: one table (a list there is refused with what to
/// write instead).
pub fn tls_table<'de, D: Deserializer<'de>>(d: D) -> Result<Option<super::raw::RawTls>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = super::raw::RawTls;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table, as `tls = { cert = \"cert.pem\", key = \"key.pem\" }`")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            super::raw::RawTls::deserialize(de::value::MapAccessDeserializer::new(map))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
            Err(de::Error::custom(format!(
                "`tls` is one table, not a list: several certificates go in its `certs`, \
                 as {SEVERAL}"
            )))
        }
    }
    d.deserialize_any(V).map(Some)
}

impl Resolver<'_> {
    /// `listener[i].tls.certs`: each pair read and checked now (see the
    /// module docs); file names as written (like `cert` and `key`).
    pub(super) fn listener_certs(
        &self,
        i: usize,
        certs: Spanned<CertList>,
    ) -> Result<Vec<TlsConfig>, ConfigError> {
        let span = certs.span();
        let certs = certs.into_inner().0;
        if certs.is_empty() {
            return Err(self.err(
                Some(span),
                format!("listener[{i}].tls.certs"),
                format!("an empty list: at least one certificate, as {SEVERAL}"),
            ));
        }
        let mut out = Vec::with_capacity(certs.len());
        for (j, c) in certs.into_iter().enumerate() {
            let span = c.span();
            let c = c.into_inner();
            let files = TlsConfig {
                cert: self.file_path(&c.cert.0),
                key: self.file_path(&c.key.0),
            };
            if let Err(e) = sni::load(&files.cert, &files.key) {
                let key = match e.part() {
                    Some(part) => format!("listener[{i}].tls.certs[{j}].{part}"),
                    None => format!("listener[{i}].tls.certs[{j}]"),
                };
                return Err(self.err(Some(span), key, e.to_string()));
            }
            out.push(files);
        }
        Ok(out)
    }

    /// `listener[i].tls = { cert, key }`: the pair read and checked now (see
    /// the module docs), relative names from the configuration's directory.
    pub(super) fn tls_files(
        &self,
        i: usize,
        cert: Spanned<FileName>,
        key: Spanned<FileName>,
    ) -> Result<TlsConfig, ConfigError> {
        let files = TlsConfig {
            cert: self.file_path(&cert.get_ref().0),
            key: self.file_path(&key.get_ref().0),
        };
        match sni::load(&files.cert, &files.key) {
            Ok(_) | Err(sni::LoadError::NoNames(_)) => Ok(files),
            Err(e) => {
                let (part, span) = match e.part() {
                    Some("key") => (".key", key.span()),
                    Some(_) => (".cert", cert.span()),
                    None => ("", cert.span()),
                };
                Err(self.err(
                    Some(span),
                    format!("listener[{i}].tls{part}"),
                    e.to_string(),
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests;
