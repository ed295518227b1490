//! Building the request that goes to the origin.

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Uri};

use super::{Ctx, Pipeline};
use crate::request_id::RequestId;
use hoard_config::HostHeader;
use hoard_origin::{OriginRequest, ReqBody};

/// Request fields a cache fill must not forward: the fill is shared, so the
/// client's own preconditions and ranges are answered from the stored
/// response instead (RFC 9111 §4.3.2).
const FILL_STRIPPED: [HeaderName; 6] = [
    header::IF_NONE_MATCH,
    header::IF_MODIFIED_SINCE,
    header::IF_MATCH,
    header::IF_UNMODIFIED_SINCE,
    header::IF_RANGE,
    header::RANGE,
];

/// A pass is the client's own exchange: its `Accept-Encoding` (the codings
/// hoard knows, as the client weighed them) instead of the route's
/// `fill_accept_encoding` (see `crate::encode`).
pub(crate) fn client_accept_encoding(ctx: &Ctx<'_>, headers: &mut HeaderMap) {
    let Some(accept) = &ctx.accept else {
        return;
    };
    match accept
        .to_field()
        .and_then(|f| HeaderValue::from_str(&f).ok())
    {
        Some(v) => {
            headers.insert(header::ACCEPT_ENCODING, v);
        }
        None => {
            headers.remove(header::ACCEPT_ENCODING);
        }
    }
}

impl Pipeline {
    /// The origin request for `ctx`: same target, client fields minus
    /// hop-by-hop ones, Host as configured, `Via` appended, the forwarding
    /// fields owned by hoard (see `forwarding`), `X-Request-Id`. For a fill (`for_fill`), the method is GET and the
    /// client's preconditions and Range are removed.
    pub(crate) fn origin_request(
        &self,
        ctx: &Ctx<'_>,
        for_fill: bool,
        body: Option<ReqBody>,
    ) -> OriginRequest {
        let mut headers: HeaderMap = ctx.headers.clone();
        if for_fill {
            for h in &FILL_STRIPPED {
                headers.remove(h);
            }
        } else {
            client_accept_encoding(ctx, &mut headers);
        }
        // With `host = "server"` (or no Host from an HTTP/1.0 client), the
        // upstream sets Host to the server it picks for this request.
        let host = match &ctx.upstream.cfg.host {
            HostHeader::Preserve if !ctx.authority.is_empty() => {
                HeaderValue::from_str(&ctx.authority).ok()
            }
            HostHeader::Fixed(v) => HeaderValue::from_str(v).ok(),
            HostHeader::Preserve | HostHeader::Server => None,
        };
        match host {
            Some(h) => {
                headers.insert(header::HOST, h);
            }
            None => {
                headers.remove(header::HOST);
            }
        }
        self.add_via(&mut headers, ctx.version);
        let trusted = ctx
            .run
            .cfg
            .server
            .trusted_proxies
            .iter()
            .any(|c| c.contains(ctx.peer.ip()));
        super::forwarding::prepare(
            &mut headers,
            super::forwarding::Hop {
                peer: ctx.peer.ip(),
                scheme: ctx.scheme(),
                host: &ctx.authority,
                trusted,
            },
            &ctx.route.forward_headers,
        );
        // The request's id: the log line's; with the log off, a trusted
        // proxy's, else one made here (a client's own copy is replaced).
        let id = match ctx.request_id {
            Some(id) => id.to_header(),
            None => RequestId::from_client(trusted, &ctx.headers)
                .unwrap_or_else(RequestId::make)
                .to_header(),
        };
        headers.insert(crate::request_id::FIELD, id);
        if let Some(edge) = ctx.route.edge.as_deref() {
            // The route's own values of forwarding fields (`X-Real-IP =
            // "$remote_addr"`) are the operator's, not the client's: set
            // again after the client's copies went.
            edge.request_headers.apply_forwarding(
                &mut headers,
                &super::edge_vars(&ctx.uri, &ctx.authority, ctx.client, ctx.tls),
            );
        }
        let uri = ctx
            .uri
            .path_and_query()
            .map(|pq| Uri::from(pq.clone()))
            .unwrap_or_else(|| Uri::from_static("/"));
        let method = if for_fill {
            Method::GET
        } else {
            ctx.method.clone()
        };
        OriginRequest {
            method,
            uri,
            headers,
            body,
            interim: ctx.interim.clone(),
            tries: super::note_tries(),
        }
    }
}
