use super::super::{Config, ConfigError};
use hoard_policy::config::ClientNoCache;

const UP: &str = "[upstream.app]\nservers = [\"http://127.0.0.1:9\"]\n";

/// A configuration with one site whose keys are `site` and one route
/// (line 5 on) whose keys are `route`.
fn with(site: &str, route: &str) -> Result<Config, ConfigError> {
    Config::from_toml(
        "hoard.toml",
        &format!("{UP}[[site]]\n{site}\n[[site.route]]\n{route}\n"),
    )
}

#[test]
fn max_body_size_route_over_site_over_server() {
    let c = Config::from_toml(
        "hoard.toml",
        &format!(
            "[server]\nmax_body_size = \"10MiB\"\n{UP}[[site]]\nmax_body_size = \"1MiB\"\n\
             [[site.route]]\nprefix = \"/upload/\"\nmax_body_size = \"100MiB\"\n\
             [[site.route]]\nprefix = \"/\"\n[[site]]\nhosts = [\"b\"]\n"
        ),
    )
    .unwrap();
    assert_eq!(c.server.max_body_size, 10 << 20);
    assert_eq!(c.sites[0].routes[0].max_body_size, Some(100 << 20));
    assert_eq!(c.sites[0].routes[1].max_body_size, Some(1 << 20));
    // A site without routes (its catch-all) and a site without the key.
    assert_eq!(c.sites[1].routes[0].max_body_size, None);
    let c = with("max_body_size = \"2KiB\"", "prefix = \"/\"").unwrap();
    assert_eq!(c.sites[0].routes[0].max_body_size, Some(2048));
    let e = with("", "max_body_size = \"lots\"").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (Some(6), "max_body_size"), "{e}");
    assert!(e.message.contains("invalid size"), "{e}");
    let e = with("max_body_size = -1", "").unwrap_err();
    assert_eq!((e.line, e.key.as_str()), (Some(4), "max_body_size"), "{e}");
}

#[test]
fn client_no_cache_values_and_error() {
    let c = with("", "client_no_cache = \"ignore\"").unwrap();
    assert_eq!(
        c.sites[0].routes[0].policy.client_no_cache,
        ClientNoCache::Ignore
    );
    let c = with("", "prefix = \"/\"").unwrap();
    assert_eq!(
        c.sites[0].routes[0].policy.client_no_cache,
        ClientNoCache::Revalidate
    );
    let e = with("", "client_no_cache = \"never\"").unwrap_err();
    assert_eq!(
        (e.line, e.key.as_str()),
        (Some(6), "site[0].route[0].client_no_cache"),
        "{e}"
    );
    assert!(e.message.contains("\"revalidate\" or \"ignore\""), "{e}");
}

#[test]
fn respond_is_built_once_and_needs_no_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("maintenance.html");
    std::fs::write(&page, "<p>back soon</p>").unwrap();
    let text = format!(
        "[[site]]\n[[site.route]]\nprefix = \"/healthz\"\nrespond = {{ status = 200, body = \"ok\" }}\n\
         [[site.route]]\nprefix = \"/\"\nrespond = {{ status = 503, body_file = {:?}, headers = {{ \"Retry-After\" = \"120\" }} }}\n",
        page.display().to_string()
    );
    let c = Config::from_toml("hoard.toml", &text).unwrap();
    assert!(
        c.upstreams.is_empty(),
        "a respond-only site needs no upstream"
    );
    let r = c.sites[0].routes[0].edge.as_ref().unwrap();
    let ok = r.respond.as_ref().unwrap();
    assert_eq!((ok.status.as_u16(), &ok.body[..]), (200, &b"ok"[..]));
    assert_eq!(ok.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(ok.headers["content-length"], "2");
    let m = c.sites[0].routes[1].edge.as_ref().unwrap();
    let m = m.respond.as_ref().unwrap();
    assert_eq!(m.status.as_u16(), 503);
    assert_eq!(m.headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(m.headers["retry-after"], "120");
    // `content_type` overrides the one from the extension.
    let c = with(
        "",
        "respond = { status = 200, body = \"User-agent: *\", content_type = \"text/x-robots\" }",
    )
    .unwrap();
    let r = c.sites[0].routes[0].edge.as_ref().unwrap();
    assert_eq!(
        r.respond.as_ref().unwrap().headers["content-type"],
        "text/x-robots"
    );
    // With several upstreams, a responding route names none.
    let two = format!(
        "{UP}[upstream.b]\nservers = [\"http://127.0.0.1:8\"]\n[[site]]\n[[site.route]]\n\
         respond = {{ status = 204 }}\n"
    );
    let c = Config::from_toml("hoard.toml", &two).unwrap();
    let r = c.sites[0].routes[0].edge.as_ref().unwrap();
    let r = r.respond.as_ref().unwrap();
    assert!(r.body.is_empty() && r.headers.is_empty(), "{:?}", r.headers);
}

#[test]
fn respond_errors_name_key_and_line() {
    let cases = [
        ("respond = { status = 99 }", "respond.status", "200 to 599"),
        ("respond = { status = 600 }", "respond.status", "200 to 599"),
        ("respond = { status = 101 }", "respond.status", "200 to 599"),
        (
            "respond = { status = 200, body = \"a\", body_file = \"a.html\" }",
            "respond.body_file",
            "not both",
        ),
        (
            "respond = { status = 200, body_file = \"/nonexistent/hoard/page.html\" }",
            "respond.body_file",
            "/nonexistent/hoard/page.html",
        ),
        (
            "respond = { status = 204, body = \"x\" }",
            "respond.status",
            "no body",
        ),
        (
            "respond = { status = 200, headers = { \"Content-Length\" = \"5\" } }",
            "respond.headers.Content-Length",
            "framing",
        ),
        (
            "respond = { status = 200, headers = { \"Content-Type\" = \"text/html\" } }",
            "respond.headers.Content-Type",
            "respond.content_type",
        ),
        (
            "respond = { status = 200, headers = { \"Bad Name\" = \"5\" } }",
            "respond.headers.Bad Name",
            "not a header name",
        ),
        (
            "respond = { status = 200, content_type = \"a\\nb\" }",
            "respond.content_type",
            "not a valid field value",
        ),
        (
            "redirect = { to = \"https://a/\" }\nrespond = { status = 200 }",
            "respond",
            "not both",
        ),
    ];
    for (route, key, says) in cases {
        let e = with("", &format!("prefix = \"/\"\n{route}")).unwrap_err();
        // The redirect takes line 7; `respond` is then on line 8.
        let line = if route.starts_with("redirect") { 8 } else { 7 };
        assert_eq!(e.line, Some(line), "{route}: {e}");
        assert_eq!(e.key, format!("site[0].route[0].{key}"), "{route}: {e}");
        assert!(e.to_string().contains(says), "{route}: {e}");
    }
    let e = with("", "respond = { status = 200, body = \"a\", extra = 1 }").unwrap_err();
    assert_eq!(e.line, Some(6), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
}
