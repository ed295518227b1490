//! r05: routes and sites as an nginx operator writes them: the first
//! matching route wins and a route an earlier one covers is refused, a
//! default site answers Hosts no site lists (else the first site), sites
//! and upstreams from included files, sites bound to named listeners.

use hoard_testkit::Test;

/// The origin group every configuration here names (its sites redirect,
/// so the origin is never asked), and a listener a reload keeps.
const UP: &str = "[upstream.app]\nservers = [\"http://{origin}\"]\n";
const LISTEN: &str = "[[listener]]\naddress = \"127.0.0.1:0\"\n";

/// A site whose every request is redirected to `https://NAME/...`: the
/// `Location` says which site answered, and no origin is asked.
fn site(name: &str, extra: &str) -> String {
    format!(
        "[[site]]\n{extra}\n[[site.route]]\nredirect = {{ to = \"https://{name}$request_uri\", status = 302 }}\n"
    )
}

/// Asks `addr` for `/p` with this Host; returns the site that answered.
async fn answered_by(t: &Test, addr: std::net::SocketAddr, host: &str) -> String {
    let r = t.client(addr).get("/p").hdr("Host", host).send().await;
    r.expect_status(302);
    let loc = r.header("location").expect("a Location").to_string();
    loc.trim_start_matches("https://")
        .trim_end_matches("/p")
        .to_string()
}

// r05001: `default = true` answers a Host no site lists; listed Hosts keep
// their sites.
#[tokio::test]
async fn r05001_default_site_answers_unknown_hosts() {
    let t = Test::new("r05001");
    let origin = t.origin().start().await; // any request fails the case
    let cfg = [
        UP.to_string(),
        site("a", "hosts = [\"a.test\"]"),
        site("b", "hosts = [\"b.test\"]\ndefault = true"),
        site("c", "hosts = [\"*.c.test\"]"),
    ]
    .concat();
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addr = proxy.proxy().addr();
    for (host, want) in [
        ("a.test", "a"),
        ("b.test", "b"),
        ("x.c.test", "c"),
        ("unknown.test", "b"),
        ("127.0.0.1", "b"),
        ("A.TEST:80", "a"),
    ] {
        assert_eq!(answered_by(&t, addr, host).await, want, "Host {host}");
    }
    proxy.expect_counter("edge_redirects", 6);
    origin.finish().await;
}

// r05002: with no default site and none without hosts, an unknown Host
// goes to the first site (as nginx's first server block) instead of 404;
// a site without hosts still takes precedence over the first.
#[tokio::test]
async fn r05002_unknown_host_goes_to_the_first_site() {
    let t = Test::new("r05002");
    let origin = t.origin().start().await;
    let cfg = [
        LISTEN.to_string(),
        UP.to_string(),
        site("a", "hosts = [\"a.test\"]"),
        site("b", "hosts = [\"b.test\"]"),
    ]
    .concat();
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addr = proxy.proxy().addr();
    assert_eq!(answered_by(&t, addr, "b.test").await, "b");
    assert_eq!(answered_by(&t, addr, "probe.by.ip").await, "a");
    // A site without hosts is the catch-all, wherever it is listed.
    let cfg = [cfg, site("any", "")].concat();
    proxy.reload_toml(&origin, &cfg).unwrap();
    assert_eq!(answered_by(&t, addr, "probe.by.ip").await, "any");
    assert_eq!(answered_by(&t, addr, "a.test").await, "a");
    origin.finish().await;
}

