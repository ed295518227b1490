use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::*;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn md5(secrets: &[&str]) -> SignedUrls {
    SignedUrls::new(Scheme::NginxMd5, secrets, "expires", "md5", Duration::ZERO).unwrap()
}

fn hmac(secrets: &[&str]) -> SignedUrls {
    SignedUrls::new(
        Scheme::HmacSha256,
        secrets,
        "expires",
        "signature",
        Duration::ZERO,
    )
    .unwrap()
}

// Computed apart from hoard:
// printf '%s' '2147483647/s/a.bin secret' | openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d =
const NGINX_VECTOR: &str = "0xhaW7eQnoTc7heYZJXT2Q";
// printf '%s' '2147483647/a b.txt secret' | openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d =
const NGINX_SPACE: &str = "pP08_tk3HzJU2eyY_92FGQ";
// printf '%s' '2147483647/s/a.bin' | openssl dgst -sha256 -hmac secret
const HMAC_VECTOR: &str = "e1a6898457efd47a8b8fc72a63fff8838e25d3f88c79d2e0eb95cec926527743";

#[test]
fn an_nginx_link_verifies_and_loses_its_parameters() {
    let s = md5(&["secret"]);
    let q = format!("md5={NGINX_VECTOR}&expires=2147483647");
    assert_eq!(
        s.check("/s/a.bin", Some(&q), at(1_767_225_600)),
        Ok("/s/a.bin".into())
    );
    // Other parameters stay, in their order; the names are nginx's
    // `$arg_` names (any case).
    let q = format!("b=2&MD5={NGINX_VECTOR}&a=1&Expires=2147483647&c");
    assert_eq!(
        s.check("/s/a.bin", Some(&q), at(0)),
        Ok("/s/a.bin?b=2&a=1&c".into())
    );
    // Padding is taken, as nginx's base64url decoder does.
    let q = format!("md5={NGINX_VECTOR}==&expires=2147483647");
    assert!(s.check("/s/a.bin", Some(&q), at(0)).is_ok());
    assert_eq!(s.signature("/s/a.bin", 2_147_483_647), NGINX_VECTOR);
}

#[test]
fn an_hmac_link_verifies() {
    let s = hmac(&["secret"]);
    let q = format!("expires=2147483647&signature={HMAC_VECTOR}");
    assert_eq!(s.check("/s/a.bin", Some(&q), at(0)), Ok("/s/a.bin".into()));
    let upper = HMAC_VECTOR.to_ascii_uppercase();
    let q = format!("expires=2147483647&signature={upper}");
    assert!(s.check("/s/a.bin", Some(&q), at(0)).is_ok());
    assert_eq!(s.signature("/s/a.bin", 2_147_483_647), HMAC_VECTOR);
    // The other scheme's signature is no signature here.
    let q = format!("expires=2147483647&signature={NGINX_VECTOR}");
    assert_eq!(
        s.check("/s/a.bin", Some(&q), at(0)),
        Err(Refusal::Invalid("wrong signature"))
    );
}

#[test]
fn the_path_is_signed_decoded_with_slashes_merged() {
    let s = md5(&["secret"]);
    let q = format!("md5={NGINX_SPACE}&expires=2147483647");
    assert!(s.check("/a%20b.txt", Some(&q), at(0)).is_ok());
    assert_eq!(s.signature("/a%20b.txt", 2_147_483_647), NGINX_SPACE);
    assert_eq!(s.signature("/a b.txt", 2_147_483_647), NGINX_SPACE);
    let q = format!("md5={NGINX_VECTOR}&expires=2147483647");
    assert_eq!(
        s.check("//s//a.bin", Some(&q), at(0)),
        Ok("//s//a.bin".into())
    );
    assert!(s.check("/s/%61.bin", Some(&q), at(0)).is_ok());
    assert!(s.check("/s/b.bin", Some(&q), at(0)).is_err());
    // A long path goes through the decoder's buffer in pieces.
    let long = format!("/{}%20/{}", "x".repeat(300), "y".repeat(200));
    let decoded = format!("/{} /{}", "x".repeat(300), "y".repeat(200));
    assert_eq!(s.signature(&long, 9), s.signature(&decoded, 9));
    let q = format!("md5={}&expires=9", s.signature(&decoded, 9));
    assert!(s.check(&long, Some(&q), at(0)).is_ok());
}

