//! v: signed URLs (`signed_urls`): nginx's secure_link links and HMAC
//! links checked before any lookup (403 without a valid signature, 410
//! past the expiry), their two parameters kept out of the key and the
//! origin request.

use hoard_edge::signed::{Scheme, SignedUrls};
use hoard_testkit::{Test, TestClock};

use super::secs;

/// The test clock's start, in UNIX seconds.
const T0: u64 = TestClock::START_UNIX_SECS;

// Computed apart from hoard, e.g.
// printf '%s' '1767225660/v/a.bin k3y' | openssl md5 -binary | openssl base64 | tr +/ -_ | tr -d =
/// `/v/a.bin` until T0 + 60 under `k3y`.
const A_60: &str = "HiA9TJG93gy3624Z4skG2w";
/// `/v/a.bin` until T0 + 300 under `k3y`.
const A_300: &str = "9BzGmeoLZ9dSkz0XLYIpMA";
/// `/v/a b.txt` until T0 + 60 under `k3y`.
const SPACE_60: &str = "kiQYBSrX_S4OrbkOuyKWWQ";
// printf '%s' '1767225660/h/a.bin' | openssl dgst -sha256 -hmac k3y
/// HMAC-SHA256 of `/h/a.bin` until T0 + 60 under `k3y`.
const HMAC_60: &str = "0fb879ff604bd3ec3fad04f4b996b6639a7d83611e7d3ed709ccce9ba9a1d599";

/// A configuration whose one route (`/`) has `signed_urls = { ... }`
/// with these keys, and `extra` keys; `{origin}` is the origin.
fn signed_route(keys: &str, extra: &str) -> String {
    format!(
        r#"
[[listener]]
address = "127.0.0.1:0"
[upstream.app]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/"
signed_urls = {{ {keys} }}
{extra}
"#
    )
}

/// An origin that answers each of `urls` in turn, cacheable for 10
/// minutes, with the URL it saw as the body.
fn origin_for(t: &Test, urls: &'static [&'static str]) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for url in urls {
            let r = s.rxreq().await;
            r.expect_url(url);
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body(*url)
                .send()
                .await;
        }
    })
}