// r05003: `include` brings a site and its upstream from another file; a
// reload reads the included files again.
#[tokio::test]
async fn r05003_include_adds_a_site_from_another_file() {
    let t = Test::new("r05003");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for body in ["shop one", "shop two"] {
                s.rxreq()
                    .await
                    .expect_url("/p")
                    .expect_header("host", "shop.test");
                s.txresp_no_store(body).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("sites");
    std::fs::create_dir_all(&dir).unwrap();
    let shop = |tag: &str| {
        format!(
            "[upstream.shop]\nservers = [\"http://{}\"]\n[[site]]\nhosts = [\"shop.test\"]\n\
             [[site.route]]\nupstream = \"shop\"\nresponse_headers = {{ set = {{ \"x-site\" = \"{tag}\" }} }}\n",
            origin.addr()
        )
    };
    std::fs::write(dir.join("shop.toml"), shop("shop")).unwrap();
    std::fs::write(dir.join("README"), "not a site").unwrap();
    let cfg = format!(
        "include = [{:?}]\n{LISTEN}{}",
        dir.join("*.toml").display().to_string(),
        site("main", "hosts = [\"main.test\"]")
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addr = proxy.proxy().addr();
    assert_eq!(answered_by(&t, addr, "main.test").await, "main");
    t.client(addr)
        .get("/p")
        .hdr("Host", "shop.test")
        .send()
        .await
        .expect_status(200)
        .expect_header("x-site", "shop")
        .expect_body("shop one");
    // The included file changes; a reload picks it up.
    std::fs::write(dir.join("shop.toml"), shop("shop, reloaded")).unwrap();
    proxy.reload_toml(&origin, &cfg).unwrap();
    t.client(addr)
        .get("/p")
        .hdr("Host", "shop.test")
        .send()
        .await
        .expect_header("x-site", "shop, reloaded")
        .expect_body("shop two");
    // An included file with an error: the reload is refused naming that
    // file and line, and the running configuration stays.
    let broken = dir.join("zz-broken.toml");
    std::fs::write(&broken, "[[site]]\nhosts = [\"x.test\"]\nhots = 1\n").unwrap();
    let e = proxy.reload_toml(&origin, &cfg).unwrap_err();
    assert!(
        e.contains(&format!("{}:3", broken.display())) && e.contains("hots"),
        "{e}"
    );
    assert_eq!(answered_by(&t, addr, "main.test").await, "main");
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

// r05004: a site bound to a named listener answers there and not on the
// other listener, where the other site (the first there) answers every Host.
#[tokio::test]
async fn r05004_a_site_answers_only_on_its_listeners() {
    let t = Test::new("r05004");
    let origin = t.origin().start().await;
    let cfg = format!(
        "[[listener]]\nname = \"public\"\naddress = \"127.0.0.1:0\"\n\
         [[listener]]\nname = \"internal\"\naddress = \"127.0.0.1:0\"\n{UP}{}{}",
        site(
            "admin",
            "hosts = [\"admin.test\"]\nlisteners = [\"internal\"]"
        ),
        site("www", "hosts = [\"www.test\"]\nlisteners = [\"public\"]"),
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addrs = proxy.proxy().addrs();
    let (public, internal) = (addrs[0], addrs[1]);
    assert_eq!(answered_by(&t, internal, "admin.test").await, "admin");
    assert_eq!(answered_by(&t, public, "www.test").await, "www");
    // The admin Host on the public listener: not the admin site.
    assert_eq!(answered_by(&t, public, "admin.test").await, "www");
    assert_eq!(answered_by(&t, internal, "www.test").await, "admin");
    // A listener no site is bound to: nothing answers there.
    let cfg = format!(
        "[[listener]]\nname = \"public\"\naddress = \"127.0.0.1:0\"\n\
         [[listener]]\nname = \"internal\"\naddress = \"127.0.0.1:0\"\n{UP}{}",
        site(
            "admin",
            "hosts = [\"admin.test\"]\nlisteners = [\"internal\"]"
        ),
    );
    let only = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let addrs = only.proxy().addrs();
    t.client(addrs[0])
        .get("/p")
        .hdr("Host", "admin.test")
        .send()
        .await
        .expect_status(404);
    assert_eq!(answered_by(&t, addrs[1], "admin.test").await, "admin");
    origin.finish().await;
}

// r05005: a catch-all route listed before an `/admin/` route with an allow
// list: a reload is refused naming both routes and lines, and the running
// configuration (the allow list in force) stays.
#[tokio::test]
async fn r05005_a_route_never_reached_is_refused() {
    let t = Test::new("r05005");
    let origin = t.origin().start().await;
    let up = "[upstream.app]\nservers = [\"http://{origin}\"]\n[[site]]\n";
    let admin =
        "[[site.route]]\nprefix = \"/admin/\"\nallow = [\"10.9.9.9\"]\nupstream = \"app\"\n";
    let rest =
        "[[site.route]]\nprefix = \"/\"\nredirect = { to = \"https://www/\", status = 302 }\n";
    let good = format!("{up}{admin}{rest}");
    let proxy = t.proxy().origin(&origin).toml(&origin, &good).start().await;
    let c = t.client(&proxy);
    c.get("/admin/x").send().await.expect_status(403);
    c.get("/x").send().await.expect_status(302);
    // The same routes the other way round: `/admin/` is never reached.
    let bad = format!("{up}{rest}{admin}");
    let e = proxy.reload_toml(&origin, &bad).unwrap_err();
    assert!(
        e.contains(
            "test.toml:8: `site[0].route[1]`: prefix \"/admin/\" (line 8) is never reached: \
             `site[0].route[0]` (prefix \"/\", line 5)"
        ),
        "{e}"
    );
    c.get("/admin/x").send().await.expect_status(403);
    origin.finish().await;
}

// r05006: the old answer for unknown Hosts, kept by choice: a default site
// that refuses every request (403) while listed Hosts are served; the
// origin sees only the listed Host's request.
#[tokio::test]
async fn r05006_a_default_site_can_refuse_unknown_hosts() {
    let t = Test::new("r05006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_header("host", "www.test");
            s.txresp_no_store("www").await;
        })
        .start()
        .await;
    let cfg = format!(
        "{UP}[[site]]\nhosts = [\"www.test\"]\n[[site.route]]\nupstream = \"app\"\n\
         [[site]]\ndefault = true\n[[site.route]]\ndeny = [\"0.0.0.0/0\", \"::/0\"]\n"
    );
    let proxy = t.proxy().origin(&origin).toml(&origin, &cfg).start().await;
    let c = t.client(&proxy);
    c.get("/")
        .hdr("Host", "www.test")
        .send()
        .await
        .expect_body("www");
    for host in ["unknown.test", "127.0.0.1"] {
        c.get("/").hdr("Host", host).send().await.expect_status(403);
    }
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}
