//! HTTP Basic authentication of a route (RFC 7617; nginx `auth_basic` and
//! `auth_basic_user_file`), checked before any lookup so that a stored
//! response never reaches a request without valid credentials.
//!
//! The credentials are hoard's: `Authorization` is removed before the
//! request goes on, so the origin never sees the password and the route
//! caches as any other (RFC 9111 §3.5 would otherwise keep such responses
//! out of a shared cache).
//!
//! bcrypt takes milliseconds on purpose, so it runs on the blocking pool,
//! and a header that verified is remembered (up to [`REMEMBERED`] of them,
//! for this configuration only: a reload reads the file again and forgets
//! them), so a logged-in client pays for bcrypt once, not per request.

use std::sync::Arc;

use base64::Engine as _;
use http::header::{HeaderMap, HeaderValue, AUTHORIZATION};

use super::htpasswd::Users;

/// How many verified `Authorization` values are remembered.
pub const REMEMBERED: usize = 1024;

/// See the module docs.
#[derive(Debug)]
pub struct BasicAuth {
    /// `WWW-Authenticate` of the 401.
    pub challenge: HeaderValue,
    users: Arc<Users>,
    verified: quick_cache::sync::Cache<Box<[u8]>, ()>,
}

impl BasicAuth {
    /// A check against `users`, answering 401s with `realm`.
    ///
    /// # Errors
    /// A realm that cannot be sent in a header field.
    pub fn new(realm: &str, users: Users) -> Result<BasicAuth, String> {
        if realm.contains('"') || realm.contains('\\') {
            return Err(format!("{realm:?}: a realm cannot hold `\"` or `\\`"));
        }
        let challenge =
            HeaderValue::from_str(&format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
                .map_err(|_| format!("{realm:?} cannot be sent in WWW-Authenticate"))?;
        Ok(BasicAuth {
            challenge,
            users: Arc::new(users),
            verified: quick_cache::sync::Cache::new(REMEMBERED),
        })
    }

    /// True when `headers` carry credentials of a user of the file.
    pub async fn admits(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(AUTHORIZATION) else {
            return false;
        };
        let raw = value.as_bytes();
        if self.verified.get(raw).is_some() {
            return true;
        }
        let Some((user, password)) = credentials(raw) else {
            return false;
        };
        let Some(hash) = self.users.get(&user) else {
            return false;
        };
        let ok = if hash.is_slow() {
            let hash = hash.clone();
            tokio::task::spawn_blocking(move || hash.verify(&password))
                .await
                .unwrap_or(false)
        } else {
            hash.verify(&password)
        };
        if ok {
            self.verified.insert(raw.into(), ());
        }
        ok
    }
}

/// `(user, password)` from `Basic BASE64(user:password)`.
pub fn credentials(raw: &[u8]) -> Option<(String, Vec<u8>)> {
    let s = std::str::from_utf8(raw).ok()?.trim();
    let (scheme, token) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .ok()?;
    let colon = decoded.iter().position(|b| *b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_basic_credentials() {
        // "ann:pass:word"
        assert_eq!(
            credentials(b"Basic YW5uOnBhc3M6d29yZA=="),
            Some(("ann".into(), b"pass:word".to_vec()))
        );
        assert_eq!(credentials(b"Bearer YW5uOnBhc3M="), None);
        assert_eq!(credentials(b"Basic !!!"), None);
        assert_eq!(credentials(b"Basic bm9jb2xvbg=="), None);
    }
}
