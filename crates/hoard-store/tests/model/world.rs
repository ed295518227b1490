//! The model and the store side by side: `World` applies each operation to
//! the real store and to the model of what it must hold (an `Expect` per
//! key and variant: the newest completed body and head versions, soft-purged
//! or not, torn or not, with parts or not) and checks the invariants after
//! each step: lookups against the model, each zone's account against its
//! files, and what a restart or a crash keeps.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoard_policy::clock::Clock;
use hoard_store::catalog::Selector;
use hoard_store::disk::index::object_id;
use hoard_store::disk::{DirConfig, ZoneConfig, ZoneLookup};
use hoard_store::object::{ObjectBody, StoredObject};
use hoard_store::{Lookup, NoEvents, Store};

use crate::gen::{Cfg, Op, TestClock};
use crate::keys::{body, head, headers, key_text, primary, request, times, var_of, variant_digest};
use crate::KEYS;

// ---------------------------------------------------------------- the model

/// What a key and variant should hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Expect {
    pub(crate) body_version: u64,
    pub(crate) head_version: u64,
    pub(crate) len: u32,
    /// Soft-purged since it was stored: a hit must be stale.
    pub(crate) stale: bool,
    /// Its file was damaged: a read may fail (never return wrong bytes).
    pub(crate) torn: bool,
    /// It has parts (made from this body version).
    pub(crate) parts: bool,
}

/// The parts a `Parts` step gives body version `v` of `key`: two codings,
/// of lengths that cross block boundaries.
pub(crate) fn parts_of(key: u8, v: u64) -> Vec<hoard_store::object::Part> {
    use hoard_policy::encoding::Coding;
    [
        (Coding::Br, 7 + (v % 5) * 20_000),
        (Coding::Gzip, 1 + (v % 3) * 33_333),
    ]
    .into_iter()
    .map(|(c, n)| {
        let b: Vec<u8> = (0..n)
            .map(|i| (i as u8) ^ key ^ (v as u8) ^ c as u8)
            .collect();
        hoard_store::object::Part::in_memory(c, Bytes::from(b))
    })
    .collect()
}

pub(crate) async fn read_body(b: &ObjectBody) -> std::io::Result<Vec<u8>> {
    match b {
        ObjectBody::Chunks { chunks, .. } => Ok(chunks.concat()),
        ObjectBody::File(f) => f.read_all().await.map(|c| c.concat()),
    }
}

pub(crate) struct World {
    pub(crate) cfg: Cfg,
    pub(crate) dirs: Vec<Vec<PathBuf>>,
    pub(crate) clock: Arc<TestClock>,
    pub(crate) store: Option<Arc<Store>>,
    pub(crate) model: BTreeMap<(u8, u8), Expect>,
    pub(crate) version: u64,
}

pub(crate) type Check = Result<(), String>;

pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T, String> {
    Err(msg.into())
}

impl World {
    pub(crate) fn store(&self) -> &Arc<Store> {
        self.store.as_ref().expect("a store")
    }

    pub(crate) fn now(&self) -> SystemTime {
        self.clock.now()
    }

    pub(crate) fn zone_configs(&self) -> Vec<ZoneConfig> {
        self.dirs
            .iter()
            .enumerate()
            .map(|(i, ds)| ZoneConfig {
                name: format!("z{i}"),
                dirs: ds
                    .iter()
                    .map(|p| DirConfig {
                        path: p.clone(),
                        weight: 1,
                    })
                    .collect(),
                max_size: self.cfg.zone_size,
                inactive: None,
                min_free: 0,
                max_object: self.cfg.zone_size,
                durability: hoard_store::disk::Durability::Process,
            })
            .collect()
    }

    pub(crate) async fn open(&mut self) {
        let s = Store::new(
            self.cfg.memory,
            1 << 20,
            self.zone_configs(),
            Arc::new(NoEvents),
            self.clock.clone(),
        )
        .expect("store opens")
        .with_near(self.cfg.near);
        let s = Arc::new(s);
        s.start();
        for z in s.zones() {
            while z.loading() {
                tokio::task::yield_now().await;
            }
        }
        self.store = Some(s);
    }

