//! `signed_urls` on a route: defaults, and each mistake named with its
//! key and line.

use super::*;
use hoard_edge::signed::Scheme;

const BASE: &str =
    "[upstream.app]\nservers = [\"http://a:1\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\n";

#[test]
fn signed_urls_defaults_by_scheme() {
    let signed = |line: &str| {
        let c = Config::from_toml("hoard.toml", &format!("{BASE}{line}\n")).unwrap();
        let edge = c.sites[0].routes[0].edge.clone().expect("an edge rule");
        edge.signed.clone().expect("signed_urls")
    };
    let s = signed("signed_urls = { secret = \"s\" }");
    assert_eq!(
        (s.scheme(), s.expires_param(), s.signature_param()),
        (Scheme::NginxMd5, "expires", "md5")
    );
    let s = signed("signed_urls = { secrets = [\"new\", \"old\"], scheme = \"hmac-sha256\" }");
    assert_eq!(
        (s.scheme(), s.expires_param(), s.signature_param()),
        (Scheme::HmacSha256, "expires", "signature")
    );
    let s = signed(
        "signed_urls = { secret = \"s\", expires_param = \"e\", signature_param = \"st\", leeway = \"30s\" }",
    );
    assert_eq!((s.expires_param(), s.signature_param()), ("e", "st"));
}

#[test]
fn signed_urls_mistakes_name_key_and_line() {
    let at = "site[0].route[0].signed_urls";
    for (line, key, says) in [
        ("signed_urls = { secret = \"\" }", "secret", "empty"),
        (
            "signed_urls = { secrets = [\"a\", \"\"] }",
            "secrets",
            "empty",
        ),
        ("signed_urls = { secrets = [] }", "secrets", "empty"),
        (
            "signed_urls = { secret = \"s\", scheme = \"sha1\" }",
            "scheme",
            "\"sha1\": expected \"nginx-md5\" or \"hmac-sha256\"",
        ),
        (
            "signed_urls = { secret = \"a\", secrets = [\"b\"] }",
            "secret",
            "both",
        ),
        ("signed_urls = { scheme = \"nginx-md5\" }", "", "no secret"),
        (
            "signed_urls = { secret = \"s\", expires_param = \"a=b\" }",
            "expires_param",
            "not a query parameter name",
        ),
        (
            "signed_urls = { secret = \"s\", signature_param = \"expires\" }",
            "signature_param",
            "two names",
        ),
    ] {
        let e = error(&format!("{BASE}{line}\n"));
        let want = if key.is_empty() {
            at.to_string()
        } else {
            format!("{at}.{key}")
        };
        assert_eq!(
            (e.line, e.key.as_str()),
            (Some(6), want.as_str()),
            "{line}: {e}"
        );
        assert!(e.message.contains(says), "{line}: {e}");
    }
    // serde's own: an unknown field, a bad duration.
    for (line, says) in [
        (
            "signed_urls = { secret = \"s\", expiry = \"x\" }",
            "unknown field `expiry`",
        ),
        (
            "signed_urls = { secret = \"s\", leeway = \"soon\" }",
            "duration",
        ),
    ] {
        let e = error(&format!("{BASE}{line}\n"));
        assert_eq!(e.line, Some(6), "{line}: {e}");
        assert!(e.message.contains(says), "{line}: {e}");
        assert!(e.key.contains("signed_urls"), "{line}: {e}");
    }
}
