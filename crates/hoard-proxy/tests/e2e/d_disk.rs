//! d: disk zones with real directories: restarts, damaged files, hard
//! limits, placement, directory faults, non-blocking reads, fills written
//! through to disk.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hoard_testkit::{ClientError, Origin, Test, TestProxy};

use super::secs;

/// Every file under a zone directory (two levels), with its length.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for sub in rd.flatten() {
        if sub.path().is_dir() {
            for f in std::fs::read_dir(sub.path()).unwrap().flatten() {
                out.push((f.path(), f.metadata().unwrap().len()));
            }
        }
    }
    out
}

/// Published objects (not temporary files).
pub(crate) fn objects(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.extension().is_none())
        .collect()
}

/// A proxy with a 64 MiB disk zone in `dir` and no memory tier (every hit
/// read from disk), its loader done.
pub(crate) async fn disk_proxy(t: &Test, origin: &Origin, dir: &Path) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ seed).collect()
}

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
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .hdr("ETag", "\"v1\"")
                    .body(body(len, 7))
                    .send()
                    .await;
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
                    s.rxreq().await.expect_url(name);
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .body(format!("{name} {round}"))
                        .send()
                        .await;
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
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .body(body(150_000, i as u8))
                        .send()
                        .await;
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
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body("x")
                    .send()
                    .await;
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

// d00006: a directory that goes away is taken out of service (logged,
// counted); fills go on uncached; after the retry interval a healthy
// directory comes back and stores again.
#[tokio::test]
async fn d00006_directory_offline_and_back() {
    let t = Test::new("d00006");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, n) in [("/x", 2), ("/y", 1)] {
                for _ in 0..n {
                    s.rxreq().await.expect_url(path);
                    s.txresp(200)
                        .hdr("Cache-Control", "max-age=600")
                        .body(path)
                        .send()
                        .await;
                }
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    std::fs::remove_dir_all(&dir).unwrap();
    t.client(&proxy).get("/x").send().await.expect_body("/x");
    proxy.wait_counter("fills_completed", 1).await;
    proxy
        .expect_counter("disk_dirs_offline", 1)
        .expect_counter("disk_stored", 0);
    assert!(proxy.counter("disk_errors") >= 1);
    // Still offline: a miss again, no new error.
    t.client(&proxy).get("/x").send().await.expect_body("/x");
    proxy.expect_counter("disk_dirs_offline", 1);
    std::fs::create_dir(&dir).unwrap();
    t.clock.advance(secs(11));
    t.client(&proxy).get("/y").send().await.expect_body("/y");
    proxy.wait_counter("disk_stored", 1).await;
    proxy.expect_counter("disk_dirs_online", 1);
    t.client(&proxy)
        .get("/y")
        .send()
        .await
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00007: a disk read that never completes (held in the I/O layer) delays
// only the request that needs it: memory hits go on; released, it completes.
#[tokio::test]
async fn d00007_held_disk_read_does_not_stop_memory_hits() {
    let t = Test::new("d00007");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/hot", "/cold"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(format!("{path} body"))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 1 << 20)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/hot")
        .send()
        .await
        .expect_body("/hot body");
    proxy.wait_counter("disk_stored", 1).await;
    for _ in 0..2 {
        t.client(&proxy)
            .get("/hot")
            .send()
            .await
            .expect_body("/hot body");
    }
    // Stored on disk, a first disk hit, then admitted to memory.
    proxy.expect_counter("memory_promotions", 1);
    t.client(&proxy)
        .get("/cold")
        .send()
        .await
        .expect_body("/cold body");
    proxy.wait_counter("disk_stored", 2).await;
    let gate = proxy.store().zone("disk").unwrap().io().gate();
    gate.close();
    let cold = t.client(&proxy).get("/cold").spawn();
    gate.wait_held(1).await;
    for _ in 0..5 {
        t.client(&proxy)
            .get("/hot")
            .send()
            .await
            .expect_body("/hot body")
            .expect_cache_status("hit");
    }
    assert!(!cold.is_finished(), "the held read cannot have completed");
    gate.open();
    cold.await
        .unwrap()
        .expect_body("/cold body")
        .expect_cache_status("hit");
    origin.finish().await;
}

