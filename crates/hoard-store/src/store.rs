//! The store: a memory tier in front of disk zones, behind one interface.
//!
//! ## Model
//!
//! The pipeline asks for `lookup`, a disk writer for a fill, `insert`
//! (memory), `update` (after a 304) and `remove_all`; it never learns which
//! tier or directory holds an object.
//!
//! * **Lookup**: the memory tier first, then each zone's index (in memory;
//!   only a hit touches the disk, on the zone's pool).
//! * **Fills**: with zones, a fill writes through to the zone its placement
//!   chose while clients stream it; the memory tier is not touched, so a scan
//!   of one-hit objects cannot flush the hot set. Without zones, a fill is
//!   inserted into the memory tier as before.
//! * **Admission**: an object read from disk enters the memory tier on its
//!   second disk hit (when it fits there).
//! * **Near tier** (in a cluster): copies of objects another member owns,
//!   in a memory tier of their own byte limit (`insert_near`), so that the
//!   objects this node owns are never evicted for them; the caller decides
//!   what is admitted (by frequency, see `hoard_proxy::cluster::near`).
//!   Looked up after the memory tier, before the zones.
//! * **Consistency**: a new object supersedes every older copy of its key
//!   in every tier: publishing a disk copy removes the key from the memory
//!   tier, the near tier and the other zones, and a memory insert removes it
//!   from the near tier and the zones (a near insert: from the memory tier
//!   and the zones), so no tier that is asked first can serve an older version.
//!   (Variants of one key stored in different tiers lose each other: a
//!   miss, never a wrong answer.)
//! * **Purges and invalidations**: every store (memory insert, disk
//!   publish) checks the catalogue's purge log since its fill started and
//!   inserts under the catalogue's admission gate, so an object a purge
//!   selected never comes back (see [`crate::catalog`]).
//! * **Bans** (regex purges): checked at every hit while one is pending,
//!   and swept in the background (see [`crate::bans`]); purges,
//!   invalidations and bans are in `purge`.

mod purge;

use std::io;
use std::sync::Arc;

use hoard_policy::clock::Clock;
use hoard_policy::key::Digest;
use http::HeaderMap;

use crate::bans::{Banned, Bans};
use crate::catalog::{Catalog, Raced};
use crate::disk::writer::{Abandoned, DiskWriter};
use crate::disk::zone::Rewrite;
use crate::disk::{DiskZone, ZoneConfig, ZoneLookup};
use crate::events::{StoreEvent, StoreEvents};
use crate::format::Head;
use crate::memory::{InsertError, Lookup, MemoryStore};
use crate::object::DiskRef;
use crate::object::{ObjectBody, Part, StoredObject};

/// The store. See the module docs.
#[derive(Debug)]
pub struct Store {
    memory: Option<MemoryStore>,
    /// Copies of objects other cluster members own (see the module docs).
    near: Option<MemoryStore>,
    zones: Vec<Arc<DiskZone>>,
    max_object: u64,
    catalog: Arc<Catalog>,
    bans: Bans,
    events: Arc<dyn StoreEvents>,
}

impl Store {
    /// A memory tier only.
    pub fn memory_only(capacity: u64, max_object: u64) -> Store {
        let memory = MemoryStore::new(capacity, max_object);
        Store {
            max_object: memory.max_object(),
            memory: Some(memory),
            near: None,
            zones: Vec::new(),
            catalog: Arc::default(),
            bans: Bans::default(),
            events: Arc::new(crate::events::NoEvents),
        }
    }

