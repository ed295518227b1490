//! The raw mirror of a listener's `tls` table, its certificate file names
//! and list, deserialized with messages that say what to write when a
//! table stands where a file name or a list belongs (the usual slip
//! between `cert`/`key` and `certs`); read by `crate::certs`.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use toml::Spanned;

/// What to write for several certificates (in error messages).
pub(crate) const SEVERAL: &str =
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
pub fn tls_table<'de, D: Deserializer<'de>>(d: D) -> Result<Option<super::RawTls>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = super::RawTls;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table, as `tls = { cert = \"cert.pem\", key = \"key.pem\" }`")
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
            super::RawTls::deserialize(de::value::MapAccessDeserializer::new(map))
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