    /// A complete object inserted into the memory tier, or (`near`) the
    /// near tier.
    pub(crate) fn insert(&mut self, key: u8, var: u8, len: u32, near: bool) {
        let s = self.store().clone();
        let epoch = s.catalog().epoch();
        self.version += 1;
        let v = self.version;
        let h = head(key, v, len, self.now());
        let obj = StoredObject::new(
            h.key,
            h.vary,
            h.status,
            h.headers,
            h.times,
            h.lifetime_source,
            h.rules,
            ObjectBody::from_chunks(if len == 0 {
                Vec::new()
            } else {
                vec![body(key, v, len)]
            }),
        );
        let (p, req) = (primary(key), request(key, var));
        let done = if near {
            s.insert_near(p, &req, Arc::new(obj.into_near()), epoch)
        } else {
            s.insert(p, &req, Arc::new(obj), epoch)
        };
        if done.is_ok() {
            self.stored(key, var, v, len);
        }
    }

    pub(crate) async fn settle(&self) {
        for z in self.store().zones() {
            z.io().settle().await;
        }
    }

    /// Invariant 2.
    pub(crate) async fn check_accounts(&self) -> Check {
        self.settle().await;
        for (z, dirs) in self.store().zones().iter().zip(&self.dirs) {
            let (mut objects, mut bytes) = (0u64, 0u64);
            for d in dirs {
                for f in files(d) {
                    let name = f.file_name().unwrap().to_string_lossy().to_string();
                    if name.ends_with(".tmp") {
                        return fail(format!("{}: a .tmp is left: {name}", z.name()));
                    }
                    objects += 1;
                    bytes += f.metadata().map_or(0, |m| m.len().div_ceil(4096) * 4096);
                }
            }
            if objects != z.objects() {
                return fail(format!(
                    "{}: {objects} object files, index holds {}",
                    z.name(),
                    z.objects()
                ));
            }
            if bytes != z.used() {
                return fail(format!(
                    "{}: files hold {bytes} bytes, account says {}",
                    z.name(),
                    z.used()
                ));
            }
            if z.used() > self.cfg.zone_size {
                return fail(format!("{}: account over the limit", z.name()));
            }
        }
        if let Some(n) = self.store().near() {
            if n.weight() > self.cfg.near {
                return fail(format!("near tier holds {} bytes", n.weight()));
            }
        }
        Ok(())
    }

    /// Looks up a key and variant and checks what comes back (invariant 1).
    /// `Some(on_disk)` for a hit.
    pub(crate) async fn lookup(&self, key: u8, var: u8) -> Result<Option<bool>, String> {
        let var = var_of(key, var);
        let text = key_text(key);
        let got = self
            .store()
            .lookup(primary(key), &text, &request(key, var))
            .await;
        let Lookup::Hit(o) = got else {
            return Ok(None);
        };
        self.check(key, var, &o).await?;
        Ok(Some(o.disk.is_some()))
    }

    /// Checks an object found for a key and variant against the model.
    pub(crate) async fn check(&self, key: u8, var: u8, o: &StoredObject) -> Check {
        let text = key_text(key);
        let what = format!("lookup k{key} v{var}");
        let Some(e) = self.model.get(&(key, var)).copied() else {
            return fail(format!(
                "{what}: served {:?} (x-version {:?}) but nothing may be stored",
                o.key,
                o.headers.get("x-version")
            ));
        };
        if o.key != text {
            return fail(format!("{what}: another key's object: {}", o.key));
        }
        let hv = o
            .headers
            .get("x-version")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if hv != Some(e.head_version) {
            return fail(format!(
                "{what}: head version {hv:?}, want {} ({e:?})",
                e.head_version
            ));
        }
        if e.stale && o.times.is_fresh(self.now()) {
            return fail(format!("{what}: soft-purged but served fresh"));
        }
        let read = match &o.body {
            ObjectBody::Chunks { chunks, .. } => Ok(chunks.concat()),
            ObjectBody::File(f) => f.read_all().await.map(|c| c.concat()),
        };
        match read {
            Ok(b) => {
                if b != body(key, e.body_version, e.len) {
                    return fail(format!(
                        "{what}: wrong bytes ({} bytes, want {} of body version {})",
                        b.len(),
                        e.len,
                        e.body_version
                    ));
                }
            }
            Err(err) if e.torn => {
                let _ = err;
            }
            Err(err) => return fail(format!("{what}: read failed: {err}")),
        }
        if o.parts.is_empty() {
            if e.parts && !e.torn {
                return fail(format!("{what}: its parts are lost ({e:?})"));
            }
            return Ok(());
        }
        if !e.parts {
            return fail(format!("{what}: parts it was never given ({e:?})"));
        }
        let want = parts_of(key, e.body_version);
        if o.parts.len() != want.len() {
            return fail(format!(
                "{what}: {} parts, want {}",
                o.parts.len(),
                want.len()
            ));
        }
        for (got, want) in o.parts.iter().zip(&want) {
            let w = read_body(&want.body).await.expect("in memory");
            match read_body(&got.body).await {
                Ok(b) if got.coding == want.coding && b == w => {}
                Ok(b) => {
                    return fail(format!(
                        "{what}: part {:?} of {} bytes, want {:?} of {} (body version {})",
                        got.coding,
                        b.len(),
                        want.coding,
                        w.len(),
                        e.body_version
                    ))
                }
                Err(_) if e.torn => {}
                Err(err) => return fail(format!("{what}: part read failed: {err}")),
            }
        }
        Ok(())
    }

