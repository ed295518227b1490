//! f: request targets. What is keyed and what is forwarded come from one
//! normal form of the target (RFC 3986 §6.2.2); what has none gets 400 and
//! never reaches the origin.

use hoard_testkit::Test;

/// An origin that answers `answers` requests, each expected at `urls[i]`
/// with Host `hosts[i]`, cacheable, the body naming the URL it saw.
fn expecting(
    t: &Test,
    urls: &'static [(&'static str, &'static str)],
) -> hoard_testkit::OriginBuilder {
    t.origin().script(move |mut s| async move {
        for (url, host) in urls {
            let r = s.rxreq().await;
            r.expect_url(url).expect_header("host", host);
            s.txresp_fresh(600, format!("seen {url}")).await;
        }
    })
}

// f00040: equivalent spellings of one target share one object, and the
// origin sees the normal form once.
#[tokio::test]
async fn f00040_equivalent_targets_share_a_key() {
    let t = Test::new("f00040");
    let origin = expecting(&t, &[("/~user/caf%C3%A9?q=~%2F", "localhost")])
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/%7euser/caf%c3%a9?q=%7E%2f")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss")
        .expect_body("seen /~user/caf%C3%A9?q=~%2F");
    for spelling in [
        "/~user/caf%C3%A9?q=~%2F",
        "/%7Euser/caf%C3%a9?q=~%2f",
        "/x/../~user/./caf%c3%A9?q=%7e%2F",
    ] {
        t.client(&proxy)
            .get(spelling)
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body("seen /~user/caf%C3%A9?q=~%2F");
    }
    origin.finish().await;
}

// f00041: an encoded slash is not a slash: `/a%2Fb` and `/a/b` are two
// objects, each forwarded as spelled.
#[tokio::test]
async fn f00041_encoded_reserved_characters_stay_distinct() {
    let t = Test::new("f00041");
    let origin = expecting(&t, &[("/a%2Fb", "localhost"), ("/a/b", "localhost")])
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/a%2fb")
        .send()
        .await
        .expect_body("seen /a%2Fb");
    t.client(&proxy)
        .get("/a/b")
        .send()
        .await
        .expect_body("seen /a/b");
    t.client(&proxy)
        .get("/a%2Fb")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body("seen /a%2Fb");
    origin.finish().await;
}

// f00042: targets with no safe normal form get 400 and reach nobody: dot
// segments above the root, malformed or NUL percent-encodings, an
// absolute-form target naming another host than Host, userinfo, a bad Host.
#[tokio::test]
async fn f00042_unsafe_targets_are_400() {
    let t = Test::new("f00042");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    for head in [
        "GET /../etc/passwd HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /a/%2e%2e/%2E%2E/etc/passwd HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /a%zz HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /a?x=%4 HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET /a%00.html HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET http://victim.example/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET http://user@localhost/ HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: local_host:80x\r\n\r\n",
        "GET / HTTP/1.1\r\nHost: a b\r\n\r\n",
    ] {
        let mut c = t.client(&proxy).connect().await;
        c.send_raw(head).await;
        c.read_response().await.expect_status(400);
    }
    origin.finish().await;
}

// f00043: Host is compared without case, trailing dot or default port, and
// the origin sees it in that one form; an absolute-form target that agrees
// with Host shares the origin-form request's object.
#[tokio::test]
async fn f00043_host_forms_share_a_key() {
    let t = Test::new("f00043");
    let origin = expecting(&t, &[("/page", "www.example.com")]).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    t.client(&proxy)
        .get("/page")
        .hdr("Host", "WWW.Example.COM.:80")
        .send()
        .await
        .expect_body("seen /page");
    t.client(&proxy)
        .get("/page")
        .hdr("Host", "www.example.com")
        .send()
        .await
        .expect_cache_status("hit");
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET http://www.example.com:80/page HTTP/1.1\r\nHost: www.example.com\r\nConnection: close\r\n\r\n")
        .await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_cache_status("hit")
        .expect_body("seen /page");
    origin.finish().await;
}
