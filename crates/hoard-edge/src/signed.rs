//! Signed URLs (`signed_urls`): a link that carries an expiry and a
//! signature over it and the path, checked before any lookup.
//!
//! Two schemes, both over the same message order:
//!
//! | scheme | signature parameter | value |
//! |---|---|---|
//! | `nginx-md5` | `md5` | base64url (no padding, 22 characters) of MD5(`<expires><uri> <secret>`) |
//! | `hmac-sha256` | `signature` | lowercase hex of HMAC-SHA256(secret, `<expires><uri>`) |
//!
//! `nginx-md5` is what nginx checks with
//! `secure_link $arg_md5,$arg_expires; secure_link_md5 "$secure_link_expires$uri SECRET";`,
//! so the links an nginx site hands out keep working. `<expires>` is the
//! parameter's text as sent; `<uri>` is nginx's `$uri`: the path without
//! the query, percent-decoded, with runs of `/` merged into one (the
//! normal form hoard routes has its dot segments removed already).
//!
//! ## Order of the checks (nginx's)
//! 1. each of the two parameters once: missing, given twice, an expiry
//!    that is not a number above 0, a signature of the wrong form →
//!    [`Refusal::Invalid`] (403);
//! 2. the signature, under each secret in turn (a rotation: the first
//!    signs, any verifies), compared in constant time → [`Refusal::Invalid`],
//!    even for a link that expired;
//! 3. the expiry: before `now - leeway` → [`Refusal::Expired`] (410).
//!
//! A valid link's target loses the two parameters (see [`SignedUrls::check`]):
//! the cache key and the origin never see them, so every valid link to a
//! file shares one stored object.
//!
//! ## Cost
//! Functions of the request's path, query and `now` (a link's verdict
//! depends on nothing else), no allocation but the new target: one MD5
//! block (or two SHA-256 blocks: the HMAC key's pads are hashed when the
//! configuration is built) for a short path, the signature decoded on the
//! stack. A link verified lately on the same thread skips the hash
//! ([`memo`]): a popular link costs its parsing and a few comparisons.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use md5::{Digest, Md5};
use ring::hmac;
use subtle::ConstantTimeEq;

mod memo;

/// How links are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// nginx's `secure_link_md5 "$secure_link_expires$uri SECRET"`.
    NginxMd5,
    /// HMAC-SHA256 of `<expires><uri>`, in lowercase hex.
    HmacSha256,
}

impl Scheme {
    /// Every scheme's name, as configured.
    pub const NAMES: [&'static str; 2] = ["nginx-md5", "hmac-sha256"];

    /// The scheme named `name` (`nginx-md5`, `hmac-sha256`).
    pub fn parse(name: &str) -> Option<Scheme> {
        match name {
            "nginx-md5" => Some(Scheme::NginxMd5),
            "hmac-sha256" => Some(Scheme::HmacSha256),
            _ => None,
        }
    }

    /// The scheme's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::NginxMd5 => "nginx-md5",
            Scheme::HmacSha256 => "hmac-sha256",
        }
    }

    /// The signature parameter's default name: `md5` (nginx's
    /// `$arg_md5`), `signature`.
    pub fn default_signature_param(self) -> &'static str {
        match self {
            Scheme::NginxMd5 => "md5",
            Scheme::HmacSha256 => "signature",
        }
    }
}

/// The expiry parameter's default name.
pub const DEFAULT_EXPIRES_PARAM: &str = "expires";

/// Why a link was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No valid signature (403): for the log, what was wrong.
    Invalid(&'static str),
    /// A valid signature whose expiry passed (410).
    Expired,
}

/// One secret, ready to use.
struct Secret {
    /// As configured (`nginx-md5` hashes it after the message).
    text: Box<[u8]>,
    /// Its HMAC key, the pads hashed once (`hmac-sha256`).
    hmac: hmac::Key,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never printed.
        f.write_str("Secret(..)")
    }
}

