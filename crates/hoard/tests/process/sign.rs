//! `hoard sign`: links signed by the binary and fetched through a real
//! proxy (a valid one 200, a wrong one 403, an expired one 410), from a
//! configuration's route or from a secret given on the command line; and
//! `hoard check` naming a bad `signed_urls` key and its line.

use crate::common;

use common::run as hoard;
use hoard_testkit::{Test, TestClock};

/// `hoard sign ARGS`: the signed URL's path and query (the proxy's
/// client sends them to the test proxy).
async fn sign(args: &[&str]) -> String {
    let mut v = vec!["sign".to_string()];
    v.extend(args.iter().map(|s| s.to_string()));
    let (code, out, err) = hoard(v).await;
    assert_eq!(code, 0, "{err}");
    let url = out.trim();
    assert!(url.starts_with("http://localhost/"), "{url}");
    url["http://localhost".len()..].to_string()
}

const CONFIG: &str = r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/v/"
signed_urls = { secrets = ["k3y", "old"] }
[[site.route]]
prefix = "/h/"
signed_urls = { secret = "other", scheme = "hmac-sha256", signature_param = "sig" }
[[site.route]]
prefix = "/"
"#;

#[tokio::test]
async fn signed_links_fetch_through_a_proxy() {
    let t = Test::new("cli-sign");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/v/a.bin?x=1", "/h/b.bin"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(path)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let text = CONFIG.replace("{origin}", &origin.addr().to_string());
    let file = t.dir().join("hoard.toml");
    std::fs::write(&file, &text).unwrap();
    let cfg = file.to_str().unwrap();
    let proxy = t.proxy().origin(&origin).toml(&origin, &text).start().await;

    // The route the URL goes to signs (its first secret); an hour from
    // the system's now is after the test clock's.
    let link = sign(&[
        "--config",
        cfg,
        "--url",
        "http://localhost/v/a.bin?x=1",
        "--expires",
        "1h",
    ])
    .await;
    assert!(
        link.starts_with("/v/a.bin?x=1&expires=") && link.contains("&md5="),
        "{link}"
    );
    t.client(&proxy)
        .get(&link)
        .send()
        .await
        .expect_status(200)
        .expect_body("/v/a.bin?x=1");
    // The same link from the secret given here: the same signature, a hit.
    let e = (TestClock::START_UNIX_SECS + 60).to_string();
    let by_secret = sign(&[
        "--secret",
        "k3y",
        "--url",
        "http://localhost/v/a.bin?x=1",
        "--expires-at",
        &e,
    ])
    .await;
    t.client(&proxy)
        .get(&by_secret)
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    // A wrong signature: 403; an expiry before the proxy's now: 410.
    let at = by_secret.find("md5=").unwrap() + 4;
    let first = if by_secret[at..].starts_with('A') {
        "B"
    } else {
        "A"
    };
    let mut wrong = by_secret.clone();
    wrong.replace_range(at..at + 1, first);
    t.client(&proxy).get(&wrong).send().await.expect_status(403);
    let past = (TestClock::START_UNIX_SECS - 10).to_string();
    let expired = sign(&[
        "--config",
        cfg,
        "--url",
        "http://localhost/v/a.bin",
        "--expires-at",
        &past,
    ])
    .await;
    t.client(&proxy)
        .get(&expired)
        .send()
        .await
        .expect_status(410);
    // Another secret: 403.
    let stranger = sign(&[
        "--secret",
        "nope",
        "--url",
        "http://localhost/v/a.bin",
        "--expires-at",
        &e,
    ])
    .await;
    t.client(&proxy)
        .get(&stranger)
        .send()
        .await
        .expect_status(403);

    // --route picks the HMAC route by its prefix, with its own parameter.
    let h = sign(&[
        "--config",
        cfg,
        "--route",
        "/h/",
        "--url",
        "http://localhost/h/b.bin",
        "--expires-at",
        &e,
    ])
    .await;
    assert!(h.contains("&sig="), "{h}");
    t.client(&proxy)
        .get(&h)
        .send()
        .await
        .expect_status(200)
        .expect_body("/h/b.bin");
    assert_eq!(origin.requests(), 2);

    // A route without signed_urls, a route that does not exist: said.
    let (code, _, err) = hoard(
        ["sign", "--config", cfg, "--url", "http://localhost/plain"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("has no signed_urls"), "{err}");
    let (code, _, err) = hoard(
        ["sign", "--config", cfg, "--route", "/nope/", "--url", "/x"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("no route whose prefix or regex is \"/nope/\""),
        "{err}"
    );
    origin.finish().await;
}

#[tokio::test]
async fn check_names_a_bad_signed_urls_key_and_line() {
    let t = Test::new("cli-sign-check");
    let file = t.dir().join("bad.toml");
    std::fs::write(
        &file,
        "[upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n[[site]]\n[[site.route]]\nprefix = \"/\"\nsigned_urls = { secret = \"k\", scheme = \"md4\" }\n",
    )
    .unwrap();
    let (code, _, err) = hoard(
        ["check", "--config", file.to_str().unwrap()]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("bad.toml:6") && err.contains("site[0].route[0].signed_urls.scheme"),
        "{err}"
    );
}
