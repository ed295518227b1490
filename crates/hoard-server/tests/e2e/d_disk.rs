//! d: disk zones with real directories: restarts, damaged files, hard
//! limits, placement, lifetimes (304s, `inactive`, invalidation) and Vary
//! variants on disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hoard_testkit::Test;

use crate::disk::{body, disk_proxy, files, objects};
use crate::secs;

// d00001: with the memory tier off every hit is read from disk, small and
// multi-block bodies alike; after a restart every object is still a hit.
#[tokio::test]
async fn d00001_restart_keeps_hits() {
    let t = Test::new("d00001");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, len) in [("/small", 1000), ("/large", 300_000)] {
                s.rxreq().await.expect_url(path);
                s.txresp_fresh_etag(600, "\"v1\"", body(len, 7)).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    for path in ["/small", "/large"] {
        t.client(&proxy).get(path).send().await.expect_status(200);
    }
    proxy.wait_counter("disk_stored", 2).await;
    t.client(&proxy)
        .get("/large")
        .send()
        .await
        .expect_body(body(300_000, 7))
        .expect_cache_status("hit");
    proxy.expect_counter("disk_hits", 1);
    proxy.stop().await;
    assert_eq!(objects(&dir).len(), 2);

    let proxy = disk_proxy(&t, &origin, &dir).await;
    proxy
        .expect_counter("disk_loaded", 2)
        .expect_counter("disk_load_scanned", 2);
    for (path, len) in [("/small", 1000), ("/large", 300_000)] {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_status(200)
            .expect_header("etag", "\"v1\"")
            .expect_header("content-length", &len.to_string())
            .expect_cache_status("hit")
            .expect_body(body(len, 7));
    }
    proxy.expect_counter("disk_hits", 2);
    assert_eq!(origin.requests(), 2);
    origin.finish().await;
}

/// Overwrites bytes of a file at `at`.
fn poke(path: &Path, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(bytes, at).unwrap();
}