    /// A memory tier of `memory_size` bytes (none when 0) in front of disk
    /// zones. Call [`Store::start`] on a runtime to load the zones.
    ///
    /// # Errors
    /// When a zone directory cannot be created.
    pub fn new(
        memory_size: u64,
        max_object: u64,
        zones: Vec<ZoneConfig>,
        events: Arc<dyn StoreEvents>,
        clock: Arc<dyn Clock>,
    ) -> io::Result<Store> {
        if zones.is_empty() && memory_size > 0 {
            let mut s = Store::memory_only(memory_size, max_object);
            s.events = events;
            return Ok(s);
        }
        let memory = (memory_size > 0).then(|| MemoryStore::new(memory_size, max_object));
        let catalog = Arc::<Catalog>::default();
        let zones = zones
            .into_iter()
            .enumerate()
            .map(|(i, z)| DiskZone::open(z, i, events.clone(), clock.clone(), catalog.clone()))
            .collect::<io::Result<Vec<_>>>()?;
        let largest_zone = zones
            .iter()
            .map(|z| z.config().max_object.min(z.config().max_size))
            .max()
            .unwrap_or(0);
        let max_object = if zones.is_empty() {
            memory.as_ref().map_or(0, MemoryStore::max_object)
        } else {
            max_object.min(largest_zone)
        };
        Ok(Store {
            memory,
            near: None,
            zones,
            max_object,
            catalog,
            bans: Bans::default(),
            events,
        })
    }

    /// The same store with a near tier of `capacity` bytes (none when 0).
    pub fn with_near(mut self, capacity: u64) -> Store {
        self.near = (capacity > 0).then(|| MemoryStore::new(capacity, self.max_object));
        self
    }

    /// The near tier, in a cluster.
    pub fn near(&self) -> Option<&MemoryStore> {
        self.near.as_ref()
    }

    /// Starts each zone's loader (and inactive sweep).
    pub fn start(&self) {
        for z in &self.zones {
            z.start();
        }
    }

    /// The memory tier, when there is one.
    pub fn memory(&self) -> Option<&MemoryStore> {
        self.memory.as_ref()
    }

    /// The disk zones, in configuration order.
    pub fn zones(&self) -> &[Arc<DiskZone>] {
        &self.zones
    }

    /// A zone by name.
    pub fn zone(&self, name: &str) -> Option<&Arc<DiskZone>> {
        self.zones.iter().find(|z| z.name() == name)
    }

    /// True when objects go to disk zones (fills write through).
    pub fn has_zones(&self) -> bool {
        !self.zones.is_empty()
    }

    /// The largest object any tier stores.
    pub fn max_object(&self) -> u64 {
        self.max_object
    }

    /// Finds the variant of `primary` that matches a request, memory first.
    /// A hit a pending ban selects is removed (a miss) or, for a soft ban,
    /// made stale first (see [`crate::bans`]); that check adds no await
    /// here (a hit's future keeps its size).
    pub async fn lookup(&self, primary: Digest, key_text: &str, request: &HeaderMap) -> Lookup {
        let mut result = Lookup::UriMiss;
        if let Some(m) = &self.memory {
            match m.lookup(primary, key_text, request) {
                Lookup::Hit(o) => return self.screen(m, primary, key_text, request, o),
                other => result = other,
            }
        }
        if let Some(n) = &self.near {
            match n.lookup(primary, key_text, request) {
                Lookup::Hit(o) => return self.screen(n, primary, key_text, request, o),
                Lookup::VaryMiss(names) if matches!(result, Lookup::UriMiss) => {
                    result = Lookup::VaryMiss(names);
                }
                _ => {}
            }
        }
        if self.zones.is_empty() {
            return result;
        }
        // Boxed: the zones' look-ups wait on the I/O pool and take room that
        // a memory hit (the caller's future holds this one) should not carry.
        Box::pin(self.lookup_zones(primary, key_text, request, result)).await
    }

    /// What a pending ban asks of this hit, if anything (one relaxed load
    /// when no ban is pending).
    #[inline]
    fn banned(&self, o: &StoredObject) -> Option<Banned> {
        match self.bans.check(&o.key, &o.headers, o.times.request_time)? {
            // Once made stale at the ban's time it is left as it is.
            Banned::Stale(at) if o.times.lifetime <= o.times.current_age(at) => None,
            b => Some(b),
        }
    }

