//! b (PROXY protocol): a listener with `proxy_protocol` takes the client's
//! address from the v1 or v2 header a balancer sends first; without a valid
//! header nothing reaches the origin.

use hoard_config::ops::Cidr;
use hoard_testkit::{Origin, Test, TestProxy};

/// An origin expecting one GET of `/p` from `client` (as X-Forwarded-For).
async fn origin_expecting(t: &Test, client: &'static str) -> Origin {
    t.origin()
        .script(move |mut s| async move {
            s.rxreq()
                .await
                .expect_url("/p")
                .expect_header("x-forwarded-for", client);
            s.txresp(200).body("hello").send().await;
        })
        .start()
        .await
}

async fn proxy_protocol_proxy(t: &Test, origin: &Origin, from: Vec<Cidr>) -> TestProxy {
    t.proxy()
        .origin(origin)
        .config(move |c| c.listeners[0].proxy_protocol = Some(from))
        .start()
        .await
}

/// The peers of these cases (the balancer is the test itself).
fn loopback() -> Vec<Cidr> {
    vec![Cidr::parse("127.0.0.1/32").unwrap()]
}

const GET: &[u8] = b"GET /p HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";

// b00090: a v1 header: the origin sees the carried address.
#[tokio::test]
async fn b00090_proxy_protocol_v1_carries_the_client() {
    let t = Test::new("b00090");
    let origin = origin_expecting(&t, "203.0.113.7").await;
    let proxy = proxy_protocol_proxy(&t, &origin, loopback()).await;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n")
        .await;
    conn.send_raw(GET).await;
    conn.read_response()
        .await
        .expect_status(200)
        .expect_body("hello");
    origin.finish().await;
}

// b00091: a v2 (binary) header with an IPv6 client.
#[tokio::test]
async fn b00091_proxy_protocol_v2_carries_the_client() {
    let t = Test::new("b00091");
    let origin = origin_expecting(&t, "2001:db8::7").await;
    let proxy = proxy_protocol_proxy(&t, &origin, loopback()).await;
    let mut header = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    header.extend_from_slice(&[0x21, 0x21, 0, 36]); // v2 PROXY, TCP over IPv6, 36 bytes
    let src: std::net::Ipv6Addr = "2001:db8::7".parse().unwrap();
    header.extend_from_slice(&src.octets());
    header.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
    header.extend_from_slice(&4444u16.to_be_bytes());
    header.extend_from_slice(&80u16.to_be_bytes());
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(&header).await;
    conn.send_raw(GET).await;
    conn.read_response()
        .await
        .expect_status(200)
        .expect_body("hello");
    origin.finish().await;
}

// b00092: no header (or a broken one) on such a listener: the connection
// is closed, the origin sees nothing.
#[tokio::test]
async fn b00092_no_header_no_request() {
    let t = Test::new("b00092");
    let origin = t.origin().start().await;
    let proxy = proxy_protocol_proxy(&t, &origin, loopback()).await;
    for first in [GET, b"PROXY TCP4 nonsense\r\n"] {
        let mut conn = t.client(&proxy).connect().await;
        conn.send_raw(first).await;
        conn.expect_closed().await;
    }
    proxy.expect_counter("proxy_protocol_refused", 2);
    origin.finish().await;
}

// b00093: a header from a peer not in `proxy_protocol_from` is not
// believed (closed); a header on a listener without the option is a 400.
#[tokio::test]
async fn b00093_untrusted_peers_and_unexpected_headers() {
    let t = Test::new("b00093");
    let origin = t.origin().start().await;
    let proxy = proxy_protocol_proxy(&t, &origin, vec![Cidr::parse("10.0.0.0/8").unwrap()]).await;
    let mut conn = t.client(&proxy).connect().await;
    conn.send_raw(b"PROXY TCP4 127.0.0.1 127.0.0.1 5555 80\r\n")
        .await;
    conn.send_raw(GET).await;
    conn.expect_closed().await;
    proxy.expect_counter("proxy_protocol_refused", 1);

    let plain = t.proxy().origin(&origin).start().await;
    let mut conn = t.client(&plain).connect().await;
    conn.send_raw(b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 80\r\n")
        .await;
    conn.send_raw(GET).await;
    conn.read_response().await.expect_status(400);
    origin.finish().await;
}
