//! Upgrade requests (see `pipeline::tunnel`): sent on an HTTP/1.1
//! connection of their own (whatever the upstream's `protocol`), never
//! pooled, tried on the next server only while none could be reached.

use http::Response;
use hyper::body::Incoming;

use super::send::send_error;
use super::{empty, OriginRequest, Upstream};
use crate::error::ProxyError;

impl Upstream {
    /// Sends an upgrade request (see `pipeline::tunnel`) on a connection
    /// of its own, never pooled: after a `101` it belongs to the tunnel.
    pub async fn send_upgrade(
        &self,
        mut req: OriginRequest,
    ) -> Result<Response<Incoming>, ProxyError> {
        let (mut i, start) = self.pick()?;
        let own_host = !req.headers.contains_key(http::header::HOST);
        let mut rest: Option<std::vec::IntoIter<usize>> = None;
        let mut tried = 1;
        // A server that cannot be reached: the next one (the request has
        // not left, whatever its method).
        let mut sender = loop {
            if own_host {
                req.headers.remove(http::header::HOST);
                self.default_host(i, &mut req);
            }
            self.counters.inc(&self.counters.origin_requests);
            let e = match Box::pin(self.connect_h1(i)).await {
                Ok(s) => break s,
                Err(e) => e,
            };
            self.health[i].failure(self.clock.now());
            let next = match tried < self.tries() {
                true => rest.get_or_insert_with(|| self.rest(start, i)).next(),
                false => None,
            };
            let Some(next) = next else {
                Self::note_tries(&req, tried);
                return Err(e);
            };
            self.counters.inc(&self.counters.origin_failovers);
            tracing::info!(
                upstream = %self.cfg.name,
                from = %self.server(i).authority,
                to = %self.server(next).authority,
                error = %e,
                "origin server unreachable; trying the next one"
            );
            i = next;
            tried += 1;
        };
        Self::note_tries(&req, tried);
        let authority = self.server(i).authority.clone();
        let body = req.body.take().unwrap_or_else(empty);
        let sent =
            tokio::time::timeout(self.cfg.read_timeout, sender.send_request(req.build(body)));
        match sent.await {
            Err(_) => Err(self.head_timed_out(&authority)),
            Ok(Err(e)) => Err(self.counted(send_error(&authority, &e))),
            Ok(Ok(resp)) => {
                self.record_status(i, resp.status());
                Ok(resp)
            }
        }
    }
}
