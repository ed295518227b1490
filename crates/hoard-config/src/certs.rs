//! A listener's certificate files: `tls = { cert = "...", key = "..." }`
//! (one certificate) or `tls = { certs = [{ cert, key }, ...] }` (picked
//! by SNI, see `hoard_proxy::server::sni`).
//!
//! The file mirrors (`raw::tls`) deserialize with messages that say what to
//! write when a table stands where a file name or a list belongs (the
//! usual slip between the two forms), and [`Resolver::listener_certs`]
//! and [`Resolver::tls_files`] read each pair at check time, so that
//! `hoard check` and a reload refuse a missing or broken file or a key
//! that is not the certificate's, naming `listener[i].tls.certs[j]` (or
//! `listener[i].tls.cert`, `.key`) and its line. A certificate of `certs`
//! also needs DNS names (SNI picks by them); the one certificate of
//! `cert` and `key` does not. ACME certificates are not files: they are
//! not read here.

use toml::Spanned;

use super::raw::tls::{CertList, FileName, SEVERAL};
use super::{ConfigError, Resolver, TlsConfig};
use crate::cert_files as sni;

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
