//! The sizes of the request path's futures, with a budget.
//!
//! Every byte of the future hyper holds for a request is moved when the
//! request starts (hyper boxes the service's future), and an `.await` on a
//! step makes the caller's future as large as the step's, so one rare,
//! large step (a fill, a slice, a tunnel) would make every hit pay for its
//! room. The rare steps are boxed; these cases keep it so.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use crate::request_body::RequestBody;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::key::CacheKey;
use http::Request;

use super::{Applied, Ctx, Pipeline};

#[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
fn size<A, B, F: Future>(_: impl FnOnce(A, B) -> F) -> usize {
    std::mem::size_of::<F>()
}

type P = &'static Arc<Pipeline>;
type C = &'static Ctx<'static>;

/// (name, bytes) of each step, outermost first.
#[allow(unreachable_code, unused_variables, clippy::diverging_sub_expression)]
pub(crate) fn sizes() -> Vec<(&'static str, usize)> {
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    vec![
        (
            "serve",
            size(|p: Arc<Pipeline>, r: Request<RequestBody>| p.serve(r, unreachable!())),
        ),
        (
            "recv",
            size(|p: P, r: Request<RequestBody>| p.clone().recv(r, unreachable!(), None, false)),
        ),
        (
            "route_request",
            size(|p: P, c: C| p.route_request(c, None, unreachable!())),
        ),
        (
            "cacheable",
            size(|p: P, c: C| p.cacheable(c, Applied::None)),
        ),
        ("pass", size(|p: P, c: C| p.pass(c, None, None))),
        (
            "purge_method",
            size(move |p: P, r: Request<RequestBody>| p.purge_method(r, addr.ip(), false)),
        ),
        (
            "partial_copy",
            size(|p: P, c: C| {
                let _k: &'static CacheKey = unreachable!();
                let _cc: &'static CacheControl = unreachable!();
                p.partial_copy(c, _k, _cc, std::time::SystemTime::UNIX_EPOCH)
            }),
        ),
        (
            "sliced",
            size(|p: P, c: C| {
                let k: &'static CacheKey = unreachable!();
                let cc: &'static CacheControl = unreachable!();
                p.sliced(c, k, cc, 0)
            }),
        ),
        (
            "fetch",
            size(|p: P, c: C| {
                p.fetch(super::fetch::Want {
                    ctx: c,
                    key: unreachable!(),
                    req_cc: unreachable!(),
                    fwd: hoard_policy::cache_status::Fwd::UriMiss,
                    stale: None,
                    variant: None,
                    hit_for_pass: false,
                    rule: None,
                    partial: None,
                })
            }),
        ),
        (
            "tunnel",
            size(|p: P, c: C| p.tunnel(c, unreachable!(), unreachable!())),
        ),
        (
            "upstream.send",
            size(|c: C, _: ()| c.upstream.send(unreachable!())),
        ),
        (
            "lookup",
            size(|p: P, _: ()| {
                p.store
                    .lookup(unreachable!(), unreachable!(), unreachable!())
            }),
        ),
        (
            "recv_steps",
            size(|p: P, s: &'static super::phases::RouteSteps| {
                let c: &'static mut Ctx<'static> = unreachable!();
                p.recv_steps(s, unreachable!(), c, false)
            }),
        ),
    ]
}

/// The most the request's future (`serve`) may take in a debug build
/// (release builds lay it out smaller). A change that needs more boxes its
/// rare step instead, or raises this and says why. (2592: the request's
/// noted state carries the count of servers its upstream tried, a pointer
/// the access log reads after a failover, 16 bytes with its alignment; the
/// access log's request id reaches the origin request by reference
/// (`recv`'s argument and `Ctx::request_id`), 16 bytes. 2624: the
/// client's own `Accept-Encoding` kept beside its parsed form
/// (`Ctx::accept_field`, a reference-counted value taken from the request,
/// no copy), which only a stored coding hoard does not know needs, 32
/// bytes. 2640: a route's Proxy-Wasm streams (`Ctx::filtered`), one
/// boxed pointer, `None` on a route without filters, 16 bytes with its
/// alignment. 2656: a watcher's record of the request (`GET /trace`, see
/// `trace`), one boxed pointer, `None` unless someone watches, 16 bytes
/// with its alignment. 2672: an ESI include's place in its page
/// (`Ctx::esi`, one pointer, `None` for every client request) and the
/// listener's index its sub-requests keep (`Ctx::listener`), 16 bytes.
/// 1680: `serve`'s future written out by hand (`serving`), which no
/// longer keeps the request and the connection twice beside `recv`'s;
/// `recv` owns the request id it is given, 40 bytes more there.)
pub(crate) const SERVE_BUDGET: usize = 1680;

#[cfg(test)]
mod tests {
    #[test]
    fn the_request_future_stays_small() {
        let sizes = super::sizes();
        for (name, bytes) in &sizes {
            eprintln!("{name:>14} {bytes:>6}");
        }
        let serve = sizes.iter().find(|(n, _)| *n == "serve").unwrap().1;
        assert!(
            serve <= super::SERVE_BUDGET,
            "serve's future takes {serve} bytes, over its budget of {}: box the rare step that grew it",
            super::SERVE_BUDGET
        );
    }
}
