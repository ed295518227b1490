//! The `recv` phase's first part: what is done with a request before
//! anything is waited for (limits on the target, the target and Host in
//! normal form, site and route, body limit, upgrades, hop-by-hop fields,
//! `Expect`), and the site choice it rests on.

use hoard_policy::headers::{first_two, has_any, strip_hop_by_hop};
use hoard_policy::target::{normalise_authority, normalise_path_and_query, TargetError};
use http::header::{self};
use http::{Method, Request, Response, Uri, Version};

use std::borrow::Cow;

use super::edge::deliver_steps;
use super::{forwarding, running, tunnel, Conn, Ctx, Pipeline};
use crate::body::ProxyBody;
use crate::request_body::RequestBody;
use crate::request_id::RequestId;
use hoard_config::{Config, HostMatch, SiteConfig};
use hoard_origin::error::{ErrorKind, ProxyError};

/// A request ready for the edge rules and the cache (see `Pipeline::prepare`).
pub(super) struct Recv<'r> {
    pub(super) ctx: Ctx<'r>,
    pub(super) body: RequestBody,
    pub(super) upgrade: Option<(tunnel::Asked, hyper::upgrade::OnUpgrade)>,
    /// (site, route) indices.
    pub(super) at: (usize, usize),
}

/// What `prepare` made of a request. Moved once, never kept across a
/// wait: boxing `Go` would cost every request an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum Prepared<'r> {
    /// On to the edge rules and the cache.
    Go(Recv<'r>),
    /// Answered already (no route).
    Answered(Response<ProxyBody>),
}

/// What the variables of a route's edge values stand for in one request.
pub(crate) fn edge_vars<'a>(
    uri: &'a Uri,
    authority: &'a str,
    client: std::net::IpAddr,
    tls: bool,
) -> hoard_edge::template::Vars<'a> {
    hoard_edge::template::Vars {
        host: strip_port(authority),
        request_uri: uri.path_and_query().map_or("/", |p| p.as_str()),
        remote_addr: client,
        scheme: if tls { "https" } else { "http" },
        path: uri.path(),
        delivery: None,
    }
}

/// The site that serves `authority`, which is in normal form (lower case,
/// see `hoard_policy::target`), over TLS or not, on a listener (`None`:
/// any), among the sites whose `scheme` and `listeners` admit the request:
/// the first whose hosts match; for a Host no site lists, the site with
/// `default = true`, else the first without hosts, else the first (as
/// nginx takes the `default_server`, else the first server of a port).
pub fn select_site(
    cfg: &Config,
    authority: &str,
    tls: bool,
    listener: Option<usize>,
) -> Option<usize> {
    let sites = &cfg.sites;
    if let [only] = sites.as_slice() {
        if only.hosts.is_empty() && only.tls.is_none() && only.bind.on(listener) {
            return Some(0);
        }
    }
    let host = strip_port(authority);
    let here = |s: &SiteConfig| s.tls.is_none_or(|t| t == tls) && s.bind.on(listener);
    sites
        .iter()
        .position(|s| {
            here(s)
                && s.hosts.iter().any(|m| match m {
                    HostMatch::Exact(h) => h == host,
                    HostMatch::Suffix(suffix) => host.ends_with(suffix.as_str()),
                })
        })
        .or_else(|| sites.iter().position(|s| here(s) && s.bind.default))
        .or_else(|| sites.iter().position(|s| here(s) && s.hosts.is_empty()))
        .or_else(|| sites.iter().position(here))
}

