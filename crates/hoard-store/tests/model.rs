//! The store against a model.
//!
//! A seeded driver generates random sequences of operations on the store's
//! public API (fills of many sizes through disk writers or into memory,
//! writers dropped part-way or cancelled at an await, 304 refreshes,
//! soft and hard purges by URL, prefix, host and tag, removals, lookups,
//! clean restarts, crashes: a writer frozen mid-way, a torn file, failing
//! writes, and clock advances) over random configurations (no zone, one or
//! two zones, one with two directories, tiny zones that evict and recycle
//! files, with and without a memory tier, with and without a near tier that
//! takes a cluster's copies of other members' objects). After every step it
//! checks:
//!
//! 1. a lookup finds the newest completed version of that key and variant,
//!    exact head and exact bytes, or misses; never an older version,
//!    another key's data, or anything removed or purged since (a
//!    soft-purged object only stale); a torn file may fail its read, never
//!    read wrong;
//! 2. once writes settle, each zone's byte account equals its files, every
//!    object file is in the index, no `.tmp` is left, and the account
//!    never exceeds the zone's limit, nor the near tier's its own;
//! 3. a clean restart, or a crash, keeps every object that was served
//!    from disk just before it (a torn file's object excepted).
//!
//! A failing sequence is shrunk (steps removed while it still fails) and
//! printed; keep it as a case in `REGRESSIONS`.
//!
//! In the test command it runs a fixed budget (`CASES` sequences of
//! `STEPS` steps). Longer: `HOARD_MODEL_CASES=5000 HOARD_MODEL_STEPS=80
//! cargo test --release -p hoard-store --test model -- --nocapture`
//! (`HOARD_MODEL_SEED` starts elsewhere; cargo test has no time limit).

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::clock::Clock;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::key::Digest;
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use hoard_store::catalog::Selector;
use hoard_store::disk::format::Head;
use hoard_store::disk::index::object_id;
use hoard_store::disk::{DirConfig, ZoneConfig, ZoneLookup};
use hoard_store::object::{ObjectBody, StoredObject};
use hoard_store::{Lookup, NoEvents, Store};
use http::{HeaderMap, HeaderValue, StatusCode};

/// Sequences run by the test command.
const CASES: u64 = 160;
/// Steps per sequence.
const STEPS: usize = 60;
/// Keys: `KEYS - VARYING` plain ones, then keys that vary on Accept-Encoding.
const KEYS: u8 = 6;
const VARYING: u8 = 2;

/// Sequences that once failed, kept as regression cases: (seed of the
/// configuration, steps).
const REGRESSIONS: &[(u64, &[Op])] = &[
    // A new version in zone 1 left the older one in zone 0, asked first
    // (found on the code before the fix, in 3 steps).
    (
        1,
        &[
            Op::Fill {
                key: 0,
                var: 1,
                len: 0,
                chunk: 40000,
                zone: 0,
                memory: true,
            },
            Op::Fill {
                key: 0,
                var: 0,
                len: 0,
                chunk: 1000,
                zone: 1,
                memory: false,
            },
            Op::CrashWriter {
                key: 3,
                var: 0,
                written: 411439,
            },
        ],
    ),
    // A soft purge while the object's directory was out of service (a
    // failed write) left its head fresh: served fresh after a restart.
    (
        166,
        &[
            Op::Fill {
                key: 2,
                var: 0,
                len: 65535,
                chunk: 65536,
                zone: 0,
                memory: false,
            },
            Op::FailedFill {
                key: 2,
                var: 0,
                len: 753980,
            },
            Op::Purge {
                kind: 2,
                which: 0,
                soft: true,
            },
            Op::Restart,
            Op::Lookup { key: 2, var: 1 },
        ],
    ),
];

// ---------------------------------------------------------------- clock

#[derive(Debug)]
struct TestClock(AtomicU64);

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.0.load(Ordering::Acquire))
    }
}

impl TestClock {
    fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::AcqRel);
    }
}

// ---------------------------------------------------------------- random

/// xorshift64*: small, seeded, reproducible.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------- config

#[derive(Debug, Clone, Copy)]
struct Cfg {
    zones: usize,
    /// The first zone spreads over two directories.
    two_dirs: bool,
    zone_size: u64,
    memory: u64,
    /// The near tier's size (0: none).
    near: u64,
}

