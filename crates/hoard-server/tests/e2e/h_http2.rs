//! h: HTTP/2 towards clients (h2c prior knowledge on a plain listener).

use hoard_testkit::{Endpoint, Test};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// An h2c (prior knowledge) client connection to `proxy`, its connection
/// task spawned.
pub(crate) async fn h2c<B>(proxy: &impl Endpoint) -> SendRequest<B>
where
    B: hyper::body::Body + Unpin + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let stream = tokio::net::TcpStream::connect(proxy.endpoint())
        .await
        .unwrap();
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    send
}

// h00001: an h2c client gets a miss and then a hit, with the same caching headers as HTTP/1.1.
#[tokio::test]
async fn h00001_h2c_prior_knowledge_miss_then_hit() {
    let t = Test::new("h00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_url("/two")
                .expect_header("host", "h2.example")
                .expect_header("via", "2 hoard");
            s.txresp_fresh(60, "over h2").await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;

    let mut send = h2c(&proxy).await;
    for want in ["fwd=uri-miss", "hit"] {
        let req = http::Request::get("http://h2.example/two")
            .body(Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = send.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let cs = resp
            .headers()
            .get("cache-status")
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        assert!(
            hoard_testkit::cache_status_params(&cs)
                .iter()
                .any(|p| p == want),
            "{cs}"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"over h2");
        proxy.wait_counter("objects_stored", 1).await;
    }
    origin.finish().await;
}
