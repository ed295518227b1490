//! Certificate files made for tests (with the `testing` feature).

use std::path::{Path, PathBuf};

/// A self-signed certificate for `names` written to `dir/NAME.pem` and
/// `dir/NAME.key`.
pub fn write(dir: &Path, name: &str, names: &[&str]) -> (PathBuf, PathBuf) {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(names)
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let (c, k) = (
        dir.join(format!("{name}.pem")),
        dir.join(format!("{name}.key")),
    );
    std::fs::write(&c, cert.pem()).unwrap();
    std::fs::write(&k, key.serialize_pem()).unwrap();
    (c, k)
}