    /// Writes a whole object through a disk writer; `Ok(true)` when it was stored.
    pub(crate) async fn fill_disk(
        &mut self,
        key: u8,
        var: u8,
        len: u32,
        chunk: u32,
        zone: usize,
    ) -> bool {
        let s = self.store().clone();
        let epoch = s.catalog().epoch();
        let Some(mut w) = s
            .disk_writer(
                zone,
                primary(key),
                variant_digest(key, var),
                Some(u64::from(len)),
                256,
            )
            .await
        else {
            return false;
        };
        self.version += 1;
        let v = self.version;
        let b = body(key, v, len);
        for c in b.chunks(chunk.max(1) as usize) {
            if w.write(Bytes::copy_from_slice(c)).await.is_err() {
                return false;
            }
        }
        let h = head(key, v, len, self.now());
        if s.finish_disk(w, primary(key), &h, epoch).await.is_ok() {
            self.stored(key, var, v, len);
            true
        } else {
            false
        }
    }

    pub(crate) fn stored(&mut self, key: u8, var: u8, v: u64, len: u32) {
        // A new object supersedes the key's copies in other tiers, which
        // may take its other variants with them: those may miss, never
        // come back older. The model keeps them (a miss is allowed).
        self.model.insert(
            (key, var),
            Expect {
                body_version: v,
                head_version: v,
                len,
                stale: false,
                torn: false,
                parts: false,
            },
        );
    }

