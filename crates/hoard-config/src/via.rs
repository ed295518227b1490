//! `[server] via`: the name this proxy gives itself in `Via` and
//! `Cache-Status`, checked to be one token that both fields can carry.
//!
//! `Via`'s received-by is a pseudonym (a token) or `host[:port]` (RFC 9110
//! §7.6.3); `Cache-Status` names the cache by an sf-token (RFC 9211 §2,
//! RFC 8941 §3.3.4: a letter or `*` first, then token characters, `:` or
//! `/`). A name both take is a letter, then letters, digits and the token
//! punctuation, with an optional `:PORT`. An empty name (`Via: 1.1 `,
//! `Cache-Status: ; hit`) or one with a space is refused, not repaired.

use toml::Spanned;

use super::{ConfigError, Resolver};

/// What a name may be made of (in error messages).
const ALLOWED: &str = "a letter, then letters, digits and any of - . _ ~ ! # $ % & ' * + ^ ` |, \
                       optionally :PORT (as \"hoard\", \"edge-1\", \"cache.example.com:8080\")";

/// Checks a `via` name (see the module docs).
///
/// # Errors
/// What is wrong and what is allowed.
pub fn check(name: &str) -> Result<(), String> {
    let (token, port) = match name.rsplit_once(':') {
        Some((t, p)) => (t, Some(p)),
        None => (name, None),
    };
    let token_ok = token
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_alphabetic)
        && token.bytes().all(is_tchar);
    let port_ok = port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0));
    if token_ok && port_ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a name for Via and Cache-Status: {ALLOWED}"
        ))
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

impl Resolver<'_> {
    /// `server.via`, checked, or `default`.
    pub(super) fn via(
        &self,
        via: Option<Spanned<String>>,
        default: String,
    ) -> Result<String, ConfigError> {
        let Some(via) = via else {
            return Ok(default);
        };
        check(via.get_ref()).map_err(|m| self.err(Some(via.span()), "server.via".into(), m))?;
        Ok(via.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::check;
    use crate::Config;

    #[test]
    fn the_key_and_line_of_a_bad_name() {
        let up = "[upstream.app]\nservers = [\"http://a:1\"]\n";
        for via in ["\"\"", "\"my proxy\""] {
            let e = Config::from_toml(
                "hoard.toml",
                &format!("{up}[server]\nthreads = 2\nvia = {via}\n"),
            )
            .unwrap_err();
            assert_eq!((e.line, e.key.as_str()), (Some(5), "server.via"), "{e}");
            assert!(e.message.contains("a letter, then letters"), "{e}");
        }
        let c =
            Config::from_toml("hoard.toml", &format!("{up}[server]\nvia = \"edge-1\"\n")).unwrap();
        assert_eq!(c.server.via, "edge-1");
    }

    #[test]
    fn names() {
        for ok in [
            "hoard",
            "edge-1",
            "cache.example.com",
            "cache.example.com:8080",
            "a_b~c",
        ] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for bad in [
            "", " ", "my proxy", "1hoard", "-x", "a:", "a:b", "a:0", "x/y", "é", "a,b", "a;b",
            ":80",
        ] {
            let e = check(bad).unwrap_err();
            assert!(e.contains("a letter, then letters"), "{bad}: {e}");
        }
    }
}
