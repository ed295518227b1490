//! f: cache poisoning through fields that reach the origin without being
//! part of the key. hoard owns the forwarding fields.

use hoard_testkit::Test;

/// An origin that, like many applications, builds absolute links from
/// `X-Forwarded-Host` (else Host) and obeys `X-Original-URL` and
/// `X-HTTP-Method-Override`; every answer is cacheable.
fn reflecting(t: &Test, answers: usize) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for _ in 0..answers {
            let r = s.rxreq().await;
            let host = r
                .header("x-forwarded-host")
                .or_else(|| r.header("host"))
                .unwrap_or_default();
            let path = r
                .header("x-original-url")
                .unwrap_or_else(|| r.url().to_string());
            let method = r
                .header("x-http-method-override")
                .unwrap_or_else(|| r.method().to_string());
            s.txresp_fresh(
                600,
                format!("<script src=\"https://{host}/app.js\"> {method} {path}"),
            )
            .await;
        }
    })
}

// f00020: an attacker's X-Forwarded-Host, X-Original-URL and method override
// never reach the origin: the response cached for everyone is the clean one.
#[tokio::test]
async fn f00020_reflected_forwarding_fields_cannot_poison() {
    let t = Test::new("f00020");
    let origin = reflecting(&t, 1).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let clean = "<script src=\"https://localhost/app.js\"> GET /home";
    t.client(&proxy)
        .get("/home")
        .hdr("X-Forwarded-Host", "evil.example")
        .hdr("X-Host", "evil.example")
        .hdr("X-Original-URL", "/admin")
        .hdr("X-HTTP-Method-Override", "DELETE")
        .hdr("X-Forwarded-Proto", "http")
        .hdr("Forwarded", "host=evil.example")
        .send()
        .await
        .expect_body(clean);
    // The victim gets the same, from cache.
    t.client(&proxy)
        .get("/home")
        .send()
        .await
        .expect_body(clean)
        .expect_cache_status("hit");
    origin.finish().await;
}

// f00021: a route that forwards X-Forwarded-Host keys on it: the attacker's
// variant is stored apart and the victim gets its own.
#[tokio::test]
async fn f00021_forwarded_fields_are_keyed() {
    let t = Test::new("f00021");
    let origin = reflecting(&t, 2).start().await;
    let proxy = t
        .proxy()
        .origin(&origin)
        .toml(
            &origin,
            r#"
[upstream.app]
servers = ["http://{origin}"]
[[site]]
[[site.route]]
prefix = "/"
forward_headers = ["x-forwarded-host"]
"#,
        )
        .start()
        .await;
    t.client(&proxy)
        .get("/home")
        .hdr("X-Forwarded-Host", "evil.example")
        .send()
        .await
        .expect_body("<script src=\"https://evil.example/app.js\"> GET /home");
    t.client(&proxy)
        .get("/home")
        .send()
        .await
        .expect_body("<script src=\"https://localhost/app.js\"> GET /home")
        .expect_cache_status("fwd=uri-miss");
    origin.finish().await;
}