impl Cfg {
    fn from_seed(seed: u64) -> Cfg {
        let mut r = Rng::new(seed ^ 0x00C0_FFEE);
        let zones = r.pick(&[0usize, 1, 1, 1, 2, 2]);
        Cfg {
            zones,
            two_dirs: r.below(3) == 0,
            zone_size: r.pick(&[384u64 << 10, 640 << 10, 2 << 20]),
            memory: if zones == 0 {
                1 << 20
            } else {
                r.pick(&[0u64, 0, 256 << 10])
            },
            near: r.pick(&[0u64, 0, 192 << 10, 1 << 20]),
        }
    }
}

// ---------------------------------------------------------------- operations

/// One step. Sizes are body lengths; `key` and `var` pick among the model's keys.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// A complete fill (disk writer in zone `zone`, or the memory tier).
    Fill {
        key: u8,
        var: u8,
        len: u32,
        chunk: u32,
        zone: u8,
        memory: bool,
    },
    /// A copy of another member's object, into the near tier.
    NearFill {
        key: u8,
        var: u8,
        len: u32,
    },
    /// A writer dropped after `written` bytes.
    Abandon {
        key: u8,
        var: u8,
        written: u32,
    },
    /// A writer whose write is cancelled after `polls` polls.
    Cancel {
        key: u8,
        var: u8,
        len: u32,
        polls: u8,
    },
    /// A 304: the stored object's head replaced.
    Refresh {
        key: u8,
        var: u8,
    },
    /// The stored disk object written again with its parts (content
    /// codings), replacing the copy it was made from.
    Parts {
        key: u8,
        var: u8,
    },
    /// A purge: `kind` 0 URL, 1 prefix, 2 host, 3 tag.
    Purge {
        kind: u8,
        which: u8,
        soft: bool,
    },
    /// Every variant of a key removed (as after an invalidation).
    Remove {
        key: u8,
    },
    Lookup {
        key: u8,
        var: u8,
    },
    /// Drop the store and open it again on the same directories.
    Restart,
    /// A writer stopped mid-way (its `.tmp` left as a crash leaves it), then a restart.
    CrashWriter {
        key: u8,
        var: u8,
        written: u32,
    },
    /// One object file damaged (`how`: 0 truncated, 1 a body byte, 2 the prefix), then a restart.
    CrashTorn {
        pick: u16,
        how: u8,
    },
    /// A fill while every disk write fails.
    FailedFill {
        key: u8,
        var: u8,
        len: u32,
    },
    Advance {
        secs: u16,
    },
}

fn gen_op(r: &mut Rng, cfg: &Cfg) -> Op {
    let key = r.below(u64::from(KEYS)) as u8;
    let var = r.below(2) as u8;
    let limit = cfg.zone_size.min(1 << 20) as u32;
    let len = match r.below(8) {
        0 => 0,
        1 => r.pick(&[1u32, 65_535, 65_536, 65_537, 131_072]),
        2 => limit / 2 + r.below(u64::from(limit / 2)) as u32,
        3 => limit + 4096,
        _ => r.below(90_000) as u32,
    };
    match r.below(100) {
        25..=29 => Op::NearFill { key, var, len },
        0..=24 => Op::Fill {
            key,
            var,
            len,
            chunk: r.pick(&[1000u32, 40_000, 65_536, 300_000]),
            zone: r.below(2) as u8,
            memory: r.below(5) == 0,
        },
        30..=33 => Op::Abandon {
            key,
            var,
            written: len,
        },
        34..=38 => Op::Cancel {
            key,
            var,
            len: len.max(1),
            polls: r.below(6) as u8,
        },
        39..=46 => Op::Refresh { key, var },
        47..=53 => Op::Purge {
            kind: r.below(4) as u8,
            which: r.below(u64::from(KEYS)) as u8,
            soft: r.below(2) == 0,
        },
        54..=56 => Op::Remove { key },
        57..=80 => Op::Lookup { key, var },
        81..=84 => Op::Parts { key, var },
        85..=88 => Op::Restart,
        89..=90 => Op::CrashWriter {
            key,
            var,
            written: len,
        },
        91..=92 => Op::CrashTorn {
            pick: r.below(1000) as u16,
            how: r.below(3) as u8,
        },
        93..=95 => Op::FailedFill { key, var, len },
        _ => Op::Advance {
            secs: r.pick(&[1u16, 11, 700]),
        },
    }
}

// ---------------------------------------------------------------- keys

fn varies(key: u8) -> bool {
    key >= KEYS - VARYING
}

fn key_text(key: u8) -> String {
    format!("http|h{}|/d{}/k{key}", key % 2, key % 3)
}

fn primary(key: u8) -> Digest {
    Digest::of(key_text(key).as_bytes())
}