// v19001: a valid nginx link: 200; the origin sees the target without the
// expiry and the signature (the other parameters kept); a second link to
// the same file with another expiry is a hit on the same object.
#[tokio::test]
async fn v19001_valid_links_share_one_object() {
    let t = Test::new("v19001");
    let origin = origin_for(&t, &["/v/a.bin?x=1"]).start().await;
    let cfg = signed_route("secret = \"k3y\"", "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get(&format!("/v/a.bin?x=1&md5={A_60}&expires={}", T0 + 60))
        .send()
        .await
        .expect_status(200)
        .expect_body("/v/a.bin?x=1")
        .expect_cache_status("fwd=uri-miss");
    t.client(&proxy)
        .get(&format!("/v/a.bin?expires={}&x=1&md5={A_300}", T0 + 300))
        .send()
        .await
        .expect_status(200)
        .expect_body("/v/a.bin?x=1")
        .expect_cache_status("hit");
    assert_eq!(origin.requests(), 1);
    proxy.expect_counter("cache_hit", 1);
    proxy.expect_counter("edge_signature_refused", 0);
    origin.finish().await;
}

// v19002: refused links never reach the cache or the origin: a wrong
// signature, none, no expiry, a non-numeric or zero expiry, a parameter
// given twice: 403; a valid link once the clock passes its expiry: 410;
// a wrong signature on an expired link: still 403 (nginx's order).
#[tokio::test]
async fn v19002_refusals_are_403_and_410() {
    let t = Test::new("v19002");
    let origin = t.origin().start().await; // any request fails the case
    let cfg = signed_route("secret = \"k3y\"", "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let e = T0 + 60;
    for target in [
        format!("/v/a.bin?md5=AAAAAAAAAAAAAAAAAAAAAA&expires={e}"),
        format!("/v/b.bin?md5={A_60}&expires={e}"),
        format!("/v/a.bin?md5={A_60}&expires={}", e + 1),
        "/v/a.bin".to_string(),
        format!("/v/a.bin?expires={e}"),
        format!("/v/a.bin?md5={A_60}"),
        format!("/v/a.bin?md5={A_60}&expires=soon"),
        format!("/v/a.bin?md5={A_60}&expires=0"),
        format!("/v/a.bin?md5={A_60}&md5={A_60}&expires={e}"),
        format!("/v/a.bin?md5={A_60}&expires={e}&expires={e}"),
    ] {
        let r = t.client(&proxy).get(&target).send().await;
        assert_eq!(r.status, 403, "{target}: {}", r.dump());
    }
    proxy.expect_counter("edge_signature_refused", 10);
    t.clock.advance(secs(61));
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5={A_60}&expires={e}"))
        .send()
        .await
        .expect_status(410);
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5=AAAAAAAAAAAAAAAAAAAAAA&expires={e}"))
        .send()
        .await
        .expect_status(403);
    proxy.expect_counter("edge_link_expired", 1);
    proxy.expect_counter("edge_signature_refused", 11);
    assert_eq!(origin.requests(), 0);
    origin.finish().await;
}

// v19003: a valid link until its second; with leeway = "30s", 30 seconds
// more, then 410.
#[tokio::test]
async fn v19003_leeway() {
    let t = Test::new("v19003");
    let origin = origin_for(&t, &["/v/a.bin"]).start().await;
    let cfg = signed_route("secret = \"k3y\", leeway = \"30s\"", "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let link = format!("/v/a.bin?md5={A_60}&expires={}", T0 + 60);
    t.clock.advance(secs(60 + 30));
    t.client(&proxy).get(&link).send().await.expect_status(200);
    t.clock.advance(secs(1));
    t.client(&proxy).get(&link).send().await.expect_status(410);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// v19004: the path is signed decoded (nginx's $uri): `/v/a%20b.txt`
// verifies a link signed for `/v/a b.txt`, and the origin gets it encoded.
#[tokio::test]
async fn v19004_encoded_path() {
    let t = Test::new("v19004");
    let origin = origin_for(&t, &["/v/a%20b.txt"]).start().await;
    let cfg = signed_route("secret = \"k3y\"", "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get(&format!("/v/a%20b.txt?md5={SPACE_60}&expires={}", T0 + 60))
        .send()
        .await
        .expect_status(200)
        .expect_body("/v/a%20b.txt");
    origin.finish().await;
}

// v19005: rotation: with secrets = ["new", "k3y"], links of either verify;
// a link of a secret not listed is refused.
#[tokio::test]
async fn v19005_rotation() {
    let t = Test::new("v19005");
    let origin = origin_for(&t, &["/v/a.bin"]).start().await;
    let cfg = signed_route("secrets = [\"new\", \"k3y\"]", "");
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let e = T0 + 60;
    let new = SignedUrls::new(
        Scheme::NginxMd5,
        &["new"],
        "expires",
        "md5",
        Default::default(),
    )
    .unwrap();
    let other = SignedUrls::new(
        Scheme::NginxMd5,
        &["other"],
        "expires",
        "md5",
        Default::default(),
    )
    .unwrap();
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5={A_60}&expires={e}"))
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("fwd=uri-miss");
    let sig = new.signature("/v/a.bin", e);
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5={sig}&expires={e}"))
        .send()
        .await
        .expect_status(200)
        .expect_cache_status("hit");
    let sig = other.signature("/v/a.bin", e);
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5={sig}&expires={e}"))
        .send()
        .await
        .expect_status(403);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// v19006: hmac-sha256 with its default parameter (`signature`) and named
// ones: a valid link 200 without its parameters at the origin, a wrong
// one 403, an expired one 410.
#[tokio::test]
async fn v19006_hmac_sha256() {
    let t = Test::new("v19006");
    let origin = origin_for(&t, &["/h/a.bin"]).start().await;
    let cfg = format!(
        "{}\n[[site.route]]\nprefix = \"/n/\"\nsigned_urls = {{ secret = \"k3y\", scheme = \"hmac-sha256\", expires_param = \"e\", signature_param = \"s\" }}\n",
        signed_route("secret = \"k3y\", scheme = \"hmac-sha256\"", "")
            .replace("prefix = \"/\"", "prefix = \"/h/\"")
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let e = T0 + 60;
    t.client(&proxy)
        .get(&format!("/h/a.bin?expires={e}&signature={HMAC_60}"))
        .send()
        .await
        .expect_status(200)
        .expect_body("/h/a.bin");
    // The nginx parameter name means nothing here.
    t.client(&proxy)
        .get(&format!("/h/a.bin?expires={e}&md5={HMAC_60}"))
        .send()
        .await
        .expect_status(403);
    let mut wrong = HMAC_60.to_string();
    wrong.replace_range(..1, "1");
    t.client(&proxy)
        .get(&format!("/h/a.bin?expires={e}&signature={wrong}"))
        .send()
        .await
        .expect_status(403);
    // Named parameters: a link for /n/ under them; no origin request for
    // its refusals.
    let n = SignedUrls::new(Scheme::HmacSha256, &["k3y"], "e", "s", Default::default()).unwrap();
    let q = n.signed_query("/n/x", None, e);
    t.clock.advance(secs(61));
    t.client(&proxy)
        .get(&format!("/n/x?{q}"))
        .send()
        .await
        .expect_status(410);
    t.client(&proxy)
        .get(&format!("/h/a.bin?expires={e}&signature={HMAC_60}"))
        .send()
        .await
        .expect_status(410);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// v19007: the route's error page and response header edits apply to its
// 403 and 410, as to its other refusals.
#[tokio::test]
async fn v19007_error_pages_and_headers_apply() {
    let t = Test::new("v19007");
    let origin = t.origin().start().await;
    let page = t.dir().join("denied.html");
    std::fs::write(&page, "<p>link not valid</p>").unwrap();
    let gone = t.dir().join("gone.html");
    std::fs::write(&gone, "<p>link expired</p>").unwrap();
    let cfg = signed_route(
        "secret = \"k3y\"",
        &format!(
            "error_pages = {{ \"403\" = \"{}\", \"410\" = \"{}\" }}\nresponse_headers = {{ set = {{ \"X-Link\" = \"checked\" }} }}",
            page.display(),
            gone.display()
        ),
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    t.client(&proxy)
        .get("/v/a.bin?md5=x&expires=1")
        .send()
        .await
        .expect_status(403)
        .expect_body("<p>link not valid</p>")
        .expect_header("x-link", "checked");
    t.clock.advance(secs(61));
    t.client(&proxy)
        .get(&format!("/v/a.bin?md5={A_60}&expires={}", T0 + 60))
        .send()
        .await
        .expect_status(410)
        .expect_body("<p>link expired</p>")
        .expect_header("x-link", "checked");
    assert_eq!(origin.requests(), 0);
    origin.finish().await;
}

// v19008: in a cluster, the node a link reaches checks it and sends the
// key's owner the target without the two parameters: the owner does not
// check it again (its fill is a member's), and the origin is asked once.
#[tokio::test]
async fn v19008_a_cluster_checks_a_link_once() {
    use crate::cluster::{body_of, cluster_sized, origin_serving_once, total};
    let t = Test::new("v19008");
    let paths = vec!["/v/a.bin".to_string()];
    let origin = origin_serving_once(&t, &paths).await;
    let signed = |r: &mut hoard_config::RouteConfig| {
        let rule = SignedUrls::new(
            Scheme::NginxMd5,
            &["k3y"],
            "expires",
            "md5",
            Default::default(),
        )
        .unwrap();
        r.edge = Some(std::sync::Arc::new(hoard_edge::Edge {
            signed: Some(std::sync::Arc::new(rule)),
            ..Default::default()
        }));
    };
    let nodes = cluster_sized(&t, &origin, 2, &[], 8 << 20, signed, &|_, _| {}).await;
    let link = format!("/v/a.bin?md5={A_60}&expires={}", T0 + 60);
    for n in &nodes {
        t.client(n)
            .get(&link)
            .send()
            .await
            .expect_status(200)
            .expect_body(body_of("/v/a.bin"));
        t.client(n).get("/v/a.bin").send().await.expect_status(403);
    }
    assert_eq!(total(&nodes, "cluster_peer_requests"), 1);
    assert_eq!(total(&nodes, "edge_signature_refused"), 2);
    origin.finish().await;
}
