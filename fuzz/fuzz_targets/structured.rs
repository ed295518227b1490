//! Structured Field Dictionaries (RFC 8941 §4.2.2), the syntax of
//! `CDN-Cache-Control` (RFC 9213 §2.1).
//!
//! Beyond not panicking, checks that what `parse_dictionary` accepts is
//! well formed (keys unique and of the key alphabet, integers of at most
//! 15 digits, decimals finite, strings visible ASCII, tokens and byte
//! sequences of their alphabets), and that serialising the dictionary and
//! parsing it again gives the same dictionary (inner lists print as `()`).
#![no_main]

use hoard_policy::structured::{parse_dictionary, Item};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Some(dict) = parse_dictionary(s) else {
        return;
    };
    for (i, (key, item)) in dict.iter().enumerate() {
        assert!(valid_key(key), "key {key:?}");
        assert!(
            dict[..i].iter().all(|(k, _)| k != key),
            "duplicate key {key:?}"
        );
        check_item(item);
    }
    let printed = serialize(&dict);
    assert_eq!(
        parse_dictionary(&printed).as_ref(),
        Some(&dict),
        "printed {printed:?}"
    );
});

fn valid_key(k: &str) -> bool {
    let b = k.as_bytes();
    matches!(b.first(), Some(b'a'..=b'z' | b'*'))
        && b.iter()
            .all(|c| matches!(c, b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' | b'.' | b'*'))
}

fn check_item(item: &Item) {
    match item {
        Item::Integer(n) => assert!(n.unsigned_abs() <= 999_999_999_999_999),
        Item::Decimal(d) => assert!(d.is_finite() && d.abs() < 1e12),
        Item::String(s) => assert!(s.bytes().all(|c| (0x20..=0x7e).contains(&c))),
        Item::Token(t) => {
            let b = t.as_bytes();
            assert!(matches!(b.first(), Some(c) if c.is_ascii_alphabetic() || *c == b'*'));
            assert!(b
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~:/".contains(c)));
        }
        Item::Bytes(v) => assert!(v
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c))),
        Item::Boolean(_) | Item::InnerList => {}
    }
}

fn serialize(dict: &[(String, Item)]) -> String {
    let members: Vec<String> = dict
        .iter()
        .map(|(k, item)| match item {
            Item::Boolean(true) => k.clone(),
            Item::Boolean(false) => format!("{k}=?0"),
            Item::Integer(n) => format!("{k}={n}"),
            Item::Decimal(d) => format!("{k}={d:.3}"),
            Item::String(s) => format!("{k}=\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\"")),
            Item::Token(t) => format!("{k}={t}"),
            Item::Bytes(b) => format!("{k}=:{b}:"),
            Item::InnerList => format!("{k}=()"),
        })
        .collect();
    members.join(", ")
}