/// The request a lookup or fill of this variant sends.
fn request(key: u8, var: u8) -> HeaderMap {
    let mut h = HeaderMap::new();
    if varies(key) {
        h.insert(
            "accept-encoding",
            HeaderValue::from_static(if var == 0 { "gzip" } else { "br" }),
        );
    }
    h
}

/// A key's tag (every response of a key carries the same one).
fn tag(key: u8) -> Option<String> {
    (key % 3 != 2).then(|| format!("t{}", key % 3))
}

fn var_of(key: u8, var: u8) -> u8 {
    if varies(key) {
        var
    } else {
        0
    }
}

fn body(key: u8, version: u64, len: u32) -> Bytes {
    let seed = (u64::from(key) << 40) ^ version.wrapping_mul(0x100_0001);
    (0..len as u64)
        .map(|i| (seed.wrapping_add(i.wrapping_mul(0x9E37)) >> 3) as u8)
        .collect::<Vec<u8>>()
        .into()
}

fn headers(key: u8, head_version: u64, len: u32) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("x-version", HeaderValue::from(head_version));
    h.insert("content-length", HeaderValue::from(len));
    if varies(key) {
        h.insert("vary", HeaderValue::from_static("Accept-Encoding"));
    }
    if let Some(t) = tag(key) {
        h.insert("surrogate-key", t.parse().unwrap());
    }
    h
}

fn times(now: SystemTime) -> StoredTimes {
    StoredTimes {
        request_time: now,
        response_time: now,
        date: now,
        age_value: None,
        lifetime: Duration::from_secs(600),
    }
}

fn rules() -> StoredRules {
    StoredRules::new(&CacheControl::default(), None, None)
}

fn head(key: u8, head_version: u64, len: u32, now: SystemTime) -> Head {
    let h = headers(key, head_version, len);
    Head {
        key: key_text(key),
        vary: VaryNames::from_response(&h),
        status: StatusCode::OK,
        headers: h,
        times: times(now),
        lifetime_source: LifetimeSource::MaxAge,
        rules: rules(),
        parts: Vec::new(),
    }
}

fn variant_digest(key: u8, var: u8) -> Digest {
    VaryNames::from_response(&headers(key, 0, 0)).variant(&request(key, var))
}

// ---------------------------------------------------------------- the model

/// What a key and variant should hold.
#[derive(Debug, Clone, Copy)]
struct Expect {
    body_version: u64,
    head_version: u64,
    len: u32,
    /// Soft-purged since it was stored: a hit must be stale.
    stale: bool,
    /// Its file was damaged: a read may fail (never return wrong bytes).
    torn: bool,
    /// It has parts (made from this body version).
    parts: bool,
}