#[test]
fn the_signature_is_checked_before_the_expiry() {
    let s = md5(&["secret"]);
    let good = s.signature("/f", 1000);
    let q = format!("md5={good}&expires=1000");
    assert!(
        s.check("/f", Some(&q), at(1000)).is_ok(),
        "valid until its second"
    );
    assert_eq!(s.check("/f", Some(&q), at(1001)), Err(Refusal::Expired));
    // A wrong signature on an expired link: 403, not 410.
    let q = "md5=AAAAAAAAAAAAAAAAAAAAAA&expires=1000";
    assert_eq!(
        s.check("/f", Some(q), at(5000)),
        Err(Refusal::Invalid("wrong signature"))
    );
}

#[test]
fn leeway_extends_the_expiry() {
    let s = SignedUrls::new(
        Scheme::NginxMd5,
        &["secret"],
        "e",
        "s",
        Duration::from_secs(30),
    )
    .unwrap();
    let q = format!("s={}&e=1000", s.signature("/f", 1000));
    assert!(s.check("/f", Some(&q), at(1030)).is_ok());
    assert_eq!(s.check("/f", Some(&q), at(1031)), Err(Refusal::Expired));
}

#[test]
fn malformed_links_are_invalid() {
    let s = md5(&["secret"]);
    let sig = s.signature("/f", 1000);
    let now = at(10);
    for q in [
        None,
        Some(String::new()),
        Some("expires=1000".to_string()),
        Some(format!("md5={sig}")),
        Some(format!("md5={sig}&expires=")),
        Some(format!("md5={sig}&expires=0")),
        Some(format!("md5={sig}&expires=-5")),
        Some(format!("md5={sig}&expires=1e3")),
        Some(format!("md5={sig}&expires=+1000")),
        Some(format!("md5={sig}&expires=99999999999999999999")),
        Some(format!("md5={sig}&md5={sig}&expires=1000")),
        Some(format!("md5={sig}&expires=1000&expires=1000")),
        Some(format!("md5={sig}&expires=1000&EXPIRES=2000")),
        Some(format!("md5={}&expires=1000", &sig[..21])),
        Some(format!("md5={sig}A&expires=1000")),
        Some(format!("md5={}+&expires=1000", &sig[..21])),
        Some("md5&expires=1000".to_string()),
    ] {
        assert!(
            matches!(s.check("/f", q.as_deref(), now), Err(Refusal::Invalid(_))),
            "{q:?}"
        );
    }
}

#[test]
fn any_secret_verifies_and_the_first_signs() {
    let s = md5(&["new", "old"]);
    let old = md5(&["old"]);
    let other = md5(&["other"]);
    let q = |signer: &SignedUrls| format!("md5={}&expires=2000", signer.signature("/f", 2000));
    assert!(s.check("/f", Some(&q(&old)), at(0)).is_ok());
    assert!(s.check("/f", Some(&q(&s)), at(0)).is_ok());
    assert!(md5(&["new"]).check("/f", Some(&q(&s)), at(0)).is_ok());
    assert!(s.check("/f", Some(&q(&other)), at(0)).is_err());
    let h = hmac(&["new", "old"]);
    let hq = format!(
        "expires=2000&signature={}",
        hmac(&["old"]).signature("/f", 2000)
    );
    assert!(h.check("/f", Some(&hq), at(0)).is_ok());
}

#[test]
fn signed_query_appends_to_the_query() {
    let s = md5(&["secret"]);
    assert_eq!(
        s.signed_query("/s/a.bin", None, 2_147_483_647),
        format!("expires=2147483647&md5={NGINX_VECTOR}")
    );
    let q = s.signed_query("/s/a.bin", Some("a=1"), 2_147_483_647);
    assert_eq!(
        s.check("/s/a.bin", Some(&q), at(0)),
        Ok("/s/a.bin?a=1".into())
    );
}