    /// A hit in memory tier `tier`, unless a pending ban selects it: then
    /// every copy of the key goes (a miss), or this tier's is made stale
    /// (a soft ban).
    fn screen(
        &self,
        tier: &MemoryStore,
        primary: Digest,
        key_text: &str,
        request: &HeaderMap,
        o: Arc<StoredObject>,
    ) -> Lookup {
        match self.banned(&o) {
            None => Lookup::Hit(o),
            Some(b) => {
                self.events.event("", StoreEvent::BannedAtLookup);
                match b {
                    Banned::Remove => self.remove_banned(primary),
                    Banned::Stale(at) => {
                        tier.mark_stale(primary, at);
                        tier.lookup(primary, key_text, request)
                    }
                }
            }
        }
    }

    /// Removes every copy of a key a ban caught at lookup.
    fn remove_banned(&self, primary: Digest) -> Lookup {
        self.remove_all(primary);
        self.catalog.forget(&[primary.0]);
        Lookup::UriMiss
    }

    async fn lookup_zones(
        &self,
        primary: Digest,
        key_text: &str,
        request: &HeaderMap,
        mut result: Lookup,
    ) -> Lookup {
        for (i, z) in self.zones.iter().enumerate() {
            match z.lookup(primary.0, key_text, request).await {
                ZoneLookup::Hit(obj, repeat) => {
                    let (obj, repeat, z) = self
                        .newest(primary, key_text, request, (obj, repeat, i))
                        .await;
                    match self.banned(&obj) {
                        None => {}
                        Some(b) => {
                            self.events.event("", StoreEvent::BannedAtLookup);
                            let Banned::Stale(at) = b else {
                                return self.remove_banned(primary);
                            };
                            z.mark_stale(primary.0, at).await;
                            return match z.lookup(primary.0, key_text, request).await {
                                ZoneLookup::Hit(o, _) => Lookup::Hit(o),
                                _ => Lookup::UriMiss,
                            };
                        }
                    }
                    if repeat {
                        if let Some(o) = self.promote(primary, request, &obj, z).await {
                            return Lookup::Hit(o);
                        }
                    }
                    return Lookup::Hit(obj);
                }
                ZoneLookup::VaryMiss(names) => {
                    if matches!(result, Lookup::UriMiss) {
                        result = Lookup::VaryMiss(names);
                    }
                }
                ZoneLookup::Miss => {}
            }
        }
        result
    }

