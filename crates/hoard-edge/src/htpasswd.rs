//! Apache htpasswd files, as nginx's `auth_basic_user_file` reads them:
//! one `user:hash` per line, `#` comments and blank lines skipped.
//!
//! Hashes understood: bcrypt (`$2y$`, `$2b$`, `$2a$`; `htpasswd -B`), Apache
//! MD5 (`$apr1$`; `htpasswd -m`, the default of older `htpasswd`) and SHA-1
//! (`{SHA}`; `htpasswd -s`). A line in any other form (crypt(3) DES, plain
//! text) is refused with its line number, so a file is never half read.
//! Digests are compared in constant time; bcrypt compares its own way
//! (also constant time).

use std::collections::HashMap;

use base64::Engine as _;
use md5::{Digest as _, Md5};
use sha1::Sha1;
use subtle::ConstantTimeEq as _;

/// One user's stored hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hash {
    /// `$2y$...`: verified by the `bcrypt` crate (slow on purpose: see
    /// [`Hash::is_slow`]).
    Bcrypt(String),
    /// `$apr1$SALT$HASH`: Apache's MD5-crypt variant.
    Apr1 {
        /// Up to 8 characters.
        salt: String,
        /// 22 characters of crypt's base 64.
        hash: String,
    },
    /// `{SHA}BASE64`: the SHA-1 digest of the password.
    Sha1([u8; 20]),
}

/// The users of one file.
#[derive(Debug, Clone, Default)]
pub struct Users {
    users: HashMap<String, Hash>,
}

impl Users {
    /// Parses a file's text.
    ///
    /// # Errors
    /// `(line, message)`: the first line that is not `user:hash` in a known form.
    pub fn parse(text: &str) -> Result<Users, (usize, String)> {
        let mut users = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let Some((user, hash)) = line.split_once(':') else {
                return Err((n, "expected `user:hash`".into()));
            };
            if user.is_empty() {
                return Err((n, "empty user name".into()));
            }
            let hash = Hash::parse(hash).map_err(|m| (n, format!("user {user:?}: {m}")))?;
            users.insert(user.to_string(), hash);
        }
        Ok(Users { users })
    }

    /// How many users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// True when the file names no user.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// The hash of `user`, if the file names it.
    pub fn get(&self, user: &str) -> Option<&Hash> {
        self.users.get(user)
    }
}

impl Hash {
    fn parse(h: &str) -> Result<Hash, String> {
        if ["$2y$", "$2b$", "$2a$"].iter().any(|p| h.starts_with(p)) {
            // Checked now, not at the first login.
            bcrypt::verify("", h).map_err(|e| format!("bad bcrypt hash: {e}"))?;
            return Ok(Hash::Bcrypt(h.to_string()));
        }
        if let Some(rest) = h.strip_prefix("$apr1$") {
            let (salt, hash) = rest
                .split_once('$')
                .ok_or("bad $apr1$ hash: expected $apr1$SALT$HASH")?;
            if salt.is_empty() || salt.len() > 8 || hash.len() != 22 {
                return Err("bad $apr1$ hash: salt of 1 to 8 and hash of 22 characters".into());
            }
            return Ok(Hash::Apr1 {
                salt: salt.to_string(),
                hash: hash.to_string(),
            });
        }
        if let Some(b) = h.strip_prefix("{SHA}") {
            let d = base64::engine::general_purpose::STANDARD
                .decode(b)
                .ok()
                .and_then(|d| <[u8; 20]>::try_from(d).ok())
                .ok_or("bad {SHA} hash: expected the base64 of 20 bytes")?;
            return Ok(Hash::Sha1(d));
        }
        Err(
            "unsupported hash (use bcrypt `htpasswd -B`, or `-m` for $apr1$, or `-s` for {SHA}; \
             crypt(3) and plain text are refused)"
                .into(),
        )
    }

    /// True for hashes that take milliseconds to check (bcrypt): the
    /// caller runs them off the async workers.
    pub fn is_slow(&self) -> bool {
        matches!(self, Hash::Bcrypt(_))
    }

