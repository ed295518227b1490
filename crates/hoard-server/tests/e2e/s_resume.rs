//! s: a fill whose source drops after the response head goes on from the
//! next choice with `Range` and `If-Range` (RFC 9110 §13.1.5, §14.2):
//! readers see one uncut body, or, when the rest cannot be trusted to be
//! of the same representation, the cut they saw before (counted).

use hoard_testkit::{Barrier, ClientError, Origin, Response, Test, TestProxy};

/// The object: 100 bytes, two halves that differ so a mixture shows.
const V1: &[u8] = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaabbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
/// Another version of it.
const V2: &[u8] = b"XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX";
/// Where the origin drops the first answer.
const CUT: usize = 40;

/// Starts three readers of `path` (one leader, two collapsed on its
/// fill) and lets the origin answer once all three wait (`go`).
async fn three_readers(
    t: &Test,
    proxy: &TestProxy,
    path: &str,
    go: &Barrier,
) -> Vec<tokio::task::JoinHandle<Result<Response, ClientError>>> {
    let spawn = |p: String| {
        let c = t.client(proxy);
        tokio::spawn(async move { c.get(&p).try_send().await })
    };
    let mut readers = vec![spawn(path.to_string())];
    proxy.wait_counter("fills_started", 1).await;
    readers.push(spawn(path.to_string()));
    readers.push(spawn(path.to_string()));
    proxy.wait_counter("fill_waiters_total", 2).await;
    go.sync().await;
    readers
}

/// Every reader's response was cut after the first `CUT` bytes of V1,
/// with nothing of another version after them.
async fn all_cut(readers: Vec<tokio::task::JoinHandle<Result<Response, ClientError>>>) {
    for r in readers {
        let err = r
            .await
            .unwrap()
            .expect_err("a cut body must not look complete");
        let got = err.partial().expect("an incomplete body").body.clone();
        assert!(V1[..CUT].starts_with(&got), "not a prefix of V1: {got:?}");
    }
}

/// An origin that sends the head with `validator` (a header line) and the
/// first `CUT` bytes of V1, then drops; `rest` answers what comes next.
async fn dropping_origin<F, Fut>(
    t: &Test,
    go: &Barrier,
    validator: (&'static str, String),
    rest: F,
) -> Origin
where
    F: FnOnce(hoard_testkit::Script) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let go = go.clone();
    t.origin()
        .script(move |mut s| async move {
            let r = s.rxreq().await;
            r.expect_method("GET")
                .expect_no_header("range")
                .expect_no_header("if-range");
            go.sync().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=60")
                .hdr(validator.0, validator.1)
                .hdr("Content-Length", V1.len())
                .send_head()
                .await;
            s.chunk(&V1[..CUT]).await;
            s.close().await;
            rest(s).await;
        })
        .start()
        .await
}

// s01001: an origin drops mid-body after a strong ETag: the fill asks for
// the rest with `Range: bytes=40-` and `If-Range: "v1"`, the first reader
// and two collapsed ones get one uncut body, and the object is stored
// whole (a later request is a hit).
#[tokio::test]
async fn s01001_a_cut_origin_body_is_resumed_with_if_range() {
    let t = Test::new("s01001");
    let go = t.barrier(2);
    let origin = dropping_origin(&t, &go, ("ETag", "\"v1\"".into()), |mut s| async move {
        s.rxreq()
            .await
            .expect_method("GET")
            .expect_url("/r")
            .expect_header("range", "bytes=40-")
            .expect_header("if-range", "\"v1\"")
            .expect_no_header("if-none-match");
        s.txresp(206)
            .hdr("Cache-Control", "max-age=60")
            .hdr("ETag", "\"v1\"")
            .hdr("Content-Range", "bytes 40-99/100")
            .body(&V1[CUT..])
            .send()
            .await;
    })
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for r in three_readers(&t, &proxy, "/r", &go).await {
        r.await.unwrap().unwrap().expect_status(200).expect_body(V1);
    }
    proxy
        .expect_counter("fill_resumed", 1)
        .expect_counter("fill_cut", 0)
        .expect_counter("fills_aborted", 0)
        .expect_counter("objects_stored", 1);
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body(V1)
        .expect_cache_status("hit");
    origin.finish().await;
}