    /// The newest of the copies the zones hold for a key, from the one found
    /// in zone `first` on: a later zone may hold a copy too when a restart
    /// (or a crash) came between a new version's publish there and the old
    /// copy's removal here. The newer response wins and the older copy
    /// goes; with one zone, or no duplicate, this is one index look-up per
    /// later zone.
    async fn newest<'a>(
        &'a self,
        primary: Digest,
        key_text: &str,
        request: &HeaderMap,
        (mut obj, mut repeat, mut at): (Arc<StoredObject>, bool, usize),
    ) -> (Arc<StoredObject>, bool, &'a DiskZone) {
        for (j, other) in self.zones.iter().enumerate().skip(at + 1) {
            if !other.knows(primary.0) {
                continue;
            }
            if let ZoneLookup::Hit(o, r) = other.lookup(primary.0, key_text, request).await {
                if o.times.response_time > obj.times.response_time {
                    self.zones[at].remove_all(primary.0);
                    (obj, repeat, at) = (o, r, j);
                } else {
                    other.remove_all(primary.0);
                }
            }
        }
        (obj, repeat, &self.zones[at])
    }

    /// Admits an object read from disk to the memory tier (its body read whole, checked).
    async fn promote(
        &self,
        primary: Digest,
        request: &HeaderMap,
        obj: &Arc<StoredObject>,
        zone: &DiskZone,
    ) -> Option<Arc<StoredObject>> {
        let memory = self.memory.as_ref()?;
        if obj.weight() > memory.max_object() {
            return None;
        }
        let chunks = in_memory(&obj.body).await?;
        let mut parts = Vec::with_capacity(obj.parts.len());
        for p in obj.parts.iter() {
            // One chunk: a hit sends a part without walking chunks.
            let whole: Vec<u8> = in_memory(&p.body).await?.concat();
            parts.push(Part::in_memory(p.coding, whole.into()));
        }
        let mut o = StoredObject::new(
            obj.key.clone(),
            obj.vary.clone(),
            obj.status,
            obj.headers.clone(),
            obj.times,
            obj.lifetime_source,
            obj.rules,
            ObjectBody::from_chunks(chunks),
        )
        .with_disk(obj.disk);
        if !parts.is_empty() {
            o = o.with_parts(parts);
        }
        let o = Arc::new(o);
        // Purged or replaced while its body was read: not admitted.
        let r = obj.disk?;
        if !zone.is_current(r.id, r.serial) {
            return None;
        }
        memory.insert(primary, request, o.clone()).ok()?;
        if !zone.is_current(r.id, r.serial) {
            // A purge or a new copy came between the check and the insert.
            memory.remove_all(primary);
            return None;
        }
        zone.events.event(zone.name(), StoreEvent::MemoryPromotion);
        Some(o)
    }

    /// A writer for a new object in zone `zone`, or `None` (no such zone, no
    /// room, loading, too large): the fill then goes on without a disk copy.
    pub async fn disk_writer(
        &self,
        zone: usize,
        primary: Digest,
        variant: Digest,
        expected_len: Option<u64>,
        head_hint: usize,
    ) -> Option<DiskWriter> {
        self.zones
            .get(zone)?
            .writer(primary.0, variant.0, expected_len, head_hint)
            .await
    }

    /// Completes a disk write and publishes the object, unless a purge
    /// since `purge_epoch` (the catalogue's epoch when the fill started)
    /// selects it; the object then supersedes the key's copies in the
    /// memory tier and the other zones. It runs to its end even if the
    /// caller stops waiting (a fill that gives up on a slow disk): the
    /// object is then published and superseding, or gone, never half-way.
    ///
    /// # Errors
    /// When the copy was given up or purged (nothing is published).
    pub async fn finish_disk(
        self: &Arc<Self>,
        writer: DiskWriter,
        primary: Digest,
        head: &Head,
        purge_epoch: u64,
    ) -> Result<DiskRef, Abandoned> {
        self.commit(writer, primary, head, purge_epoch, None).await
    }

    async fn commit(
        self: &Arc<Self>,
        writer: DiskWriter,
        primary: Digest,
        head: &Head,
        purge_epoch: u64,
        replaces: Option<DiskRef>,
    ) -> Result<DiskRef, Abandoned> {
        let (me, head) = (self.clone(), head.clone());
        tokio::spawn(async move {
            let zone = writer.zone_number();
            let r = writer
                .finish_replacing(&head, purge_epoch, replaces)
                .await?;
            me.supersede(primary, Tier::Zone(zone));
            me.catalogue(primary, &head.key, &head.headers);
            Ok(r)
        })
        .await
        .unwrap_or(Err(Abandoned::Io))
    }

    /// Writes an object with its parts (see `hoard_proxy::encode`) to zone
    /// `zone` as one new file: `body` (the stored bytes), then each part's
    /// bytes, with `head` naming their codings and lengths. With
    /// `replaces`, the file takes the place of that copy only if it is
    /// still the one stored with the same head ([`Abandoned::Superseded`]
    /// otherwise); a purge since `purge_epoch` stores nothing. The object
    /// then supersedes every other copy, as a fill's does.
    ///
    /// # Errors
    /// When nothing was stored (the reasons of [`Store::finish_disk`]).
    #[allow(clippy::too_many_arguments)]
    pub async fn store_with_parts(
        self: &Arc<Self>,
        zone: usize,
        (primary, variant): (Digest, Digest),
        head: &Head,
        body: &[bytes::Bytes],
        parts: &[Part],
        purge_epoch: u64,
        replaces: Option<DiskRef>,
    ) -> Result<DiskRef, Abandoned> {
        if parts.iter().any(|p| p.body.chunks().is_none()) {
            // Parts to write are made in memory; a file's span is not one.
            return Err(Abandoned::Io);
        }
        let mut head = head.clone();
        head.parts = parts.iter().map(|p| (p.coding, p.body.len())).collect();
        let len = body.iter().map(|c| c.len() as u64).sum::<u64>()
            + parts.iter().map(|p| p.body.len()).sum::<u64>();
        let Some(mut w) = self
            .disk_writer(zone, primary, variant, Some(len), head.encode().len())
            .await
        else {
            return Err(Abandoned::NoRoom);
        };
        let part_chunks = parts
            .iter()
            .flat_map(|p| p.body.chunks().unwrap_or_default());
        for c in body.iter().chain(part_chunks) {
            w.write(c.clone()).await?;
        }
        self.commit(w, primary, &head, purge_epoch, replaces).await
    }

    /// Removes the copies of `primary` that a new object just stored in
    /// `stored_in` replaces.
    fn supersede(&self, primary: Digest, stored_in: Tier) {
        if stored_in != Tier::Memory {
            if let Some(m) = &self.memory {
                m.remove_all(primary);
            }
        }
        if stored_in != Tier::Near {
            if let Some(n) = &self.near {
                n.remove_all(primary);
            }
        }
        for (i, z) in self.zones.iter().enumerate() {
            if stored_in != Tier::Zone(i) {
                z.remove_all(primary.0);
            }
        }
    }

    /// Stores an object in the memory tier (the store without zones, or a
    /// fill without a disk copy), unless a purge since `purge_epoch` (the
    /// catalogue's epoch when the fill started) selects it. Older copies of
    /// the key in the zones go.
    ///
    /// # Errors
    /// When there is no memory tier, the object is too large for it, or a
    /// purge selected it.
    pub fn insert(
        &self,
        primary: Digest,
        request: &HeaderMap,
        obj: Arc<StoredObject>,
        purge_epoch: u64,
    ) -> Result<(), InsertError> {
        self.insert_in(Tier::Memory, primary, request, obj, purge_epoch)
    }

    /// Stores a copy of an object another cluster member owns in the near
    /// tier, as [`Store::insert`] does in the memory tier; older copies of
    /// the key in the memory tier and the zones go.
    ///
    /// # Errors
    /// As [`Store::insert`] (`NoTier`: there is no near tier).
    pub fn insert_near(
        &self,
        primary: Digest,
        request: &HeaderMap,
        obj: Arc<StoredObject>,
        purge_epoch: u64,
    ) -> Result<(), InsertError> {
        self.insert_in(Tier::Near, primary, request, obj, purge_epoch)
    }

    fn insert_in(
        &self,
        tier: Tier,
        primary: Digest,
        request: &HeaderMap,
        obj: Arc<StoredObject>,
        purge_epoch: u64,
    ) -> Result<(), InsertError> {
        let m = match tier {
            Tier::Near => self.near.as_ref(),
            _ => self.memory.as_ref(),
        };
        let Some(m) = m else {
            return Err(InsertError::NoTier);
        };
        {
            let _gate = self.catalog.admit();
            let raced = self
                .catalog
                .purged_since(purge_epoch, &obj.key, &obj.headers, Raced::Hard);
            if raced != Raced::No {
                return Err(InsertError::Purged);
            }
            m.insert(primary, request, obj.clone())?;
            self.catalog.add(primary.0, &obj.key, &obj.headers);
        }
        self.supersede(primary, tier);
        self.catalogue(primary, &obj.key, &obj.headers);
        Ok(())
    }

    /// Replaces `old` by its 304-refreshed copy in memory (if `old` is still
    /// there) and rewrites its head on disk (the body stays).
    pub async fn update(
        &self,
        primary: Digest,
        request: &HeaderMap,
        old: &Arc<StoredObject>,
        obj: Arc<StoredObject>,
    ) {
        self.refresh(primary, request, old, obj, self.catalog.epoch())
            .await;
    }

    /// As [`Store::update`], for a 304 whose request left at purge epoch
    /// `purge_epoch` (the catalogue's): unless a purge since then selects
    /// the object. A purge wins over a revalidation it raced: a soft one
    /// leaves the object stale (the next request revalidates again), a hard
    /// one removed it. The check and each tier's update are one step under
    /// the admission gate (see [`crate::catalog`]). Returns false when a
    /// purge won (nothing was refreshed).
    pub async fn refresh(
        &self,
        primary: Digest,
        request: &HeaderMap,
        old: &Arc<StoredObject>,
        obj: Arc<StoredObject>,
        purge_epoch: u64,
    ) -> bool {
        {
            let _gate = self.catalog.admit();
            let purged = |h: &HeaderMap| {
                self.catalog
                    .purged_since(purge_epoch, &obj.key, h, Raced::Hard)
            };
            if purged(&old.headers) != Raced::No || purged(&obj.headers) != Raced::No {
                return false;
            }
            if let Some(m) = &self.memory {
                m.update(primary, request, old, obj.clone());
            }
            if let Some(n) = self.near.as_ref().filter(|_| old.near) {
                n.update(primary, request, old, obj.clone());
            }
            self.catalog.add(primary.0, &obj.key, &obj.headers);
        }
        self.catalogue(primary, &obj.key, &obj.headers);
        let Some(r) = obj.disk else {
            return true;
        };
        let Some(z) = self.zones.get(r.zone) else {
            return true;
        };
        let rewrite = z
            .refresh_head(r, &head_of(&obj), purge_epoch, &old.headers)
            .await;
        rewrite != Rewrite::Purged
    }

    /// Removes every variant stored under `primary`, in every tier. Returns
    /// how many objects went (a memory copy of a disk object is the same
    /// object: with zones, the memory tier only holds such copies).
    pub fn remove_all(&self, primary: Digest) -> usize {
        let in_memory = self.remove_in_memory(primary);
        let on_disk: usize = self.zones.iter().map(|z| z.remove_all(primary.0)).sum();
        in_memory.max(on_disk)
    }

    /// Removes `primary` from the memory and near tiers (a key is in one
    /// of them at most). Returns how many objects went.
    fn remove_in_memory(&self, primary: Digest) -> usize {
        self.memory.as_ref().map_or(0, |m| m.remove_all(primary))
            + self.near.as_ref().map_or(0, |n| n.remove_all(primary))
    }

    /// The catalogue of stored keys and tags.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    fn catalogue(&self, primary: Digest, key: &str, headers: &HeaderMap) {
        if self.catalog.add(primary.0, key, headers) {
            let n = self.catalog.sweep(|p| self.holds(Digest(p)));
            tracing::debug!(dropped = n, "catalogue swept");
        }
    }

    /// True when some tier holds an object (or variants) of `primary`.
    pub fn holds(&self, primary: Digest) -> bool {
        self.memory.as_ref().is_some_and(|m| m.holds(primary))
            || self.near.as_ref().is_some_and(|n| n.holds(primary))
            || self.zones.iter().any(|z| z.knows(primary.0))
    }

    /// Bytes held by the memory tier.
    pub fn weight(&self) -> u64 {
        self.memory.as_ref().map_or(0, MemoryStore::weight)
    }
}

/// A stored body's bytes in memory of their own: copied (an inline body is
/// a slice of a whole first read) or read whole from its file, checked.
async fn in_memory(body: &ObjectBody) -> Option<Vec<bytes::Bytes>> {
    match body {
        ObjectBody::Chunks { chunks, .. } => Some(
            chunks
                .iter()
                .map(|c| bytes::Bytes::copy_from_slice(c))
                .collect(),
        ),
        ObjectBody::File(f) => f.read_all().await.ok(),
    }
}

/// Where a new object went (see `Store::supersede`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Memory,
    Near,
    Zone(usize),
}

/// The head of a stored object, for its file.
pub fn head_of(obj: &StoredObject) -> Head {
    Head {
        key: obj.key.clone(),
        vary: obj.vary.clone(),
        status: obj.status,
        headers: obj.headers.clone(),
        times: obj.times,
        lifetime_source: obj.lifetime_source,
        rules: obj.rules,
        parts: obj.parts.iter().map(|p| (p.coding, p.body.len())).collect(),
    }
}