/// A route's `signed_urls`, built. See the module docs.
#[derive(Debug)]
pub struct SignedUrls {
    scheme: Scheme,
    /// The first signs; any verifies.
    secrets: Box<[Secret]>,
    expires_param: Box<str>,
    signature_param: Box<str>,
    /// Allowed past the expiry (clock skew).
    leeway: Duration,
    /// Its id in the links verified lately (see [`memo`]).
    id: u64,
}

impl SignedUrls {
    /// The rule. `secrets` holds at least one, none empty; the parameter
    /// names are distinct, not empty, and hold no `&`, `=` or `#`
    /// (`hoard_config` says which key is wrong).
    ///
    /// # Errors
    /// What is wrong, when the above does not hold.
    pub fn new(
        scheme: Scheme,
        secrets: &[&str],
        expires_param: &str,
        signature_param: &str,
        leeway: Duration,
    ) -> Result<SignedUrls, String> {
        if secrets.is_empty() {
            return Err("no secret".into());
        }
        if secrets.iter().any(|s| s.is_empty()) {
            return Err("an empty secret signs nothing".into());
        }
        for p in [expires_param, signature_param] {
            param_name_ok(p)?;
        }
        if expires_param.eq_ignore_ascii_case(signature_param) {
            return Err(format!(
                "the expiry and the signature are both {expires_param:?}"
            ));
        }
        Ok(SignedUrls {
            scheme,
            secrets: secrets
                .iter()
                .map(|s| Secret {
                    text: s.as_bytes().into(),
                    hmac: hmac::Key::new(hmac::HMAC_SHA256, s.as_bytes()),
                })
                .collect(),
            expires_param: expires_param.into(),
            signature_param: signature_param.into(),
            leeway,
            id: memo::rule_id(),
        })
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The expiry parameter's name.
    pub fn expires_param(&self) -> &str {
        &self.expires_param
    }

    /// The signature parameter's name.
    pub fn signature_param(&self) -> &str {
        &self.signature_param
    }

    /// Checks the link `path?query` at `now`. `path` is the normal form
    /// hoard routes (dot segments removed, percent-encoded or not). On
    /// success, the target without the two parameters (`path`, then
    /// `?` and the other parameters in their order, if any).
    ///
    /// # Errors
    /// [`Refusal::Invalid`] for a missing, repeated or malformed parameter
    /// or a wrong signature; [`Refusal::Expired`] for a valid signature
    /// past its expiry (and the leeway).
    pub fn check(
        &self,
        path: &str,
        query: Option<&str>,
        now: SystemTime,
    ) -> Result<String, Refusal> {
        let query = query.ok_or(Refusal::Invalid("no signature"))?;
        let q = query.as_bytes();
        // One pass over the pairs: the two values, and how many bytes the
        // others keep. A pair is only compared with the two names (a
        // parameter is named as nginx's `$arg_` finds it: any case).
        let mut expires: Option<&[u8]> = None;
        let mut signature: Option<&[u8]> = None;
        let mut others = 0usize;
        let mut at = 0;
        while at <= q.len() {
            let end = memchr::memchr(b'&', &q[at..]).map_or(q.len(), |n| at + n);
            let pair = &q[at..end];
            at = end + 1;
            if pair.is_empty() {
                continue;
            }
            let slot = if let Some(v) = value_of(pair, self.expires_param.as_bytes()) {
                Some((&mut expires, v))
            } else {
                value_of(pair, self.signature_param.as_bytes()).map(|v| (&mut signature, v))
            };
            match slot {
                Some((slot, v)) => {
                    if slot.replace(v).is_some() {
                        return Err(Refusal::Invalid("a parameter given twice"));
                    }
                }
                None => others += pair.len() + 1,
            }
        }
        let signature = signature.ok_or(Refusal::Invalid("no signature"))?;
        let expires_text = expires.ok_or(Refusal::Invalid("no expiry"))?;
        let expires = parse_expires(expires_text).ok_or(Refusal::Invalid("no valid expiry"))?;
        // A link verified lately on this thread skips its hash.
        if !memo::seen(self.id, path.as_bytes(), expires, signature) {
            if !self.verifies(path, expires_text, signature) {
                return Err(Refusal::Invalid("wrong signature"));
            }
            memo::note(self.id, path.as_bytes(), expires, signature);
        }
        // Valid through its second (nginx: expired when `expires < now`).
        let last = expires
            .saturating_add(self.leeway.as_secs())
            .saturating_add(1);
        if UNIX_EPOCH
            .checked_add(Duration::from_secs(last))
            .is_some_and(|last| now >= last)
        {
            return Err(Refusal::Expired);
        }
        let mut target = String::with_capacity(path.len() + others);
        target.push_str(path);
        if others > 0 {
            let mut sep = '?';
            for pair in query.split('&').filter(|p| !p.is_empty()) {
                let b = pair.as_bytes();
                if value_of(b, self.expires_param.as_bytes()).is_some()
                    || value_of(b, self.signature_param.as_bytes()).is_some()
                {
                    continue;
                }
                target.push(sep);
                target.push_str(pair);
                sep = '&';
            }
        }
        Ok(target)
    }

    /// True when `signature` is the link's under one of the secrets.
    fn verifies(&self, path: &str, expires: &[u8], signature: &[u8]) -> bool {
        match self.scheme {
            Scheme::NginxMd5 => {
                let Some(sent) = decode_base64url_md5(signature) else {
                    return false;
                };
                let sent = u128::from_ne_bytes(sent);
                let mut ok = subtle::Choice::from(0);
                for s in self.secrets.iter() {
                    ok |= u128::from_ne_bytes(md5_of(path, expires, &s.text)).ct_eq(&sent);
                }
                ok.into()
            }
            Scheme::HmacSha256 => {
                let Some(sent) = decode_hex_32(signature) else {
                    return false;
                };
                let mut ok = subtle::Choice::from(0);
                for s in self.secrets.iter() {
                    ok |= hmac_of(path, expires, &s.hmac).as_ref().ct_eq(&sent[..]);
                }
                ok.into()
            }
        }
    }

    /// The signature of `path` (as sent: it is decoded as nginx's `$uri`)
    /// until `expires` (UNIX seconds), under the first secret.
    pub fn signature(&self, path: &str, expires: u64) -> String {
        let expires = expires.to_string();
        let expires = expires.as_bytes();
        let first = &self.secrets[0];
        match self.scheme {
            Scheme::NginxMd5 => encode_base64url(&md5_of(path, expires, &first.text)),
            Scheme::HmacSha256 => {
                let tag = hmac_of(path, expires, &first.hmac);
                let mut hex = String::with_capacity(64);
                for b in tag.as_ref() {
                    hex.push(char::from(HEX[usize::from(b >> 4)]));
                    hex.push(char::from(HEX[usize::from(b & 15)]));
                }
                hex
            }
        }
    }

    /// `query` (if any) with the expiry and the signature of `path` until
    /// `expires` appended: the query of the signed link.
    pub fn signed_query(&self, path: &str, query: Option<&str>, expires: u64) -> String {
        let sig = self.signature(path, expires);
        let mut q = String::new();
        if let Some(query) = query.filter(|q| !q.is_empty()) {
            q.push_str(query);
            q.push('&');
        }
        q.push_str(&format!(
            "{}={expires}&{}={sig}",
            self.expires_param, self.signature_param
        ));
        q
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

fn param_name_ok(p: &str) -> Result<(), String> {
    if p.is_empty() {
        return Err("an empty parameter name".into());
    }
    if let Some(c) = p
        .chars()
        .find(|c| matches!(c, '&' | '=' | '#' | '?' | '%') || !c.is_ascii_graphic())
    {
        return Err(format!("{p:?}: {c:?} cannot be part of a parameter name"));
    }
    Ok(())
}

/// The expiry as nginx's `ngx_atotm` reads it: digits only, above 0.
fn parse_expires(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 18 {
        return None;
    }
    let mut n = 0u64;
    for &b in s {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n * 10 + u64::from(d);
    }
    (n > 0).then_some(n)
}

/// The value of `pair` (`name=value`, or `name` alone: empty) when its
/// name is `name` in any case.
#[inline(always)]
fn value_of<'q>(pair: &'q [u8], name: &[u8]) -> Option<&'q [u8]> {
    let n = name.len();
    // A different first letter, in any case, is the usual answer.
    if pair.len() < n || (pair[0] | 0x20) != (name[0] | 0x20) {
        return None;
    }
    let head = &pair[..n];
    if head != name && !head.eq_ignore_ascii_case(name) {
        return None;
    }
    match pair.get(n) {
        None => Some(&[]),
        Some(b'=') => Some(&pair[n + 1..]),
        Some(_) => None,
    }
}

/// Feeds nginx's `$uri` of `path` to `feed`: `%XX` decoded, runs of `/`
/// merged. The usual path (no `%`, no `//`) goes in one piece.
fn feed_uri(path: &str, mut feed: impl FnMut(&[u8])) {
    let bytes = path.as_bytes();
    let plain = !bytes
        .windows(2)
        .any(|w| w[0] == b'%' || (w[0] == b'/' && w[1] == b'/'))
        && bytes.last() != Some(&b'%');
    if plain {
        feed(bytes);
        return;
    }
    let mut buf = [0u8; 128];
    let mut n = 0;
    let mut i = 0;
    let mut last = 0u8;
    while i < bytes.len() {
        let mut b = bytes[i];
        i += 1;
        if b == b'%' && i + 2 <= bytes.len() {
            if let (Some(h), Some(l)) = (hex_val(bytes[i]), hex_val(bytes[i + 1])) {
                b = h << 4 | l;
                i += 2;
            }
        }
        if b == b'/' && last == b'/' {
            continue;
        }
        last = b;
        if n == buf.len() {
            feed(&buf);
            n = 0;
        }
        buf[n] = b;
        n += 1;
    }
    feed(&buf[..n]);
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn md5_of(path: &str, expires: &[u8], secret: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(expires);
    feed_uri(path, |c| h.update(c));
    h.update(b" ");
    h.update(secret);
    h.finalize().into()
}

fn hmac_of(path: &str, expires: &[u8], key: &hmac::Key) -> hmac::Tag {
    let mut h = hmac::Context::with_key(key);
    h.update(expires);
    feed_uri(path, |c| h.update(c));
    h.sign()
}

/// base64url's alphabet.
const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url's values by byte, 0xff for the bytes outside its alphabet.
const B64_VALUES: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 64 {
        t[B64[i] as usize] = i as u8;
        i += 1;
    }
    t
};

/// An MD5 digest in base64url as nginx's `ngx_decode_base64url` takes it:
/// 22 characters, padding (`==`) allowed; the unused low bits of the last
/// character are ignored, as there.
fn decode_base64url_md5(s: &[u8]) -> Option<[u8; 16]> {
    let s: &[u8; 22] = match s.len() {
        22 => s.try_into().ok()?,
        24 if s.ends_with(b"==") => s[..22].try_into().ok()?,
        _ => return None,
    };
    let mut v = [0u8; 22];
    let mut bad = 0u8;
    for (o, &c) in v.iter_mut().zip(s) {
        *o = B64_VALUES[usize::from(c)];
        bad |= *o;
    }
    if bad & 0xc0 != 0 {
        return None;
    }
    // 22 values of 6 bits: 132 bits, the first 128 of them.
    let mut acc = 0u128;
    for &x in &v[..21] {
        acc = acc << 6 | u128::from(x);
    }
    acc = acc << 2 | u128::from(v[21] >> 4);
    Some(acc.to_be_bytes())
}

fn encode_base64url(d: &[u8; 16]) -> String {
    let mut s = String::with_capacity(22);
    for chunk in d.chunks(3) {
        let mut acc = 0u32;
        for (k, &b) in chunk.iter().enumerate() {
            acc |= u32::from(b) << (16 - 8 * k);
        }
        for k in 0..=chunk.len() {
            s.push(char::from(B64[((acc >> (18 - 6 * k)) & 63) as usize]));
        }
    }
    s
}

/// 64 hex digits (either case) to 32 bytes.
fn decode_hex_32(s: &[u8]) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *o = hex_val(pair[0])? << 4 | hex_val(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
