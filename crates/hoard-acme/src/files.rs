//! What ACME keeps on disk: the account (`account.json`, for one CA
//! directory) at the top of the ACME directory, and per certificate a
//! directory named after its first name holding `cert.pem` (the chain),
//! `key.pem` (mode 0600) and `names`. Every file is written aside and
//! renamed, so a crash leaves the old file or the new one.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use instant_acme::AccountCredentials;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// A certificate and what it is good for.
#[derive(Clone)]
pub(crate) struct Issued {
    pub key: Arc<CertifiedKey>,
    pub not_before: SystemTime,
    pub not_after: SystemTime,
    pub chain_pem: String,
    pub key_pem: String,
}

impl Issued {
    /// When it is due for renewal: `renew_left` of its lifetime before
    /// it ends.
    pub fn renewal(&self, renew_left: f64) -> SystemTime {
        let life = self
            .not_after
            .duration_since(self.not_before)
            .unwrap_or_default();
        self.not_after
            .checked_sub(life.mul_f64(renew_left))
            .unwrap_or(self.not_after)
    }
}

/// An account's credentials, with the CA they are for.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredAccount {
    pub directory: String,
    pub credentials: AccountCredentials,
}

/// The directory of the certificate for `names` under `dir`.
pub(crate) fn site_dir(dir: &Path, names: &[String]) -> PathBuf {
    dir.join(names.first().map_or("_", String::as_str))
}

/// The certificate stored in `site` for exactly `names`, if it is still
/// valid at `now`. A certificate stored by an earlier version at the top
/// of `dir` (one for every name) is taken when its names match.
pub(crate) fn load(dir: &Path, names: &[String], now: SystemTime) -> Option<Issued> {
    [site_dir(dir, names), dir.to_path_buf()]
        .iter()
        .find_map(|d| load_from(d, names))
        .filter(|i| i.not_after > now)
}

fn load_from(dir: &Path, names: &[String]) -> Option<Issued> {
    let stored = std::fs::read_to_string(dir.join("names")).ok()?;
    if stored.trim() != names.join(" ") {
        return None;
    }
    load_named(dir, names)
}

fn load_named(dir: &Path, names: &[String]) -> Option<Issued> {
    let chain = std::fs::read_to_string(dir.join("cert.pem")).ok()?;
    let key = std::fs::read_to_string(dir.join("key.pem")).ok()?;
    certified_for(chain, key, names)
        .map_err(|e| tracing::warn!(error = %e, dir = %dir.display(), "ACME: stored certificate not usable; ordering a new one"))
        .ok()
}

/// A valid certificate stored in `names`' directory for other names that
/// share one with them (its list was edited since): presented for the
/// names it has until the new one is obtained.
pub(crate) fn load_earlier(dir: &Path, names: &[String], now: SystemTime) -> Option<Issued> {
    let site = site_dir(dir, names);
    let stored = std::fs::read_to_string(site.join("names")).ok()?;
    let stored: Vec<String> = stored.split_whitespace().map(str::to_string).collect();
    if stored == names || !stored.iter().any(|n| names.contains(n)) {
        return None;
    }
    load_named(&site, &stored).filter(|i| i.not_after > now)
}

/// Writes the certificate for `names`, its key and its names.
pub(crate) fn save(dir: &Path, names: &[String], issued: &Issued) -> std::io::Result<()> {
    let site = site_dir(dir, names);
    write_file(&site, "key.pem", issued.key_pem.as_bytes(), true)?;
    write_file(&site, "cert.pem", issued.chain_pem.as_bytes(), false)?;
    write_file(&site, "names", names.join(" ").as_bytes(), false)
}

/// Writes `dir/name` by writing a temporary file and renaming it; a
/// `secret` file is readable by its owner only.
pub(crate) fn write_file(dir: &Path, name: &str, data: &[u8], secret: bool) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{name}.{}.{seq}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if secret { 0o600 } else { 0o644 })
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(name))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// [`write_file`] for a whole path (its directory made when missing).
pub(crate) fn write_path(path: &Path, data: &[u8], secret: bool) -> std::io::Result<()> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(std::io::Error::other("not a file path"));
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    write_file(dir, name, data, secret)
}

/// [`certified`], for a certificate that came from elsewhere (a member,
/// the bus, the disk): its leaf must name every one of `names`.
pub(crate) fn certified_for(
    chain_pem: String,
    key_pem: String,
    names: &[String],
) -> Result<Issued, String> {
    let issued = certified(chain_pem, key_pem)?;
    let leaf = issued
        .key
        .cert
        .first()
        .ok_or("an empty certificate chain")?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("certificate: {e}"))?;
    let sans: Vec<String> = x509
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|s| {
            s.value
                .general_names
                .iter()
                .filter_map(|g| match g {
                    x509_parser::extensions::GeneralName::DNSName(n) => {
                        Some(n.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    match names.iter().find(|n| !sans.contains(n)) {
        Some(missing) => Err(format!("the certificate is not for {missing}")),
        None => Ok(issued),
    }
}

/// A certificate chain and its key (PEM) made ready to present, with the
/// leaf's validity.
pub(crate) fn certified(chain_pem: String, key_pem: String) -> Result<Issued, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("certificate chain: {e}"))?;
    let leaf = chain.first().ok_or("an empty certificate chain")?;
    let (_, x509) =
        x509_parser::parse_x509_certificate(leaf).map_err(|e| format!("certificate: {e}"))?;
    let at = |t: i64| UNIX_EPOCH + Duration::from_secs(t.max(0) as u64);
    let (not_before, not_after) = (
        at(x509.validity().not_before.timestamp()),
        at(x509.validity().not_after.timestamp()),
    );
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| format!("key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    let key =
        CertifiedKey::from_der(chain, key, &provider).map_err(|e| format!("certificate: {e}"))?;
    Ok(Issued {
        key: Arc::new(key),
        not_before,
        not_after,
        chain_pem,
        key_pem,
    })
}