// s01002: with a weak ETag nothing proves the rest is of the same bytes:
// no Range request, every reader is cut, the cut is counted and nothing is
// stored.
#[tokio::test]
async fn s01002_a_weak_etag_is_not_resumed() {
    let t = Test::new("s01002");
    let go = t.barrier(2);
    let origin = dropping_origin(&t, &go, ("ETag", "W/\"v1\"".into()), |_| async {}).await;
    let proxy = t.proxy().origin(&origin).start().await;
    all_cut(three_readers(&t, &proxy, "/w", &go).await).await;
    proxy.wait_counter("fills_aborted", 1).await;
    proxy
        .expect_counter("fill_cut", 1)
        .expect_counter("fill_resumed", 0)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// s01003: the same without any validator (a Last-Modified as late as Date
// is weak too, RFC 9110 §8.8.2.2): cut, counted, nothing stored.
#[tokio::test]
async fn s01003_no_strong_validator_is_not_resumed() {
    let t = Test::new("s01003");
    let go = t.barrier(2);
    let now = httpdate::fmt_http_date(t.clock.now());
    let origin = dropping_origin(&t, &go, ("Last-Modified", now), |_| async {}).await;
    let proxy = t.proxy().origin(&origin).start().await;
    all_cut(three_readers(&t, &proxy, "/n", &go).await).await;
    proxy.wait_counter("fills_aborted", 1).await;
    proxy
        .expect_counter("fill_cut", 1)
        .expect_counter("fill_resumed", 0)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// s01004: the object changed meanwhile: the origin answers the Range
// request with a 200 of another version. The readers are cut after the
// bytes of the first (never a mixture), the cut is counted, nothing is
// stored.
#[tokio::test]
async fn s01004_a_changed_object_stays_cut() {
    let t = Test::new("s01004");
    let go = t.barrier(2);
    let origin = dropping_origin(&t, &go, ("ETag", "\"v1\"".into()), |mut s| async move {
        s.rxreq()
            .await
            .expect_header("range", "bytes=40-")
            .expect_header("if-range", "\"v1\"");
        s.txresp_fresh_etag(60, "\"v2\"", V2).await;
    })
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    all_cut(three_readers(&t, &proxy, "/c", &go).await).await;
    proxy.wait_counter("fills_aborted", 1).await;
    proxy
        .expect_counter("fill_cut", 1)
        .expect_counter("fill_resumed", 0)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// s01005: a strong Last-Modified (a minute before Date) and a chunked
// body of unknown length: the rest is asked for with `If-Range: <date>`,
// and the 206's Content-Range gives the length.
#[tokio::test]
async fn s01005_a_strong_last_modified_resumes_a_chunked_body() {
    let t = Test::new("s01005");
    let go = t.barrier(2);
    let lm = httpdate::fmt_http_date(t.clock.now() - std::time::Duration::from_secs(60));
    let origin = t
        .origin()
        .script({
            let (go, lm) = (go.clone(), lm.clone());
            move |mut s| async move {
                s.rxreq().await.expect_no_header("range");
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Last-Modified", &lm)
                    .chunked()
                    .send_head()
                    .await;
                s.chunk(&V1[..CUT]).await;
                s.close().await;
                s.rxreq()
                    .await
                    .expect_header("range", "bytes=40-")
                    .expect_header("if-range", &lm);
                s.txresp(206)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("Last-Modified", &lm)
                    .hdr("Content-Range", "bytes 40-99/100")
                    .body(&V1[CUT..])
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for r in three_readers(&t, &proxy, "/lm", &go).await {
        r.await.unwrap().unwrap().expect_status(200).expect_body(V1);
    }
    proxy
        .expect_counter("fill_resumed", 1)
        .expect_counter("objects_stored", 1);
    t.client(&proxy)
        .get("/lm")
        .send()
        .await
        .expect_body(V1)
        .expect_cache_status("hit");
    origin.finish().await;
}

/// Starts three cluster members n1..n3 (as `i_cluster` does), on ports of
/// this case's own block below the ephemeral range (26000 + 16 per case
/// number past 1000), node `i` adjusted by `tune`.
async fn three_nodes(t: &Test, origin: &Origin, tune: &crate::cluster::Tune) -> Vec<TestProxy> {
    let case: u16 = t.name()[1..].parse().expect("an sNNNNN case");
    let base = 26_000 + 16 * (case - 1000);
    let held: Vec<_> = (base..base + 16)
        .filter_map(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok())
        .take(3)
        .collect();
    assert_eq!(held.len(), 3, "free ports in this case's block");
    let members: Vec<hoard_config::Member> = held
        .iter()
        .enumerate()
        .map(|(i, l)| hoard_config::Member {
            name: format!("n{}", i + 1),
            addr: l.local_addr().unwrap(),
            weight: 1.0,
        })
        .collect();
    drop(held);
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(crate::cluster::member(t, origin, &members, i, 8 << 20, |_| {}, tune).await);
    }
    nodes
}

/// A path whose owner choices are `order` (0 is n1).
fn owned_in_order(order: [usize; 3]) -> String {
    use hoard_cluster::ring::{choices, Slot};
    let slots: Vec<Slot> = (1..=3).map(|i| Slot::new(&format!("n{i}"), 1.0)).collect();
    (0..1000)
        .map(|i| format!("/p/{i}"))
        .find(|p| choices(&slots, format!("http|localhost|{p}").as_bytes(), |_| true) == order)
        .expect("a path in that order")
}

/// n2 stops within 200 ms of its shutdown (its fills are cancelled).
fn n2_stops_fast(i: usize, c: &mut hoard_config::Config) {
    if i == 1 {
        c.server.shutdown_timeout = std::time::Duration::from_millis(200);
    }
}

// s01006: three nodes; n1's readers (one leader, two collapsed) read an
// object through its owner n2, which dies mid-body: n1 asks the key's next
// choice, n3, for the rest with Range and If-Range; n3 fills from the
// origin and answers 206 from its fill; n1's readers see one uncut body.
#[tokio::test]
async fn s01006_an_owner_dying_mid_body_costs_its_readers_nothing() {
    let t = Test::new("s01006");
    let path = owned_in_order([1, 2, 0]);
    let (go, head) = (t.barrier(2), t.barrier(2));
    let origin = t
        .origin()
        .script({
            let (go, head, path) = (go.clone(), head.clone(), path.clone());
            move |mut s| async move {
                // n2, the owner, fills.
                s.rxreq().await.expect_url(&path).expect_no_header("range");
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("ETag", "\"v1\"")
                    .hdr("Content-Length", V1.len())
                    .send_head()
                    .await;
                s.chunk(&V1[..CUT]).await;
                head.sync().await;
                // n3, asked for the rest by n1, fills the whole object.
                s.rxreq().await.expect_url(&path).expect_no_header("range");
                s.txresp_fresh_etag(60, "\"v1\"", V1).await;
            }
        })
        .start()
        .await;
    let mut nodes = three_nodes(&t, &origin, &n2_stops_fast).await;
    let n1 = &nodes[0];
    let mut leader = t.client(n1).connect().await;
    leader.get(&path).tx().await;
    n1.wait_counter("fills_started", 1).await;
    let followers: Vec<_> = (0..2).map(|_| t.client(n1).get(&path).spawn()).collect();
    n1.wait_counter("fill_waiters_total", 2).await;
    go.sync().await;
    leader.read_until(&V1[..CUT]).await;
    // n2 dies: its fill is cancelled, the hop to n1 breaks off.
    nodes.remove(1).stop().await;
    head.sync().await;
    let n1 = &nodes[0];
    leader.read_until(&V1[CUT..]).await;
    for f in followers {
        f.await.unwrap().expect_status(200).expect_body(V1);
    }
    n1.expect_counter("fill_resumed", 1)
        .expect_counter("fill_cut", 0)
        .expect_counter("client_errors", 0);
    nodes[1].expect_counter("range_misses", 1);
    origin.finish().await;
}

// s01007: an upstream of two servers: the first drops mid-body, the rest
// is asked of the next one (round-robin), which answers 206; one uncut
// body, stored whole.
#[tokio::test]
async fn s01007_the_rest_comes_from_the_next_server() {
    let t = Test::new("s01007");
    let go = t.barrier(2);
    let first = dropping_origin(&t, &go, ("ETag", "\"v1\"".into()), |_| async {}).await;
    let next = t
        .origin()
        .script(|mut s| async move {
            s.rxreq()
                .await
                .expect_header("range", "bytes=40-")
                .expect_header("if-range", "\"v1\"");
            s.txresp(206)
                .hdr("Cache-Control", "max-age=60")
                .hdr("ETag", "\"v1\"")
                .hdr("Content-Range", "bytes 40-99/100")
                .body(&V1[CUT..])
                .send()
                .await;
        })
        .start()
        .await;
    let server = |o: &Origin| hoard_config::ServerAddr::http(o.addr().to_string());
    let servers = vec![server(&first), server(&next)];
    let proxy = t.proxy().upstream(|u| u.servers = servers).start().await;
    for r in three_readers(&t, &proxy, "/s", &go).await {
        r.await.unwrap().unwrap().expect_body(V1);
    }
    proxy
        .expect_counter("fill_resumed", 1)
        .expect_counter("objects_stored", 1);
    first.finish().await;
    next.finish().await;
}

// s01008: a source that ignores Range answers the request for the rest
// with a 200 of the same representation (same strong ETag and length):
// the bytes already read are skipped, the readers see one uncut body.
#[tokio::test]
async fn s01008_a_whole_answer_of_the_same_bytes_is_skipped_to_the_cut() {
    let t = Test::new("s01008");
    let go = t.barrier(2);
    let origin = dropping_origin(&t, &go, ("ETag", "\"v1\"".into()), |mut s| async move {
        s.rxreq().await.expect_header("range", "bytes=40-");
        s.txresp_fresh_etag(60, "\"v1\"", V1).await;
    })
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for r in three_readers(&t, &proxy, "/i", &go).await {
        r.await.unwrap().unwrap().expect_body(V1);
    }
    proxy
        .expect_counter("fill_resumed", 1)
        .expect_counter("objects_stored", 1);
    origin.finish().await;
}

// s01009: the attempts are bounded: an upstream of one server is asked
// once for the rest; when that answer drops too, the readers are cut
// after the bytes they had (one of each answer), counted, nothing stored.
#[tokio::test]
async fn s01009_a_rest_that_drops_again_is_not_asked_for_forever() {
    let t = Test::new("s01009");
    let go = t.barrier(2);
    let origin = dropping_origin(&t, &go, ("ETag", "\"v1\"".into()), |mut s| async move {
        s.rxreq().await.expect_header("range", "bytes=40-");
        s.txresp(206)
            .hdr("Cache-Control", "max-age=60")
            .hdr("ETag", "\"v1\"")
            .hdr("Content-Range", "bytes 40-99/100")
            .body(&V1[CUT..])
            .send_truncated(10)
            .await;
    })
    .await;
    let proxy = t.proxy().origin(&origin).start().await;
    for r in three_readers(&t, &proxy, "/b", &go).await {
        let err = r.await.unwrap().expect_err("cut");
        assert_eq!(err.partial().unwrap().body, &V1[..CUT + 10]);
    }
    proxy.wait_counter("fills_aborted", 1).await;
    proxy
        .expect_counter("fill_resumed", 1)
        .expect_counter("fill_cut", 1)
        .expect_counter("objects_stored", 0);
    origin.finish().await;
}

// s01010: the same where the key's next choice after its dead owner is
// the forwarding node itself: n1 asks the origin for the rest (Range and
// If-Range), and its readers see one uncut body.
#[tokio::test]
async fn s01010_an_owner_dying_mid_body_is_resumed_from_the_origin() {
    let t = Test::new("s01010");
    let path = owned_in_order([1, 0, 2]);
    let (go, head) = (t.barrier(2), t.barrier(2));
    let origin = t
        .origin()
        .script({
            let (go, head) = (go.clone(), head.clone());
            move |mut s| async move {
                s.rxreq().await.expect_no_header("range");
                go.sync().await;
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("ETag", "\"v1\"")
                    .hdr("Content-Length", V1.len())
                    .send_head()
                    .await;
                s.chunk(&V1[..CUT]).await;
                head.sync().await;
                let r = s.rxreq().await;
                r.expect_header("range", "bytes=40-")
                    .expect_header("if-range", "\"v1\"");
                assert_eq!(
                    r.header("via").as_deref(),
                    Some("1.1 hoard-n1"),
                    "sent by n1"
                );
                s.txresp(206)
                    .hdr("Cache-Control", "max-age=60")
                    .hdr("ETag", "\"v1\"")
                    .hdr("Content-Range", "bytes 40-99/100")
                    .body(&V1[CUT..])
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let mut nodes = three_nodes(&t, &origin, &n2_stops_fast).await;
    let n1 = &nodes[0];
    let mut leader = t.client(n1).connect().await;
    leader.get(&path).tx().await;
    n1.wait_counter("fills_started", 1).await;
    let followers: Vec<_> = (0..2).map(|_| t.client(n1).get(&path).spawn()).collect();
    n1.wait_counter("fill_waiters_total", 2).await;
    go.sync().await;
    leader.read_until(&V1[..CUT]).await;
    nodes.remove(1).stop().await;
    head.sync().await;
    leader.read_until(&V1[CUT..]).await;
    for f in followers {
        f.await.unwrap().expect_status(200).expect_body(V1);
    }
    nodes[0]
        .expect_counter("fill_resumed", 1)
        .expect_counter("fill_cut", 0);
    origin.finish().await;
}