#[test]
fn bad_rules_are_refused() {
    let new = |secrets: &[&str], e: &str, s: &str| {
        SignedUrls::new(Scheme::NginxMd5, secrets, e, s, Duration::ZERO).map(|_| ())
    };
    assert!(new(&[], "expires", "md5").is_err());
    assert!(new(&[""], "expires", "md5").is_err());
    assert!(new(&["a", ""], "expires", "md5").is_err());
    assert!(new(&["a"], "", "md5").is_err());
    assert!(new(&["a"], "e=x", "md5").is_err());
    assert!(new(&["a"], "e x", "md5").is_err());
    assert!(new(&["a"], "md5", "MD5").is_err());
    assert!(new(&["a"], "expires", "md5").is_ok());
    assert_eq!(Scheme::parse("nginx-md5"), Some(Scheme::NginxMd5));
    assert_eq!(Scheme::parse("hmac-sha256"), Some(Scheme::HmacSha256));
    assert_eq!(Scheme::parse("md5"), None);
    for n in Scheme::NAMES {
        assert_eq!(Scheme::parse(n).map(Scheme::as_str), Some(n));
    }
}

#[test]
fn base64url_round_trips() {
    for seed in 0u8..=255 {
        let d: [u8; 16] = std::array::from_fn(|i| seed.wrapping_mul(31).wrapping_add(i as u8 * 17));
        let e = encode_base64url(&d);
        assert_eq!(e.len(), 22);
        assert_eq!(decode_base64url_md5(e.as_bytes()), Some(d));
    }
}

#[test]
fn a_link_seen_again_is_remembered_only_as_it_verified() {
    memo::clear();
    let s = md5(&["secret"]);
    let good = format!("md5={NGINX_VECTOR}&expires=2147483647");
    assert!(s.check("/s/a.bin", Some(&good), at(0)).is_ok());
    // Remembered: still the same answers, expiry included.
    assert!(s.check("/s/a.bin", Some(&good), at(0)).is_ok());
    assert!(memo::seen(
        s.id,
        b"/s/a.bin",
        2_147_483_647,
        NGINX_VECTOR.as_bytes()
    ));
    assert_eq!(
        s.check("/s/a.bin", Some(&good), at(2_147_483_648)),
        Err(Refusal::Expired)
    );
    // Another signature of the same length for the same path and expiry,
    // another path, another expiry, another rule with the same secret:
    // not remembered, and refused or checked afresh.
    let mut wrong = NGINX_VECTOR.to_string();
    wrong.replace_range(..1, "1");
    let q = format!("md5={wrong}&expires=2147483647");
    assert!(s.check("/s/a.bin", Some(&q), at(0)).is_err());
    assert!(s.check("/s/b.bin", Some(&good), at(0)).is_err());
    let q = format!("md5={NGINX_VECTOR}&expires=2147483646");
    assert!(s.check("/s/a.bin", Some(&q), at(0)).is_err());
    let other = md5(&["other"]);
    assert!(!memo::seen(
        other.id,
        b"/s/a.bin",
        2_147_483_647,
        NGINX_VECTOR.as_bytes()
    ));
    assert!(other.check("/s/a.bin", Some(&good), at(0)).is_err());
    // A path too long to remember is checked every time.
    let long = format!("/{}", "x".repeat(memo::MAX_PATH));
    let q = format!("md5={}&expires=9", s.signature(&long, 9));
    assert!(s.check(&long, Some(&q), at(0)).is_ok());
    assert!(!memo::seen(
        s.id,
        long.as_bytes(),
        9,
        s.signature(&long, 9).as_bytes()
    ));
    // HMAC signatures (64 characters) too.
    let h = hmac(&["secret"]);
    let q = format!("expires=2147483647&signature={HMAC_VECTOR}");
    assert!(h.check("/s/a.bin", Some(&q), at(0)).is_ok());
    assert!(memo::seen(
        h.id,
        b"/s/a.bin",
        2_147_483_647,
        HMAC_VECTOR.as_bytes()
    ));
    let mut wrong = HMAC_VECTOR.to_string();
    wrong.replace_range(63.., "0");
    let q = format!("expires=2147483647&signature={wrong}");
    assert!(h.check("/s/a.bin", Some(&q), at(0)).is_err());
}

#[test]
fn a_huge_leeway_never_expires_and_never_panics() {
    let s = SignedUrls::new(
        Scheme::NginxMd5,
        &["secret"],
        "expires",
        "md5",
        Duration::from_secs(u64::MAX),
    )
    .unwrap();
    let q = format!(
        "md5={}&expires=999999999999999999",
        s.signature("/f", 999_999_999_999_999_999)
    );
    assert!(s.check("/f", Some(&q), at(4_000_000_000)).is_ok());
}