/// The request's authority in normal form (see `hoard_policy::target`): from
/// an absolute-form target or `:authority`, which must agree with a Host field
/// if one is sent too (RFC 9112 §3.2.2, RFC 9113 §8.3.1), else from the one
/// Host field.
fn request_authority(parts: &http::request::Parts, tls: bool) -> Result<String, ProxyError> {
    let scheme = if tls { "https" } else { "http" };
    let bad = |e: TargetError| ProxyError::client(ErrorKind::BadRequest, e.to_string());
    let host = match first_two(&parts.headers, &header::HOST) {
        (Some(_), Some(_)) => {
            return Err(ProxyError::client(
                ErrorKind::BadRequest,
                "several Host fields (RFC 9112 §3.2)",
            ))
        }
        (Some(one), None) => Some(
            one.to_str()
                .map_err(|_| ProxyError::client(ErrorKind::BadRequest, "invalid Host"))?,
        ),
        (None, _) => None,
    };
    let host = host
        .map(|h| normalise_authority(h, scheme).map_err(bad))
        .transpose()?;
    match (parts.uri.authority(), host) {
        (Some(target), host) => {
            let target = normalise_authority(target.as_str(), scheme).map_err(bad)?;
            if host.is_some_and(|h| h != target) {
                return Err(bad(TargetError::HostMismatch));
            }
            Ok(target.into_owned())
        }
        (None, Some(host)) => Ok(host.into_owned()),
        (None, None) if parts.version < Version::HTTP_11 => Ok(String::new()),
        (None, None) => Err(ProxyError::client(
            ErrorKind::BadRequest,
            "missing Host (RFC 9112 §3.2)",
        )),
    }
}

/// Replaces the target by its normal form, the one that is routed, keyed
/// and forwarded; 400 when it has none.
pub(super) fn normalise_target(uri: &mut Uri) -> Result<(), ProxyError> {
    let bad = |e: TargetError| ProxyError::client(ErrorKind::BadRequest, e.to_string());
    let Some(pq) = uri.path_and_query() else {
        return Err(bad(TargetError::NotOriginForm));
    };
    let (path, query) = normalise_path_and_query(pq.path(), pq.query()).map_err(bad)?;
    if matches!(path, Cow::Borrowed(_)) && !matches!(query, Some(Cow::Owned(_))) {
        if uri.authority().is_some() {
            // Absolute-form: keep the origin-form part only.
            *uri = Uri::from(pq.clone());
        }
        return Ok(());
    }
    let text = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.into_owned(),
    };
    *uri = Uri::try_from(text).map_err(|_| bad(TargetError::NotOriginForm))?;
    Ok(())
}

fn strip_port(authority: &str) -> &str {
    if authority.starts_with('[') {
        return authority
            .split_once(']')
            .map_or(authority, |(h, _)| &authority[..h.len() + 1]);
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h)
}

