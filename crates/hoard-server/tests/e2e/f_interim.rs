//! f: interim responses. A `103 Early Hints` from the origin reaches an
//! HTTP/1.1 client ahead of the final response and is never stored nor
//! merged into it; `Expect: 100-continue` is answered by hoard, and other
//! expectations get 417.

use hoard_testkit::Test;

const HINTS: &str = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n";

// f00060: the client gets the origin's 103 first, then a final response
// without the hint's fields; the stored object has none either, and an
// HTTP/1.0 client never gets a 103.
#[tokio::test]
async fn f00060_early_hints_are_forwarded_never_stored() {
    let t = Test::new("f00060");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/page");
            s.send_raw(format!("{HINTS}HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 4\r\n\r\npage"))
                .await;
            s.rxreq().await.expect_url("/old");
            s.send_raw(format!("{HINTS}HTTP/1.1 200 OK\r\nCache-Control: max-age=600\r\nContent-Length: 3\r\n\r\nold"))
                .await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /page HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    let interim = c.read_until("\r\n\r\n").await;
    let interim = String::from_utf8_lossy(&interim);
    assert!(
        interim.starts_with("HTTP/1.1 103 Early Hints\r\n"),
        "{interim}"
    );
    assert!(
        interim
            .to_ascii_lowercase()
            .contains("link: </style.css>; rel=preload"),
        "{interim}"
    );
    c.read_response()
        .await
        .expect_status(200)
        .expect_no_header("link")
        .expect_body("page");
    // Stored without the hint, and a hit sends no 103.
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /page HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_cache_status("hit")
        .expect_no_header("link");
    // HTTP/1.0 clients never get a 1xx (RFC 9110 §15.2).
    let mut c = t.client(&proxy).connect().await;
    c.send_raw("GET /old HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await;
    c.read_response()
        .await
        .expect_status(200)
        .expect_body("old");
    origin.finish().await;
}

// f00061: `Expect: 100-continue`: the client gets `100 Continue` before it
// sends its body, and the origin gets a plain request with the body.
#[tokio::test]
async fn f00061_expect_100_continue() {
    let t = Test::new("f00061");
    let origin = t
        .origin()
        .script(|mut s| async move {
            let r = s.rxreq().await;
            r.expect_method("POST")
                .expect_no_header("expect")
                .expect_body("hello");
            s.txresp(201).body("made").send().await;
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw(
        "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .await;
    let cont = c.read_until("\r\n\r\n").await;
    assert_eq!(&cont[..], b"HTTP/1.1 100 Continue\r\n\r\n");
    c.send_raw("hello").await;
    c.read_response()
        .await
        .expect_status(201)
        .expect_body("made");
    origin.finish().await;
}

// f00062: an expectation hoard cannot meet gets 417 and reaches nobody.
#[tokio::test]
async fn f00062_unknown_expectation_is_417() {
    let t = Test::new("f00062");
    let origin = t.origin().script(|_s| async move {}).start().await;
    let proxy = t.proxy().origin(&origin).start().await;
    let mut c = t.client(&proxy).connect().await;
    c.send_raw(
        "POST /up HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: teapot\r\n\r\nhello",
    )
    .await;
    c.read_response()
        .await
        .expect_status(417)
        .expect_cache_status("detail=expectation-failed");
    origin.finish().await;
}
