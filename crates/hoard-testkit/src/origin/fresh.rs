//! The most common answers of a scripted origin, folded: a `200` with
//! `Cache-Control: max-age=N` and a body (with an `ETag` or not), or with
//! `Cache-Control: no-store`.
//!
//! [`Script::txresp_fresh`] answers the current request that way,
//! [`Script::serve_fresh`] first receives the next request and checks its URL,
//! and [`OriginBuilder::script_fresh`] is a whole script of that one exchange;
//! [`Script::txresp_fresh_etag`] adds an `ETag`, [`Script::txresp_no_store`]
//! is the uncacheable answer. They are the same calls a case would write out;
//! the origin stays strict (any other request fails the case).

use std::fmt;

use super::{OriginBuilder, Request, Script};

impl Script {
    /// Answers the current request `200` with
    /// `Cache-Control: max-age={max_age}` and `body`.
    pub async fn txresp_fresh(&mut self, max_age: u64, body: impl AsRef<[u8]>) {
        self.txresp(200)
            .hdr("Cache-Control", format!("max-age={max_age}"))
            .body(body)
            .send()
            .await;
    }

    /// Answers the current request `200` with
    /// `Cache-Control: max-age={max_age}`, `ETag: {etag}` and `body`.
    pub async fn txresp_fresh_etag(
        &mut self,
        max_age: u64,
        etag: impl fmt::Display,
        body: impl AsRef<[u8]>,
    ) {
        self.txresp(200)
            .hdr("Cache-Control", format!("max-age={max_age}"))
            .hdr("ETag", etag)
            .body(body)
            .send()
            .await;
    }

    /// Answers the current request `200` with `Cache-Control: no-store` and
    /// `body`.
    pub async fn txresp_no_store(&mut self, body: impl AsRef<[u8]>) {
        self.txresp(200)
            .hdr("Cache-Control", "no-store")
            .body(body)
            .send()
            .await;
    }

    /// Receives the next request, expects its URL to be `url`, and answers it
    /// like [`Script::txresp_fresh`]. Returns the request.
    pub async fn serve_fresh(
        &mut self,
        url: &str,
        max_age: u64,
        body: impl AsRef<[u8]>,
    ) -> Request {
        let req = self.rxreq().await;
        req.expect_url(url);
        self.txresp_fresh(max_age, body).await;
        req
    }
}

impl OriginBuilder {
    /// Sets a script of one exchange: one request for `url`, answered `200`
    /// with `Cache-Control: max-age={max_age}` and `body`.
    pub fn script_fresh(
        self,
        url: impl Into<String>,
        max_age: u64,
        body: impl AsRef<[u8]>,
    ) -> Self {
        let (url, body) = (url.into(), body.as_ref().to_vec());
        self.script(move |mut s| async move {
            s.serve_fresh(&url, max_age, body).await;
        })
    }
}