impl Pipeline {
    /// What is done with a request before anything is waited for: limits, the target
    /// and Host in normal form, site and route, upgrades, hop-by-hop
    /// fields and `Expect`. A plain function, so that its locals take no
    /// room in the request's future.
    pub(super) fn prepare<'r>(
        &self,
        run: &'r running::Running,
        req: Request<RequestBody>,
        conn: Conn,
        request_id: Option<&'r RequestId>,
        watched: bool,
    ) -> Result<Prepared<'r>, ProxyError> {
        let Conn {
            peer,
            tls,
            send,
            interim,
            listener,
            ..
        } = conn;
        let (mut parts, body) = req.into_parts();
        // A request from another member: its scheme is the client's at the
        // first node; a forged peer field is removed (see `cluster`).
        let hop = self
            .cluster
            .as_ref()
            .and_then(|c| c.take_hop(&mut parts.headers, &parts.method, &parts.uri));
        let tls = hop.as_ref().map_or(tls, |h| h.tls);
        let peer_log = self
            .cluster
            .as_ref()
            .and_then(|c| c.take_log(&mut parts.headers))
            .filter(|_| hop.is_some());
        let limits = &run.cfg.server;
        if parts.uri.path_and_query().map_or(0, |p| p.as_str().len()) > limits.max_uri_length {
            return Err(ProxyError::client(
                ErrorKind::UriTooLong,
                "request target too long",
            ));
        }
        tunnel::refuse_connect(&parts)?;
        let authority = request_authority(&parts, tls)?;
        normalise_target(&mut parts.uri)?;
        let site_idx = select_site(&run.cfg, &authority, tls, Some(usize::from(listener)))
            .ok_or_else(|| {
                ProxyError::client(
                    ErrorKind::NoRoute,
                    format!("no site for host {authority:?}"),
                )
            })?;
        let site = &run.cfg.sites[site_idx];
        let path = parts.uri.path();
        // Costs one look at an empty list unless trusted proxies are set.
        let client =
            forwarding::client_addr(peer.ip(), &parts.headers, &run.cfg.server.trusted_proxies);
        let input = hoard_config::rules::RuleInput {
            method: &parts.method,
            headers: &parts.headers,
            query: parts.uri.query(),
            client,
        };
        let Some(route_idx) = site.route_for_request(path, &input) else {
            let e = ProxyError::client(ErrorKind::NoRoute, format!("no route for {path:?}"));
            let mut resp = self.error_response(&e, None);
            if let Some(pages) = &site.error_pages {
                super::edge::replace_error(pages, &mut resp);
            }
            if !site.response_headers.is_empty() {
                let vars = edge_vars(&parts.uri, &authority, client, tls);
                site.response_headers.apply(resp.headers_mut(), &vars);
            }
            return Ok(Prepared::Answered(resp));
        };
        let route = &site.routes[route_idx];
        // hoard's own refusals from here on answer for the route: its error
        // page and header edits apply, as to its other answers.
        let refuse = |e: ProxyError, uri: &Uri| match route.edge.as_deref() {
            None => Err(e),
            Some(edge) => {
                let mut resp = self.error_response(&e, None);
                let vars = edge_vars(uri, &authority, client, tls);
                deliver_steps(&run.steps[site_idx][route_idx], edge, &mut resp, &vars);
                Ok(Prepared::Answered(resp))
            }
        };
        // A declared body over the route's limit: 413 before anything is
        // sent on (a streamed one is cut in `route_request`).
        if let Some(len) = has_any(&parts.headers, &[header::CONTENT_LENGTH])
            .then(|| parts.headers.get(header::CONTENT_LENGTH))
            .flatten()
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        {
            if len > route.max_body_size.unwrap_or(limits.max_body_size) {
                let e = ProxyError::client(ErrorKind::BodyTooLarge, format!("body of {len} bytes"));
                return refuse(e, &parts.uri);
            }
        }
        let asked = match tunnel::check(&parts, route.upgrade) {
            Ok(asked) => asked,
            Err(e) => return refuse(e, &parts.uri),
        };
        let upgrade = asked.and_then(|asked| {
            if matches!(asked, tunnel::Asked::WebSocketOverHttp2) {
                // RFC 8441 §5: a GET with an Upgrade, to the origin.
                parts.method = Method::GET;
            }
            let on = parts.extensions.remove::<hyper::upgrade::OnUpgrade>()?;
            Some((asked, on))
        });
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        // An include's request (made by its page, never sent by a client).
        let esi = parts
            .extensions
            .remove::<std::sync::Arc<super::esi::Level>>();
        if route.esi.is_some() {
            for name in &super::esi::NOT_FOR_PAGES {
                headers.remove(name);
            }
        }
        // The route's normalisation: the key, `Vary` and the origin see it.
        if let Some(rq) = &route.rewrite_query {
            rewrite_query(route, rq, &mut parts.uri);
        }
        for n in &route.normalise {
            normalise(n, &mut headers);
        }
        // `100-continue` is answered here (hyper sends `100 Continue` when
        // the body is first read, i.e. when it goes to the origin), so the
        // origin gets a plain request; any other expectation is refused
        // (RFC 9110 §10.1.1).
        let expect = has_any(&headers, &[header::EXPECT])
            .then(|| headers.remove(header::EXPECT))
            .flatten();
        if let Some(expect) = expect {
            if !expect.as_bytes().eq_ignore_ascii_case(b"100-continue") {
                let e = ProxyError::client(ErrorKind::ExpectationFailed, "unsupported expectation");
                return refuse(e, &parts.uri);
            }
        }
        // Fills ask the origin for identity; the client's field is kept
        // for choosing among the stored codings (see `crate::encode`).
        let (accept, accept_field) = if !route.encodings.is_empty()
            && (parts.method == Method::GET || parts.method == Method::HEAD)
            && upgrade.is_none()
        {
            let a = hoard_policy::encoding::Accept::from_request(&headers);
            let field = headers.insert(header::ACCEPT_ENCODING, route.fill_accept_encoding.clone());
            (Some(a), field)
        } else {
            (None, None)
        };
        let fields_final = parts.method == Method::GET
            && matches!(parts.version, Version::HTTP_11 | Version::HTTP_10)
            && run.steps[site_idx][route_idx].deliver_is_empty(route)
            && esi.is_none()
            // A watcher's record reads `Cache-Status` from the map.
            && !watched;
        let ctx = Ctx {
            route,
            site,
            // Only a route that answers by itself has no upstream to use.
            upstream: run
                .upstreams
                .get(route.upstream)
                .unwrap_or(&run.no_upstream),
            run,
            peer,
            client,
            request_id,
            tls,
            method: parts.method,
            uri: parts.uri,
            version: parts.version,
            headers,
            authority,
            send,
            interim,
            from_peer: hop.is_some(),
            peer_log,
            clustered: self.cluster.is_some(),
            accept,
            accept_field,
            filtered: None,
            esi,
            listener,
            fields_final,
        };
        Ok(Prepared::Go(Recv {
            ctx,
            body,
            upgrade,
            at: (site_idx, route_idx),
        }))
    }
}