// d00008: read-while-write from a disk fill: two clients stream the body
// while it is written to disk, from byte 0; it is then a disk hit.
#[tokio::test]
async fn d00008_read_while_write_to_disk() {
    let t = Test::new("d00008");
    let joined = t.barrier(2);
    let j = joined.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(body(400_000, 1)).await;
            j.sync().await;
            s.chunk(body(400_000, 2)).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let a = t.client(&proxy).get("/v").spawn();
    proxy.wait_counter("fills_started", 1).await;
    let b = t.client(&proxy).get("/v").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    joined.sync().await;
    let mut want = body(400_000, 1);
    want.extend(body(400_000, 2));
    for r in [a.await.unwrap(), b.await.unwrap()] {
        r.expect_status(200).expect_body(&want);
    }
    proxy.wait_counter("disk_stored", 1).await;
    t.client(&proxy)
        .get("/v")
        .send()
        .await
        .expect_body(&want)
        .expect_cache_status("hit");
    proxy.expect_counter("disk_hits", 1);
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00009: a fill that dies mid-body leaves no servable object: the disk copy
// is abandoned, and a restart serves nothing of it.
#[tokio::test]
async fn d00009_fill_dying_mid_write_leaves_nothing() {
    let t = Test::new("d00009");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(body(600_000, 3)).await;
            s.close().await;
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("whole")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    match t.client(&proxy).get("/f").try_send().await {
        Err(ClientError::IncompleteBody { .. }) => {}
        other => panic!("expected an incomplete body, got {other:?}"),
    }
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    assert!(objects(&dir).is_empty(), "no published file");
    proxy.stop().await;
    let proxy = disk_proxy(&t, &origin, &dir).await;
    proxy.expect_counter("disk_loaded", 0);
    t.client(&proxy).get("/f").send().await.expect_body("whole");
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
            s.txresp(200)
                .hdr("Cache-Control", "max-age=1")
                .hdr("ETag", "\"e1\"")
                .body(body(200_000, 5))
                .send()
                .await;
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
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=6000")
                    .body(format!("{m} {path}"))
                    .send()
                    .await;
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

// d00013: a large disk-backed fill keeps only a tail in memory: a client
// joining after megabytes were written (and left memory) still gets the
// body from byte 0, read back from the file being written; one origin fetch.
#[tokio::test]
async fn d00013_late_reader_of_a_spilled_fill_starts_at_byte_0() {
    let t = Test::new("d00013");
    let mut first = body(4_600_000, 9);
    first.extend_from_slice(b"MARK-AFTER-FIRST-PART");
    let mut second = body(1_400_000, 4);
    second.extend_from_slice(b"END-OF-BODY");
    let mut want = first.clone();
    want.extend_from_slice(&second);
    let joined = t.barrier(2);
    let j = joined.clone();
    let (f, s2) = (first.clone(), second.clone());
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .chunked()
                .send_head()
                .await;
            s.chunk(f).await;
            j.sync().await;
            s.chunk(s2).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let mut leader = t.client(&proxy).connect().await;
    leader.get("/big").tx().await;
    // The leader has 4.6 MB: the fill has written (and spilled) megabytes.
    leader.read_until("MARK-AFTER-FIRST-PART").await;
    let late = t.client(&proxy).get("/big").spawn();
    proxy.wait_counter("fill_waiters_total", 1).await;
    joined.sync().await;
    leader.read_until("END-OF-BODY").await;
    late.await
        .unwrap()
        .expect_status(200)
        .expect_body(&want)
        .expect_cache_status("collapsed");
    proxy.wait_counter("disk_stored", 1).await;
    t.client(&proxy)
        .get("/big")
        .send()
        .await
        .expect_body(&want)
        .expect_cache_status("hit");
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00014: a write that fails (ENOSPC injected in the I/O layer) does not
// stop the fill: the client gets the whole body, nothing is published, the
// error is counted and the directory rests; then it stores again.
#[tokio::test]
async fn d00014_write_error_serves_the_client_uncached() {
    let t = Test::new("d00014");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/a", "/a", "/b"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body(700_000, 2))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().fail_writes(true);
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body(body(700_000, 2));
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    proxy.wait_counter("fills_completed", 1).await;
    proxy
        .expect_counter("disk_stored", 0)
        .expect_counter("disk_dirs_offline", 1);
    assert!(proxy.counter("disk_errors") >= 1);
    assert!(objects(&dir).is_empty());
    // Uncached: the next request goes to the origin again.
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_cache_status("fwd=uri-miss");
    zone.io().gate().fail_writes(false);
    t.clock.advance(secs(11));
    t.client(&proxy).get("/b").send().await;
    proxy.wait_counter("disk_stored", 1).await;
    assert_eq!(objects(&dir).len(), 1);
    assert!(zone.used() <= 64 << 20);
    origin.finish().await;
}

// d00015: min_free larger than the file system's free space: the zone
// never writes (it would rather evict everything), the client is served.
#[tokio::test]
async fn d00015_min_free_is_never_crossed() {
    let t = Test::new("d00015");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await;
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body("x")
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.cache.zones[0].min_free = u64::MAX / 4)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy).get("/x").send().await.expect_body("x");
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    proxy.wait_counter("fills_completed", 1).await;
    proxy.expect_counter("disk_stored", 0);
    assert!(files(&dir).is_empty());
    origin.finish().await;
}

// d00016: a directory whose reads fail (EIO injected) is taken out of
// service: its objects are misses served by the origin, nothing hangs; after
// the retry interval a read probes it and it serves hits again.
#[tokio::test]
async fn d00016_read_errors_take_a_directory_out_and_back() {
    let t = Test::new("d00016");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for n in 0..2 {
                s.rxreq().await.expect_url("/o");
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=6000")
                    .body(format!("o{n}"))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    t.client(&proxy).get("/o").send().await.expect_body("o0");
    proxy.wait_counter("disk_stored", 1).await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().fail_reads(true);
    t.client(&proxy)
        .get("/o")
        .send()
        .await
        .expect_body("o1")
        .expect_cache_status("fwd=uri-miss");
    proxy.wait_counter("fills_completed", 2).await;
    proxy.expect_counter("disk_dirs_offline", 1);
    assert!(!zone.dirs()[0].online());
    zone.io().gate().fail_reads(false);
    t.clock.advance(secs(11));
    t.client(&proxy)
        .get("/o")
        .send()
        .await
        .expect_cache_status("hit");
    proxy.expect_counter("disk_dirs_online", 1);
    origin.finish().await;
}

// d00017: a disk whose writes stall (held in the I/O layer) costs the disk
// copy, never the client: the miss is answered within the origin's read
// timeout, nothing is published, and the zone stores again afterwards.
#[tokio::test]
async fn d00017_stalled_disk_writes_do_not_hold_a_fill() {
    let t = Test::new("d00017");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for path in ["/s", "/t"] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body(300_000, 1))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .upstream(|u| u.read_timeout = Duration::from_millis(300))
        .start()
        .await;
    let zone = proxy.store().zone("disk").unwrap().clone();
    zone.io().gate().hold_writes(true);
    t.client(&proxy)
        .get("/s")
        .send()
        .await
        .expect_body(body(300_000, 1));
    proxy.wait_counter("fills_completed", 1).await;
    proxy.expect_counter("disk_stored", 0);
    zone.io().gate().hold_writes(false);
    proxy.wait_counter("disk_writes_abandoned", 1).await;
    t.client(&proxy).get("/t").send().await;
    proxy.wait_counter("disk_stored", 1).await;
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
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body(len, 3))
                    .send()
                    .await;
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

/// Disk objects `(path, len)` (bodies [`body`]`(len, seed)`) stored through a
/// disk-only proxy, then each read once on a keep-alive connection (which
/// verifies its open file); that connection is returned for more hits.
async fn stored_and_verified(
    t: &Test,
    objects: &[(&'static str, usize)],
    seed: u8,
) -> (Origin, TestProxy, hoard_testkit::Conn) {
    let list = objects.to_vec();
    let origin = t
        .origin()
        .script(move |mut s| async move {
            for (path, len) in list {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body(len, seed))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let proxy = disk_proxy(t, &origin, &t.dir().join("zone")).await;
    for &(path, len) in objects {
        t.client(&proxy)
            .get(path)
            .send()
            .await
            .expect_body(body(len, seed));
    }
    proxy
        .wait_counter("disk_stored", objects.len() as u64)
        .await;
    let mut c = t.client(&proxy).connect().await;
    for &(path, len) in objects {
        c.get(path)
            .send()
            .await
            .expect_status(200)
            .expect_body(body(len, seed));
    }
    (origin, proxy, c)
}

/// An HTTP/2 prior-knowledge connection to a proxy.
struct H2c(hyper::client::conn::http2::SendRequest<http_body_util::Empty<bytes::Bytes>>);

impl H2c {
    async fn connect(proxy: &TestProxy) -> H2c {
        let stream = tokio::net::TcpStream::connect(hoard_testkit::Endpoint::endpoint(proxy))
            .await
            .unwrap();
        let (send, conn) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(conn);
        H2c(send)
    }

    /// GETs `path`: 200 expected; the body.
    async fn get(&mut self, path: &str) -> bytes::Bytes {
        let req = http::Request::get(format!("http://localhost{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let resp = self.0.send_request(req).await.unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        http_body_util::BodyExt::collect(resp.into_body())
            .await
            .unwrap()
            .to_bytes()
    }
}

// d00019: disk hits on plain HTTP/1.1 go out with sendfile once their file
// handle has been read whole and checked: the bytes are the same, on one
// keep-alive connection and pipelined, and HTTP/2 is never sent that way.
#[tokio::test]
async fn d00019_disk_hits_are_sent_with_sendfile_once_verified() {
    const BIG: usize = 3 * 1024 * 1024 + 123;
    const SMALL: usize = 40_000;
    let t = Test::new("d00019");
    // The first hits read and check every block (verifying the open file);
    // the next ones are sent from the page cache without a copy.
    let (origin, proxy, mut c) =
        stored_and_verified(&t, &[("/big", BIG), ("/small", SMALL)], 9).await;
    let before = proxy.counter("disk_sendfile_bytes");
    for (path, len) in [("/big", BIG), ("/small", SMALL), ("/big", BIG)] {
        c.get(path)
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(len, 9));
    }
    assert_eq!(
        proxy.counter("disk_sendfile_bytes") - before,
        (2 * BIG + SMALL) as u64
    );
    // HEAD: no body, nothing sent.
    let sent = proxy.counter("disk_sendfile_bytes");
    c.head("/big")
        .send()
        .await
        .expect_status(200)
        .expect_header("content-length", &BIG.to_string());
    proxy.expect_counter("disk_sendfile_bytes", sent);

    // Pipelined: two requests in one write, answered in order.
    c.send_raw("GET /small HTTP/1.1\r\nHost: localhost\r\n\r\nGET /big HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await;
    c.read_response().await.expect_body(body(SMALL, 9));
    c.read_response().await.expect_body(body(BIG, 9));
    proxy.expect_counter("disk_sendfile_bytes", sent + (BIG + SMALL) as u64);

    // HTTP/2 (h2c) gets the same bytes, copied into frames.
    let mut h2 = H2c::connect(&proxy).await;
    assert!(
        h2.get("/big").await[..] == body(BIG, 9)[..],
        "h2 body differs"
    );
    proxy.expect_counter("disk_sendfile_bytes", sent + (BIG + SMALL) as u64);
    origin.finish().await;
}

// d00020: `sendfile = false` in [server] sends every disk hit through user
// space, checked block by block.
#[tokio::test]
async fn d00020_sendfile_can_be_turned_off() {
    let t = Test::new("d00020");
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_url("/f");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .body(body(200_000, 4))
                .send()
                .await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 64 << 20, 0)
        .config(|c| c.server.sendfile = false)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/f")
        .send()
        .await
        .expect_body(body(200_000, 4));
    proxy.wait_counter("disk_stored", 1).await;
    let mut c = t.client(&proxy).connect().await;
    for _ in 0..3 {
        c.get("/f")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(200_000, 4));
    }
    proxy.expect_counter("disk_hits", 3);
    proxy.expect_counter("disk_sendfile_bytes", 0);
    origin.finish().await;
}

// d00021: ranges joining a large disk-backed fill after megabytes left
// memory: a range in the spilled part is read back from the file being
// written, a range past it skips the spilled part; one origin fetch.
#[tokio::test]
async fn d00021_ranges_of_a_spilled_fill() {
    const LEN: usize = 6_000_000;
    const FIRST: usize = 4_600_000;
    let t = Test::new("d00021");
    let full = body(LEN, 5);
    let joined = t.barrier(2);
    let j = joined.clone();
    let f = full.clone();
    let origin = t
        .origin()
        .script(|mut s| async move {
            s.rxreq().await.expect_no_header("range");
            s.txresp(200)
                .hdr("Cache-Control", "max-age=600")
                .hdr("Content-Length", LEN)
                .send_head()
                .await;
            s.chunk(&f[..FIRST]).await;
            j.sync().await;
            s.chunk(&f[FIRST..]).await;
            s.end().await;
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    let proxy = disk_proxy(&t, &origin, &dir).await;
    // The leader asks for the last bytes of the first part: answered while
    // the rest has not been sent.
    let early = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", format!("bytes={}-{}", FIRST - 100, FIRST - 1))
        .send()
        .await;
    early
        .expect_status(206)
        .expect_body(&full[FIRST - 100..FIRST]);
    // Megabytes were written and left memory: a range at 100 KB is read
    // back from the file; one at 5 MB waits for its bytes.
    let spilled = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", "bytes=100000-100999")
        .spawn();
    let later = t
        .client(&proxy)
        .get("/big")
        .hdr("Range", "bytes=5000000-5000009")
        .spawn();
    proxy.wait_counter("fill_waiters_total", 2).await;
    spilled
        .await
        .unwrap()
        .expect_status(206)
        .expect_body(&full[100_000..101_000]);
    joined.sync().await;
    later
        .await
        .unwrap()
        .expect_status(206)
        .expect_body(&full[5_000_000..5_000_010]);
    proxy.expect_counter("range_misses", 3);
    proxy.wait_counter("disk_stored", 1).await;
    assert_eq!(origin.requests(), 1);
    origin.finish().await;
}

// d00022: an evicted object's file is overwritten in place for a new object
// only when nobody has it open: a client still reading the old object
// gets the old bytes, whole. A file nobody reads is reused, and cut to the
// new object's length.
#[tokio::test]
async fn d00022_a_file_being_read_is_never_reused() {
    const BIG: usize = 8 << 20;
    const SMALL: usize = 3 << 20;
    let t = Test::new("d00022");
    let origin = t
        .origin()
        .script(|mut s| async move {
            for (path, len, seed) in [("/a", BIG, 1), ("/b", BIG, 2), ("/c", SMALL, 3)] {
                s.rxreq().await.expect_url(path);
                s.txresp(200)
                    .hdr("Cache-Control", "max-age=600")
                    .body(body(len, seed))
                    .send()
                    .await;
            }
        })
        .start()
        .await;
    let dir = t.dir().join("zone");
    // Room for one big object only: storing /b evicts /a, storing /c /b.
    let proxy = t
        .proxy()
        .origin(&origin)
        .disk(&dir, 10 << 20, 0)
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    t.client(&proxy)
        .get("/a")
        .send()
        .await
        .expect_body(body(BIG, 1));
    proxy.wait_counter("disk_stored", 1).await;

    // An HTTP/2 client with a 64 KiB window takes the head of a hit on /a
    // and reads nothing more: the proxy holds /a's file open meanwhile.
    let stream = tokio::net::TcpStream::connect(hoard_testkit::Endpoint::endpoint(&proxy))
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(65_535)
            .initial_connection_window_size(65_535)
            .handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = http::Request::get("http://localhost/a")
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(proxy.counter("disk_hits"), 1);

    // Storing /b evicts /a, whose file is still open: it is unlinked, not
    // reused.
    t.client(&proxy)
        .get("/b")
        .send()
        .await
        .expect_body(body(BIG, 2));
    proxy.wait_counter("disk_stored", 2).await;
    proxy.expect_counter("disk_evicted_size", 1);
    proxy.expect_counter("disk_files_recycled", 0);
    let got = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert!(
        got[..] == body(BIG, 1)[..],
        "the reader of /a got other bytes"
    );
    drop(send);

    // /b's file is not open: storing /c takes it over and cuts it to length.
    t.client(&proxy)
        .get("/c")
        .send()
        .await
        .expect_body(body(SMALL, 3));
    proxy.wait_counter("disk_stored", 3).await;
    proxy.expect_counter("disk_evicted_size", 2);
    proxy.expect_counter("disk_files_recycled", 1);
    let left = files(&dir);
    assert_eq!(left.len(), 1, "one file left: {left:?}");
    assert!(
        left[0].1 < (SMALL + 64 * 1024) as u64,
        "cut to length: {left:?}"
    );
    for _ in 0..2 {
        t.client(&proxy)
            .get("/c")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(SMALL, 3));
    }
    origin.finish().await;
}

// d00023: a small disk hit, once its file is verified, is copied from the
// page cache and leaves with its head (no sendfile); a larger one still goes
// by sendfile, whole, its tail included; a small range of the large one is
// copied too. Over HTTP/2 the same bytes arrive. Every byte is the stored one.
#[tokio::test]
async fn d00023_small_disk_hits_are_copied_large_ones_sent() {
    const TINY: usize = 1000;
    const LARGE: usize = 300_123;
    let t = Test::new("d00023");
    let (origin, proxy, mut c) =
        stored_and_verified(&t, &[("/tiny", TINY), ("/large", LARGE)], 3).await;
    let before = proxy.counter("disk_sendfile_bytes");
    for _ in 0..3 {
        c.get("/tiny")
            .send()
            .await
            .expect_cache_status("hit")
            .expect_body(body(TINY, 3));
    }
    proxy.expect_counter("disk_sendfile_bytes", before);
    c.get("/large")
        .send()
        .await
        .expect_cache_status("hit")
        .expect_body(body(LARGE, 3));
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);
    c.get("/large")
        .hdr("Range", "bytes=100000-100099")
        .send()
        .await
        .expect_status(206)
        .expect_body(&body(LARGE, 3)[100_000..100_100]);
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);

    // HTTP/2 (h2c): copied into frames, never sendfile.
    let mut h2 = H2c::connect(&proxy).await;
    for (path, len) in [("/tiny", TINY), ("/large", LARGE)] {
        assert!(
            h2.get(path).await[..] == body(len, 3)[..],
            "h2 {path} differs"
        );
    }
    proxy.expect_counter("disk_sendfile_bytes", before + LARGE as u64);
    proxy.expect_counter("disk_hits", 9);
    origin.finish().await;
}
