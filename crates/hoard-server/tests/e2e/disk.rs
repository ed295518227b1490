//! Disk zones with real directories as the cases see them: the files in a
//! zone directory and what their heads say, the zone's account checked
//! against them, proxies over a disk zone (no memory tier: every hit read
//! from disk), and bodies that tell where their bytes came from.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hoard_store::disk::format::{pick_slot, Head, Prefix, PREFIX_LEN};
use hoard_store::disk::DiskZone;
use hoard_testkit::{Origin, Test, TestProxy};

/// Every file under a zone directory (two levels), with its length.
pub(crate) fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
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

pub(crate) fn body(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// A body of `len` bytes that no other URL has: the URL, then bytes
/// from a generator seeded by the URL.
pub(crate) fn ubody(url: &str, len: usize) -> Vec<u8> {
    let mut seed: u64 = 0xcbf2_9ce4_8422_2325;
    for b in url.bytes() {
        seed = (seed ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut out: Vec<u8> = format!("<{url}>").into_bytes();
    let mut x = seed | 1;
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.push((x >> 24) as u8);
    }
    out.truncate(len);
    out
}

/// Published object files (not `.tmp`), with their lengths.
pub(crate) fn object_files(dir: &Path) -> Vec<(PathBuf, u64)> {
    files(dir)
        .into_iter()
        .filter(|(p, _)| p.extension().is_none())
        .collect()
}

/// Temporary files left in a zone directory.
pub(crate) fn tmp_files(dir: &Path) -> Vec<PathBuf> {
    files(dir)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.extension().is_some_and(|e| e == "tmp"))
        .collect()
}

/// The key text in an object file's current head.
pub(crate) fn head_key(path: &Path) -> String {
    let b = std::fs::read(path).unwrap();
    let p = Prefix::decode(&b).unwrap();
    let slot = pick_slot(
        &b[PREFIX_LEN as usize..p.data_offset() as usize],
        p.slot_len,
        p.serial,
    )
    .unwrap();
    Head::decode(slot.head).unwrap().key
}

/// The object file whose head is for path `url`.
pub(crate) fn file_of(dir: &Path, url: &str) -> PathBuf {
    let suffix = format!("|{url}");
    let found: Vec<PathBuf> = object_files(dir)
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| head_key(p).ends_with(&suffix))
        .collect();
    assert_eq!(found.len(), 1, "one file for {url}: {found:?}");
    found[0].clone()
}

/// Asserts that the zone's account matches its directory: every object
/// file is indexed, no temporary file is left, and the bytes accounted are
/// the files' lengths in 4 KiB blocks. Call after `settle`.
pub(crate) fn assert_account(zone: &DiskZone, dir: &Path, when: &str) {
    let objs = object_files(dir);
    assert_eq!(
        objs.len() as u64,
        zone.objects(),
        "{when}: object files on disk vs objects indexed: {objs:?}"
    );
    let tmps = tmp_files(dir);
    assert!(tmps.is_empty(), "{when}: temporary files left: {tmps:?}");
    let on_disk: u64 = objs.iter().map(|(_, l)| l.div_ceil(4096) * 4096).sum();
    assert_eq!(
        zone.used(),
        on_disk,
        "{when}: bytes accounted vs files on disk ({} files)",
        objs.len()
    );
}

/// Lets held disk writes go when dropped, so that a failing case never
/// leaves a blocking thread held (the runtime would wait for it).
pub(crate) struct Release(pub(crate) Arc<DiskZone>);

impl Drop for Release {
    fn drop(&mut self) {
        self.0.io().gate().hold_writes(false);
    }
}

/// A proxy over a disk zone of `max_size` in `dir` with no memory tier
/// (every hit read from disk), the admin API on, its loader done.
pub(crate) async fn zone_proxy(t: &Test, origin: &Origin, dir: &Path, max_size: u64) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, max_size, 0)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy over a 64 MiB disk zone in `dir`, no memory tier, whose route
/// does not coalesce (each miss is a fill of its own, not in the in-flight
/// table), the admin API on.
pub(crate) async fn uncoalesced_proxy(t: &Test, origin: &Origin, dir: &Path) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .route(|r| r.coalesce = false)
        .admin()
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy over a 64 MiB disk zone in `dir`, no memory tier, with a 1 s
/// upstream read_timeout.
pub(crate) async fn stall_proxy(t: &Test, origin: &Origin, dir: &Path) -> TestProxy {
    let proxy = t
        .proxy()
        .origin(origin)
        .disk(dir, 64 << 20, 0)
        .upstream(|u| u.read_timeout = Duration::from_secs(1))
        .start()
        .await;
    proxy.wait_counter("disk_load_done", 1).await;
    proxy
}

/// A proxy from a TOML text with `zones` disk zones, their loaders done.
pub(crate) async fn toml_proxy(t: &Test, origin: &Origin, toml: &str, zones: u64) -> TestProxy {
    let proxy = t.proxy().toml(origin, toml).start().await;
    proxy.wait_counter("disk_load_done", zones).await;
    proxy
}

/// How many of `urls` are served from the cache (`only-if-cached`); each
/// one served must be exactly its own body.
pub(crate) async fn served(t: &Test, proxy: &TestProxy, urls: &[(String, usize)]) -> u64 {
    let mut n = 0;
    for (url, len) in urls {
        let r = t
            .client(proxy)
            .get(url)
            .hdr("Cache-Control", "only-if-cached")
            .send()
            .await;
        match r.status {
            200 => {
                assert!(
                    r.body[..] == ubody(url, *len)[..],
                    "{url}: served {} bytes that are not its body (starts {:?})",
                    r.body.len(),
                    String::from_utf8_lossy(&r.body[..r.body.len().min(40)])
                );
                n += 1;
            }
            504 => {}
            other => panic!("{url}: status {other}"),
        }
    }
    n
}

/// `url` from the cache only: its status and body.
pub(crate) async fn cached(t: &Test, proxy: &TestProxy, url: &str) -> (u16, Vec<u8>) {
    let r = t
        .client(proxy)
        .get(url)
        .hdr("Cache-Control", "only-if-cached")
        .send()
        .await;
    (r.status, r.body.to_vec())
}