/// The query as the route's `rewrite_query` wants it (see
/// `hoard_config::normalise`).
fn rewrite_query(
    route: &std::sync::Arc<hoard_config::RouteConfig>,
    rq: &hoard_config::normalise::QueryRewrite,
    uri: &mut Uri,
) {
    thread_local! {
        /// The new target is written here, then copied once into a buffer
        /// of its exact length (a `Bytes` made from a longer `String` costs
        /// a second allocation).
        static SCRATCH: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
    }
    let Some(sent) = uri.path_and_query() else {
        return;
    };
    let Some(query) = sent.query() else { return };
    let pq = match super::rewrite_memo::get(route, sent.as_str().as_bytes()) {
        Some(remembered) => remembered,
        None => {
            let path = sent.path();
            let target = SCRATCH.with(|s| {
                let mut target = s.borrow_mut();
                target.clear();
                target.push_str(path);
                target.push('?');
                if !rq.apply_into(query, &mut target) {
                    return None;
                }
                if target.ends_with('?') {
                    target.pop();
                }
                Some(bytes::Bytes::copy_from_slice(target.as_bytes()))
            });
            // Only the path and query are parsed again.
            let pq = target.and_then(|t| http::uri::PathAndQuery::from_maybe_shared(t).ok());
            super::rewrite_memo::put(route, sent.as_str().as_bytes(), pq.clone());
            pq
        }
    };
    let Some(pq) = pq else { return };
    if uri.scheme().is_none() && uri.authority().is_none() {
        // Origin form (every request but a proxy's absolute form): no
        // other part to keep.
        *uri = Uri::from(pq);
        return;
    }
    let mut parts = std::mem::take(uri).into_parts();
    parts.path_and_query = Some(pq);
    *uri = Uri::from_parts(parts).unwrap_or_default();
}

/// A header set to the best of the route's values for it (all of its
/// lines read as one list).
fn normalise(n: &hoard_config::normalise::Normalise, headers: &mut http::HeaderMap) {
    let mut lines = headers
        .get_all(&n.header)
        .iter()
        .filter_map(|v| v.to_str().ok());
    let sent = match (lines.next(), lines.next()) {
        (None, _) => None,
        (Some(one), None) => Some(std::borrow::Cow::Borrowed(one)),
        (Some(a), Some(b)) => {
            let mut all = format!("{a},{b}");
            for l in lines {
                all.push(',');
                all.push_str(l);
            }
            Some(std::borrow::Cow::Owned(all))
        }
    };
    let pick = n.pick(sent.as_deref());
    if let Ok(v) = http::HeaderValue::from_str(pick) {
        headers.insert(n.header.clone(), v);
    }
}