// d00002: files that fail their checks are never served: the loader removes
// and counts a wrong version, a torn head, a truncated file and a temporary
// file; a body block that fails its checksum is found on read. Each is a
// miss that goes to the origin.
#[tokio::test]
async fn d00002_damaged_files_are_rejected_and_counted() {
    let t = Test::new("d00002");
    let names = ["/version", "/head", "/truncated", "/body", "/good"];
    let origin = t
        .origin()
        .script(move |mut s| async move {
            for round in 0..2 {
                for name in names {
                    if round == 1 && name == "/good" {
                        continue;
                    }
                    s.serve_fresh(name, 600, format!("{name} {round}")).await;
                }
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let mut paths = Vec::new();
    for (i, name) in names.iter().enumerate() {
        t.client(&proxy).get(name).send().await.expect_status(200);
        // A client has the whole body a moment before the fill publishes it.
        proxy.wait_counter("disk_stored", i as u64 + 1).await;
        let before: Vec<PathBuf> = paths.clone();
        let now = objects(&dir);
        let new: Vec<PathBuf> = now.into_iter().filter(|p| !before.contains(p)).collect();
        assert_eq!(new.len(), 1, "one new file for {name}");
        paths.push(new[0].clone());
    }
    proxy.stop().await;
    poke(&paths[0], 8, &[9, 0]); // format version 9
    poke(&paths[1], 96 + 30, b"\xff\xff\xff\xff"); // inside head slot A
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&paths[2])
        .unwrap();
    f.set_len(5000).unwrap(); // truncated
    poke(&paths[3], 4096, b"X"); // first body byte
    let tmp = paths[4].with_extension("tmp");
    std::fs::write(&tmp, b"half a write").unwrap();

    let proxy = disk_proxy(&t, &origin, &dir).await;
    proxy
        .expect_counter("disk_rejected_version", 1)
        .expect_counter("disk_rejected_bad_head", 1)
        .expect_counter("disk_rejected_truncated", 1)
        .expect_counter("disk_rejected_temporary", 1)
        .expect_counter("disk_loaded", 2);
    assert!(!tmp.exists() && !paths[0].exists() && !paths[2].exists());
    for name in ["/version", "/head", "/truncated", "/body"] {
        t.client(&proxy)
            .get(name)
            .send()
            .await
            .expect_body(format!("{name} 1"));
    }
    proxy.expect_counter("disk_rejected_checksum", 1);
    t.client(&proxy)
        .get("/good")
        .send()
        .await
        .expect_body("/good 0")
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00003: a flood of unique large misses never takes the zone past its
// max_size: after every fill the files on disk add up to at most the limit,
// and the oldest objects are evicted to make room.
#[tokio::test]
async fn d00003_flood_stays_under_max_size() {
    let t = Test::new("d00003");
    const N: usize = 30;
    let origin = t
        .origin()
        .script(|mut s| async move {
            for i in 0..N {
                s.rxreq().await;
                // Half with a declared length, half chunked.
                if i % 2 == 0 {
                    s.txresp_fresh(600, body(150_000, i as u8)).await;
                } else {
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .chunked()
                        .send_head()
                        .await;
                    s.chunk(body(150_000, i as u8)).await;
                    s.end().await;
                }
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let limit: u64 = 1 << 20;
    let proxy = t.proxy().origin(&origin).disk(&dir, limit, 0).start().await;
    proxy.wait_counter("disk_load_done", 1).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    for i in 0..N {
        t.client(&proxy)
            .get(&format!("/flood/{i}"))
            .send()
            .await
            .expect_body(body(150_000, i as u8));
        proxy.wait_counter("fills_completed", i as u64 + 1).await;
        let on_disk: u64 = files(&dir).iter().map(|(_, l)| l).sum();
        assert!(on_disk <= limit, "after fill {i}: {on_disk} bytes on disk");
        assert!(
            zone.used() <= limit,
            "after fill {i}: {} accounted",
            zone.used()
        );
    }
    proxy.expect_counter("disk_stored", N as u64);
    assert!(proxy.counter("disk_evicted_size") >= (N - 7) as u64);
    assert!(zone.objects() >= 5, "the zone is used: {}", zone.objects());
    // Evicted files were taken over by later objects (overwritten in
    // place), and what is left serves the right bytes from disk.
    assert!(
        proxy.counter("disk_files_recycled") >= 1,
        "no evicted file was reused"
    );
    let kept = objects(&dir).len();
    assert_eq!(kept as u64, zone.objects(), "no stray files");
    for i in N - 3..N {
        t.client(&proxy)
            .get(&format!("/flood/{i}"))
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(150_000, i as u8));
    }
    origin.finish().await;
}

// d00004: placement rules send objects to the right zone: by path regex, by
// declared size, by Content-Type, by the route's zone, else the first zone.
#[tokio::test]
async fn d00004_placement_rules() {
    let t = Test::new("d00004");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, ctype, len) in [
                ("/v/clip.mp4", "video/mp4", 100),
                ("/big", "application/octet-stream", 300_000),
                ("/pic", "image/png", 100),
                ("/page", "text/html", 100),
                ("/archive/x", "text/html", 100),
            ] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Content-Type", ctype)
                    .body(vec![b'p'; len])
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let ssd = t.dir().join("ssd");
    let hdd = t.dir().join("hdd");
    let img = t.dir().join("img");
    let toml = format!(
        r#"
[cache]
memory_size = 0
[[cache.zone]]
name = "ssd"
dirs = ["{ssd}"]
max_size = "16MiB"
[[cache.zone]]
name = "hdd"
dirs = [{{ path = "{hdd}", weight = 1 }}]
max_size = "64MiB"
[[cache.zone]]
name = "img"
dirs = ["{img}"]
max_size = "16MiB"
[[cache.placement]]
zone = "hdd"
path = "\\.(mp4|avi)$"
[[cache.placement]]
zone = "hdd"
min_size = "256KiB"
[[cache.placement]]
zone = "img"
content_type = "^image/"
[upstream.o]
servers = ["http://{{origin}}"]
[[site]]
[[site.route]]
prefix = "/archive/"
zone = "hdd"
[[site.route]]
prefix = "/"
"#,
        ssd = ssd.display(),
        hdd = hdd.display(),
        img = img.display()
    );
    let proxy = t.proxy().toml(&origin, &toml).start().await;
    proxy.wait_counter("disk_load_done", 3).await;
    for path in ["/v/clip.mp4", "/big", "/pic", "/page", "/archive/x"] {
        t.client(&proxy).get(path).send().await.expect_status(200);
    }
    proxy.wait_counter("disk_stored", 5).await;
    let count = |z: &str| proxy.store().zone(z).unwrap().objects();
    assert_eq!((count("ssd"), count("hdd"), count("img")), (1, 3, 1));
    assert_eq!(
        (
            objects(&ssd).len(),
            objects(&hdd).len(),
            objects(&img).len()
        ),
        (1, 3, 1)
    );
    origin.finish().await;
}

// d00005: one zone over two directories with weights 1 and 3: objects are
// spread by key hash in proportion.
#[tokio::test]
async fn d00005_hash_split_by_weight() {
    let t = Test::new("d00005");
    const N: usize = 120;
    let origin = t
        .origin()
        .script(|mut s| async move {
            for _ in 0..N {
                s.rxreq().await;
                s.txresp_fresh(600, "x").await;
            }
        })
        .start()
        .await;
    let (a, b) = (t.dir().join("a"), t.dir().join("b"));
    let toml = format!(
        r#"
[cache]
memory_size = 0
[[cache.zone]]
name = "split"
dirs = [{{ path = "{a}", weight = 1 }}, {{ path = "{b}", weight = 3 }}]
max_size = "64MiB"
[upstream.o]
servers = ["http://{{origin}}"]
"#,
        a = a.display(),
        b = b.display()
    );
    let proxy = t.proxy().toml(&origin, &toml).start().await;
    proxy.wait_counter("disk_load_done", 1).await;
    for i in 0..N {
        t.client(&proxy)
            .get(&format!("/obj/{i}"))
            .send()
            .await
            .expect_status(200);
    }
    proxy.wait_counter("disk_stored", N as u64).await;
    let (na, nb) = (objects(&a).len(), objects(&b).len());
    assert_eq!(na + nb, N);
    let share = nb as f64 / N as f64;
    assert!(
        (0.62..=0.88).contains(&share),
        "weight-3 share {share} ({na}/{nb})"
    );
    let zone = proxy.store().zone("split").unwrap();
    assert_eq!(zone.dirs()[0].objects() as usize, na);
    assert_eq!(zone.dirs()[1].objects() as usize, nb);
    origin.finish().await;
}

// d00010: a 304 refreshes the head on disk without rewriting the body; the
// refreshed lifetime survives a restart.
#[tokio::test]
async fn d00010_304_updates_the_head_on_disk() {
    let t = Test::new("d00010");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp_fresh_etag(1, "\"e1\"", body(200_000, 5)).await;
            s.rxreq().await.expect_header("if-none-match", "\"e1\"");
            s.txresp(304)
                .hdr("Cache-Control", "max-age=600")
                .hdr("ETag", "\"e1\"")
                .no_body()
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    t.client(&proxy).get("/r").send().await.expect_status(200);
    proxy.wait_counter("disk_stored", 1).await;
    let path = objects(&dir).pop().unwrap();
    let body_before = std::fs::read(&path).unwrap()[4096..4096 + 200_000].to_vec();
    t.clock.advance(secs(5));
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body(body(200_000, 5))
        .expect_header("cache-control", "max-age=600");
    proxy.expect_counter("cache_revalidated_304", 1);
    proxy.stop().await;
    assert_eq!(objects(&dir), vec![path.clone()], "same file");
    assert_eq!(
        std::fs::read(&path).unwrap()[4096..4096 + 200_000],
        body_before[..]
    );
    let proxy = disk_proxy(&t, &origin, &dir).await;
    t.clock.advance(secs(60));
    t.client(&proxy)
        .get("/r")
        .send()
        .await
        .expect_body(body(200_000, 5))
        .expect_header("cache-control", "max-age=600")
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00011: objects not requested for `inactive` are removed; an unsafe
// request invalidates the disk copy too.
#[tokio::test]
async fn d00011_inactive_and_invalidation() {
    let t = Test::new("d00011");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (m, path) in [
                ("GET", "/old"),
                ("GET", "/old"),
                ("GET", "/p"),
                ("POST", "/p"),
                ("GET", "/p"),
            ] {
                s.rxreq().await.expect_method(m).expect_url(path);
                s.txresp_fresh(6000, format!("{m} {path}")).await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.cache.zones[0].inactive = Some(Duration::from_secs(60)))
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy).get("/old").send().await;
    proxy.wait_counter("disk_stored", 1).await;
    t.clock.advance(secs(61));
    t.client(&proxy)
        .get("/old")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    proxy.expect_counter("disk_evicted_inactive", 1);
    t.client(&proxy).get("/p").send().await;
    proxy.wait_counter("disk_stored", 3).await;
    t.client(&proxy).post("/p").body("x").send().await;
    t.client(&proxy)
        .get("/p")
        .send()
        .await
        .expect_body("GET /p");
    proxy.expect_counter("invalidations", 1);
    origin.finish().await;
}

// d00012: Vary variants live side by side on disk and survive a restart.
#[tokio::test]
async fn d00012_variants_on_disk() {
    let t = Test::new("d00012");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for lang in ["en", "fr"] {
                s.rxreq().await.expect_header("accept-language", lang);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("Vary", "Accept-Language")
                    .body(lang)
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    for lang in ["en", "fr"] {
        t.client(&proxy)
            .get("/v")
            .hdr("Accept-Language", lang)
            .send()
            .await
            .expect_body(lang);
    }
    proxy.wait_counter("disk_stored", 2).await;
    proxy.stop().await;
    let proxy = disk_proxy(&t, &origin, &dir).await;
    for lang in ["fr", "en"] {
        t.client(&proxy)
            .get("/v")
            .hdr("Accept-Language", lang)
            .send()
            .await
            .expect_body(lang)
            .expect_cache_status("hit");
    }
    origin.finish().await;
}

// d00018: an object that can never fit its zone (declared larger than the
// zone's max_size, placed there while a larger zone exists) is not stored
// and evicts nothing: the zone keeps what it has.
#[tokio::test]
async fn d00018_an_object_larger_than_its_zone_evicts_nothing() {
    let t = Test::new("d00018");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, len) in [("/a", 100_000), ("/b", 100_000), ("/huge", 1_500_000)] {
                s.serve_fresh(path, 600, body(len, 3)).await;
            }
        })
        .start()
        .await;
    let (small, big) = (t.dir().join("small"), t.dir().join("big"));
    let toml = format!(
        r#"
[cache]
memory_size = 0
[[cache.zone]]
name = "small"
dirs = ["{small}"]
max_size = "1MiB"
[[cache.zone]]
name = "big"
dirs = ["{big}"]
max_size = "64MiB"
[upstream.o]
servers = ["http://{{origin}}"]
"#,
        small = small.display(),
        big = big.display()
    );
    let proxy = t.proxy().toml(&origin, &toml).start().await;
    for path in ["/a", "/b"] {
        t.client(&proxy).get(path).send().await;
    }
    proxy.wait_counter("disk_stored", 2).await;
    t.client(&proxy)
        .get("/huge")
        .send()
        .await
        .expect_body(body(1_500_000, 3));
    proxy.wait_counter("fills_completed", 3).await;
    proxy
        .expect_counter("disk_stored", 2)
        .expect_counter("disk_evicted_size", 0);
    assert_eq!(proxy.store().zone("small").unwrap().objects(), 2);
    for path in ["/a", "/b"] {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_cache_status("hit");
    }
    origin.finish().await;
}