/// The parts a `Parts` step gives body version `v` of `key`: two codings,
/// of lengths that cross block boundaries.
fn parts_of(key: u8, v: u64) -> Vec<hoard_store::object::Part> {
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

async fn read_body(b: &ObjectBody) -> std::io::Result<Vec<u8>> {
    match b {
        ObjectBody::Chunks { chunks, .. } => Ok(chunks.concat()),
        ObjectBody::File(f) => f.read_all().await.map(|c| c.concat()),
    }
}

struct World {
    cfg: Cfg,
    dirs: Vec<Vec<PathBuf>>,
    clock: Arc<TestClock>,
    store: Option<Arc<Store>>,
    model: BTreeMap<(u8, u8), Expect>,
    version: u64,
}

type Check = Result<(), String>;

fn fail<T>(msg: impl Into<String>) -> Result<T, String> {
    Err(msg.into())
}

impl World {
    fn store(&self) -> &Arc<Store> {
        self.store.as_ref().expect("a store")
    }

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    fn zone_configs(&self) -> Vec<ZoneConfig> {
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

    async fn open(&mut self) {
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
    fn insert(&mut self, key: u8, var: u8, len: u32, near: bool) {
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

    async fn settle(&self) {
        for z in self.store().zones() {
            z.io().settle().await;
        }
    }

    /// Invariant 2.
    async fn check_accounts(&self) -> Check {
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
    async fn lookup(&self, key: u8, var: u8) -> Result<Option<bool>, String> {
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
    async fn check(&self, key: u8, var: u8, o: &StoredObject) -> Check {
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
    async fn fill_disk(&mut self, key: u8, var: u8, len: u32, chunk: u32, zone: usize) -> bool {
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

    fn stored(&mut self, key: u8, var: u8, v: u64, len: u32) {
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

    async fn step(&mut self, op: Op) -> Check {
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
    fn tear(&mut self, f: &Path, how: u8) {
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
    async fn restart(&mut self, torn: Option<&Path>) -> Check {
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
fn files(dir: &Path) -> Vec<PathBuf> {
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
fn poll_once<F: Future + ?Sized>(fut: std::pin::Pin<&mut F>) -> Poll<F::Output> {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    fut.poll(&mut cx)
}

// ---------------------------------------------------------------- driver

/// Runs one sequence on a fresh store; the first broken invariant, with its step.
fn run(cfg_seed: u64, ops: &[Op]) -> Check {
    let cfg = Cfg::from_seed(cfg_seed);
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let dirs: Vec<Vec<PathBuf>> = (0..cfg.zones)
        .map(|z| {
            let n = if z == 0 && cfg.two_dirs { 2 } else { 1 };
            (0..n)
                .map(|d| tmp.path().join(format!("z{z}d{d}")))
                .collect()
        })
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("a runtime");
    let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async {
            let mut w = World {
                cfg,
                dirs,
                clock: Arc::new(TestClock(AtomicU64::new(1_800_000_000 * 1_000_000_000))),
                store: None,
                model: BTreeMap::new(),
                version: 0,
            };
            w.open().await;
            for (i, op) in ops.iter().enumerate() {
                if let Err(e) = w.step(*op).await {
                    return Err(format!("step {i} {op:?}: {e}"));
                }
            }
            w.settle().await;
            Ok(())
        })
    }));
    rt.shutdown_timeout(Duration::from_secs(5));
    match outcome {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panicked: {}",
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        )),
    }
}

/// Removes steps while the sequence still fails: the shortest found.
fn shrink(cfg_seed: u64, mut ops: Vec<Op>) -> (Vec<Op>, String) {
    let mut why = run(cfg_seed, &ops).err().unwrap_or_default();
    let mut chunk = ops.len().div_ceil(2).max(1);
    while chunk >= 1 {
        let mut i = 0;
        let mut progressed = false;
        while i < ops.len() {
            let mut fewer = ops.clone();
            fewer.drain(i..(i + chunk).min(ops.len()));
            match run(cfg_seed, &fewer) {
                Err(e) => {
                    ops = fewer;
                    why = e;
                    progressed = true;
                }
                Ok(()) => i += chunk,
            }
        }
        if chunk == 1 && !progressed {
            break;
        }
        chunk = (chunk / 2).max(1);
    }
    (ops, why)
}

/// Steps as Rust code, for `REGRESSIONS`.
fn as_code(ops: &[Op]) -> String {
    let mut out = format!("{ops:?}");
    for name in [
        "NearFill",
        "Fill",
        "Parts",
        "Abandon",
        "Cancel",
        "Refresh",
        "Purge",
        "Remove",
        "Lookup",
        "Restart",
        "CrashWriter",
        "CrashTorn",
        "FailedFill",
        "Advance",
    ] {
        out = out
            .replace(&format!("[{name}"), &format!("[Op::{name}"))
            .replace(&format!(", {name}"), &format!(", Op::{name}"));
    }
    out
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn n00200_the_store_matches_its_model() {
    let cases = env("HOARD_MODEL_CASES", CASES);
    let steps = env("HOARD_MODEL_STEPS", STEPS as u64) as usize;
    let start = env("HOARD_MODEL_SEED", 1);
    // Long runs go on past a failure (each is shrunk and printed) and
    // fail at the end.
    let keep_going = std::env::var("HOARD_MODEL_KEEP_GOING").is_ok();
    let mut failures = 0;
    for seed in start..start + cases {
        let cfg = Cfg::from_seed(seed);
        let mut r = Rng::new(seed);
        let ops: Vec<Op> = (0..steps).map(|_| gen_op(&mut r, &cfg)).collect();
        if let Err(first) = run(seed, &ops) {
            let (short, why) = shrink(seed, ops);
            let report = format!(
                "seed {seed} ({cfg:?}) failed: {first}\n\
                 shrunk to {} steps: {why}\n\
                 keep it in REGRESSIONS as ({seed}, &{}),",
                short.len(),
                as_code(&short)
            );
            if !keep_going {
                panic!("{report}");
            }
            eprintln!("{report}");
            failures += 1;
        }
        if keep_going && (seed - start + 1).is_multiple_of(1000) {
            eprintln!("{} sequences, {failures} failed", seed - start + 1);
        }
    }
    assert_eq!(failures, 0, "sequences failed (see above)");
}

#[test]
fn n00201_regressions_stay_fixed() {
    for (seed, ops) in REGRESSIONS {
        if let Err(e) = run(*seed, ops) {
            panic!("regression ({seed}) fails again: {e}");
        }
    }
}