    pub(crate) async fn step(&mut self, op: Op) -> Check {
        let zones = self.store().zones().len();
        match op {
            Op::Fill {
                key,
                var,
                len,
                chunk,
                zone,
                memory,
            } => {
                let var = var_of(key, var);
                if zones == 0 || (memory && self.cfg.memory > 0) {
                    self.insert(key, var, len, false);
                } else {
                    self.fill_disk(key, var, len, chunk, zone as usize % zones)
                        .await;
                }
            }
            Op::NearFill { key, var, len } => {
                self.insert(key, var_of(key, var), len, true);
            }
            Op::Abandon { key, var, written } => {
                if zones > 0 {
                    let var = var_of(key, var);
                    if let Some(mut w) = self
                        .store()
                        .disk_writer(0, primary(key), variant_digest(key, var), None, 256)
                        .await
                    {
                        let _ = w.write(body(key, 0, written)).await;
                    }
                }
            }
            Op::Cancel {
                key,
                var,
                len,
                polls,
            } => {
                if zones > 0 {
                    let var = var_of(key, var);
                    if let Some(mut w) = self
                        .store()
                        .disk_writer(0, primary(key), variant_digest(key, var), Some(1), 256)
                        .await
                    {
                        let b = body(key, 0, len);
                        let mut fut = Box::pin(async move {
                            // Two batches: the second must grow the reservation.
                            let _ = w.write(b.slice(..b.len() / 2)).await;
                            let _ = w.write(b.slice(b.len() / 2..)).await;
                            let _ = w.write(Bytes::from(vec![0u8; 1 << 20])).await;
                        });
                        for _ in 0..polls {
                            if poll_once(fut.as_mut()).is_ready() {
                                break;
                            }
                            tokio::task::yield_now().await;
                        }
                        drop(fut);
                    }
                }
            }
            Op::Refresh { key, var } => {
                let var = var_of(key, var);
                let s = self.store().clone();
                let text = key_text(key);
                if let Lookup::Hit(o) = s.lookup(primary(key), &text, &request(key, var)).await {
                    let Some(e) = self.model.get(&(key, var)).copied() else {
                        return fail(format!("refresh k{key} v{var}: found a removed object"));
                    };
                    self.version += 1;
                    let v = self.version;
                    let h = headers(key, v, e.len);
                    let new = o.with_headers(h, times(self.now()), o.lifetime_source, o.rules);
                    s.update(primary(key), &request(key, var), &o, Arc::new(new))
                        .await;
                    self.model.insert(
                        (key, var),
                        Expect {
                            head_version: v,
                            stale: false,
                            ..e
                        },
                    );
                }
            }
            Op::Parts { key, var } => {
                let var = var_of(key, var);
                let s = self.store().clone();
                let found = s
                    .lookup(primary(key), &key_text(key), &request(key, var))
                    .await;
                let Lookup::Hit(o) = found else {
                    return Ok(());
                };
                let (Some(at), Some(e)) = (o.disk, self.model.get(&(key, var)).copied()) else {
                    return Ok(());
                };
                self.check(key, var, &o).await?;
                if e.torn {
                    return Ok(());
                }
                let Ok(identity) = read_body(&o.body).await else {
                    return Ok(());
                };
                let parts = parts_of(key, e.body_version);
                let epoch = s.catalog().epoch();
                let done = s
                    .store_with_parts(
                        at.zone,
                        (primary(key), variant_digest(key, var)),
                        &hoard_store::store::head_of(&o),
                        &[Bytes::from(identity)],
                        &parts,
                        epoch,
                        Some(at),
                    )
                    .await;
                if done.is_ok() {
                    self.model.insert((key, var), Expect { parts: true, ..e });
                }
            }
            Op::Purge { kind, which, soft } => {
                let k = which % KEYS;
                let sel = match kind {
                    0 => Selector::Url {
                        scheme: "http".into(),
                        host: format!("h{}", k % 2),
                        target: format!("/d{}/k{k}", k % 3),
                    },
                    1 => Selector::Prefix(format!("http://h{}/d{}", k % 2, k % 3)),
                    2 => Selector::Host(format!("h{}", k % 2)),
                    _ => Selector::Tag(format!("t{}", k % 3)),
                };
                let s = self.store().clone();
                s.purge(&sel, soft, self.now()).await;
                let hit: Vec<(u8, u8)> = self
                    .model
                    .keys()
                    .copied()
                    .filter(|(key, _)| sel.selects(&key_text(*key), &headers(*key, 0, 0)))
                    .collect();
                for id in hit {
                    if soft {
                        if let Some(e) = self.model.get_mut(&id) {
                            e.stale = true;
                        }
                    } else {
                        self.model.remove(&id);
                    }
                }
            }
            Op::Remove { key } => {
                self.store().remove_all(primary(key));
                self.model.retain(|(k, _), _| *k != key);
            }
            Op::Lookup { key, var } => {
                self.lookup(key, var).await?;
            }
            Op::Restart => {
                self.restart(None).await?;
            }
            Op::CrashWriter { key, var, written } => {
                if zones > 0 {
                    let var = var_of(key, var);
                    if let Some(mut w) = self
                        .store()
                        .disk_writer(0, primary(key), variant_digest(key, var), None, 256)
                        .await
                    {
                        let _ = w.write(body(key, 0, written)).await;
                        // As a crash leaves it: its `.tmp` stays. (Copied
                        // aside and put back after the writer's cleanup, not
                        // leaked with `mem::forget`: that would keep the
                        // zone and its open files alive for the rest of the
                        // process.)
                        self.settle().await;
                        let tmps: Vec<(PathBuf, Vec<u8>)> = self
                            .dirs
                            .iter()
                            .flatten()
                            .flat_map(|d| files(d))
                            .filter(|f| f.extension().is_some_and(|e| e == "tmp"))
                            .map(|f| {
                                let b = std::fs::read(&f).expect("read .tmp");
                                (f, b)
                            })
                            .collect();
                        drop(w);
                        self.settle().await;
                        for (f, b) in tmps {
                            std::fs::write(&f, b).expect("put back .tmp");
                        }
                    }
                    self.restart(None).await?;
                }
            }
            Op::CrashTorn { pick, how } => {
                if zones > 0 {
                    self.settle().await;
                    let all: Vec<PathBuf> =
                        self.dirs.iter().flatten().flat_map(|d| files(d)).collect();
                    if all.is_empty() {
                        return Ok(());
                    }
                    let f = &all[pick as usize % all.len()];
                    self.tear(f, how);
                    self.restart(Some(f)).await?;
                }
            }
            Op::FailedFill { key, var, len } => {
                if zones > 0 {
                    let var = var_of(key, var);
                    for z in self.store().zones() {
                        z.io().gate().fail_writes(true);
                    }
                    let before = self.model.clone();
                    let stored = self.fill_disk(key, var, len, 65_536, 0).await;
                    for z in self.store().zones() {
                        z.io().gate().fail_writes(false);
                    }
                    if stored && len > 0 {
                        return fail("a fill stored while every write failed");
                    }
                    if !stored {
                        self.model = before;
                    }
                }
            }
            Op::Advance { secs } => self.clock.advance(Duration::from_secs(u64::from(secs))),
        }
        self.check_accounts().await
    }