    /// True when `password` matches.
    pub fn verify(&self, password: &[u8]) -> bool {
        match self {
            Hash::Bcrypt(h) => bcrypt::verify(password, h).unwrap_or(false),
            Hash::Apr1 { salt, hash } => apr1(password, salt.as_bytes())
                .as_bytes()
                .ct_eq(hash.as_bytes())
                .into(),
            Hash::Sha1(d) => Sha1::digest(password).as_slice().ct_eq(d).into(),
        }
    }
}

/// Apache's `$apr1$` hash of `pw` with `salt` (the 22 characters after the
/// salt): FreeBSD's MD5-crypt with the magic `$apr1$`.
fn apr1(pw: &[u8], salt: &[u8]) -> String {
    const MAGIC: &[u8] = b"$apr1$";
    let mut ctx = Md5::new();
    ctx.update(pw);
    ctx.update(MAGIC);
    ctx.update(salt);
    let alt = Md5::new()
        .chain_update(pw)
        .chain_update(salt)
        .chain_update(pw)
        .finalize();
    let mut left = pw.len();
    while left > 0 {
        let n = left.min(16);
        ctx.update(&alt[..n]);
        left -= n;
    }
    let mut i = pw.len();
    while i > 0 {
        if i & 1 == 1 {
            ctx.update([0u8]);
        } else {
            ctx.update(&pw[..1]);
        }
        i >>= 1;
    }
    let mut fin = ctx.finalize();
    for round in 0..1000 {
        let mut c = Md5::new();
        if round & 1 == 1 {
            c.update(pw);
        } else {
            c.update(fin);
        }
        if round % 3 != 0 {
            c.update(salt);
        }
        if round % 7 != 0 {
            c.update(pw);
        }
        if round & 1 == 1 {
            c.update(fin);
        } else {
            c.update(pw);
        }
        fin = c.finalize();
    }
    const ITOA64: &[u8; 64] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = String::with_capacity(22);
    let mut to64 = |mut v: u32, n: usize| {
        for _ in 0..n {
            out.push(char::from(ITOA64[(v & 0x3f) as usize]));
            v >>= 6;
        }
    };
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        to64(
            (u32::from(fin[a]) << 16) | (u32::from(fin[b]) << 8) | u32::from(fin[c]),
            4,
        );
    }
    to64(u32::from(fin[11]), 2);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // Vectors made with `openssl passwd -apr1` and `htpasswd -s`.
    #[test]
    fn apr1_matches_apache() {
        let u = Users::parse(
            "# staging\n\nuser:$apr1$lZL6V/ci$eIMz/iKDkbtys/uU7LEK00\n\
             ann:$apr1$RandSalt$PgCXHRrkpSt4cbyC2C6bm/\n",
        )
        .unwrap();
        assert_eq!(u.len(), 2);
        assert!(u.get("user").unwrap().verify(b"password"));
        assert!(!u.get("user").unwrap().verify(b"passwore"));
        assert!(u.get("ann").unwrap().verify(b"password"));
    }

    #[test]
    fn sha1_and_bcrypt() {
        // {SHA} of "password".
        let u = Users::parse("s:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n").unwrap();
        assert!(u.get("s").unwrap().verify(b"password"));
        assert!(!u.get("s").unwrap().verify(b"Password"));
        let h = bcrypt::hash("pw", 4).unwrap().replacen("$2b$", "$2y$", 1);
        let u = Users::parse(&format!("b:{h}\n")).unwrap();
        assert!(u.get("b").unwrap().is_slow());
        assert!(u.get("b").unwrap().verify(b"pw"));
        assert!(!u.get("b").unwrap().verify(b"pW"));
    }

    #[test]
    fn refuses_malformed_lines() {
        assert_eq!(
            Users::parse("a:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\nnocolon\n")
                .unwrap_err()
                .0,
            2
        );
        assert!(Users::parse("a:plain")
            .unwrap_err()
            .1
            .contains("unsupported hash"));
        assert!(Users::parse("a:$apr1$nosalt")
            .unwrap_err()
            .1
            .contains("$apr1$"));
        assert!(Users::parse(":{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=")
            .unwrap_err()
            .1
            .contains("empty user"));
        assert!(Users::parse("a:$2y$05$short")
            .unwrap_err()
            .1
            .contains("bcrypt"));
        assert!(Users::parse("a:{SHA}AAAA").unwrap_err().1.contains("{SHA}"));
    }
}