    /// Damages one object file as a crash or a failing disk could.
    pub(crate) fn tear(&mut self, f: &Path, how: u8) {
        let Ok(mut bytes) = std::fs::read(f) else {
            return;
        };
        match how {
            0 => bytes.truncate(bytes.len() / 2),
            1 => {
                let at = bytes.len().saturating_sub(20).max(1) - 1;
                bytes[at] ^= 0x5a;
            }
            _ => bytes[20] ^= 0x01,
        }
        let _ = std::fs::write(f, &bytes);
        // Which model entry it held.
        let name = f.file_name().unwrap().to_string_lossy().to_string();
        let id = name
            .split('-')
            .next()
            .and_then(|h| u128::from_str_radix(h, 16).ok());
        for ((key, var), e) in self.model.iter_mut() {
            if Some(object_id(primary(*key).0, variant_digest(*key, *var).0)) == id {
                e.torn = true;
            }
        }
    }

    /// Invariant 3: what was served from disk before is served after.
    pub(crate) async fn restart(&mut self, torn: Option<&Path>) -> Check {
        let _ = torn;
        // Settled first: a reservation still running for a writer that was
        // dropped may evict (it gives its bytes back at once, but what it
        // evicted is gone), and no eviction may fall between these lookups
        // and the restart.
        self.settle().await;
        let mut on_disk = HashSet::new();
        let ids: Vec<(u8, u8)> = self.model.keys().copied().collect();
        for (key, var) in &ids {
            // Checked through the store first, then asked of the zones
            // themselves: a memory copy may outlive its disk copy.
            self.lookup(*key, *var).await?;
            let (text, req) = (key_text(*key), request(*key, *var));
            for z in self.store().zones() {
                if let ZoneLookup::Hit(o, _) = z.lookup(primary(*key).0, &text, &req).await {
                    self.check(*key, *var, &o).await?;
                    on_disk.insert((*key, *var));
                }
            }
        }
        self.settle().await;
        self.store = None;
        self.open().await;
        for (key, var) in on_disk {
            let torn = self.model.get(&(key, var)).is_some_and(|e| e.torn);
            let hit = self.lookup(key, var).await?;
            if hit.is_none() && !torn {
                return fail(format!(
                    "k{key} v{var} was served from disk before the restart, missed after"
                ));
            }
        }
        Ok(())
    }
}

/// Object and temporary files of one directory (its fan-out subdirectories).
pub(crate) fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return out,
        Err(e) => panic!("{}: {e}", dir.display()),
    };
    for sub in rd {
        let sub = sub.expect("a directory entry");
        if !sub.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let inner = std::fs::read_dir(sub.path())
            .unwrap_or_else(|e| panic!("{}: {e}", sub.path().display()));
        out.extend(inner.map(|e| e.expect("a directory entry").path()));
    }
    out.sort();
    out
}

/// Polls a future once with a waker that does nothing.
pub(crate) fn poll_once<F: Future + ?Sized>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    fut.poll(&mut cx)
}
