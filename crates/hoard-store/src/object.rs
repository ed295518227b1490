//! A stored object: one response (one variant of one key), headers and body.
//!
//! ## Lifecycle
//!
//! | state | where | how it gets there |
//! |---|---|---|
//! | busy | a [`crate::busy::BusyBody`] owned by the fill | the origin answered with a storable response |
//! | complete | an `Arc<StoredObject>` in a tier | the fill finished the body and called `Store::insert` |
//! | updated | a new `Arc<StoredObject>` sharing the body | a 304 revalidation merged new headers (`with_headers`) |
//! | dead | dropped when the last reader lets go | evicted, replaced, purged or invalidated |
//!
//! Objects are immutable once complete: an update makes a new object that
//! shares the body (`Bytes` are reference counted), so a reader that holds an
//! object always sees one consistent response.

use std::sync::Arc;

use bytes::Bytes;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use http::{HeaderMap, StatusCode};

use crate::reader::FileBody;

/// Fixed per-object bookkeeping counted against the byte limit.
pub const OBJECT_OVERHEAD: u64 = 256;

/// Where an object's file is, for a head update after a 304: made by the
/// writer that publishes it and by a lookup, used by
/// [`crate::disk::DiskZone::update_head`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskRef {
    /// The zone's index in the store.
    pub zone: usize,
    /// The object id.
    pub id: u128,
    /// The write that made the file.
    pub serial: u64,
    /// The head slot in use (0 or 1) and its generation.
    pub slot: u8,
    /// Generation of the head in use.
    pub generation: u64,
    /// Size of a head slot.
    pub slot_len: u32,
}

/// The body of a stored object: chunks in memory, or a file read block by
/// block (never whole).
#[derive(Debug, Clone)]
pub enum ObjectBody {
    /// In memory.
    Chunks {
        /// The chunks, in order.
        chunks: Vec<Bytes>,
        /// Their total length.
        len: u64,
    },
    /// In a disk zone's file.
    File(Arc<FileBody>),
}

impl Default for ObjectBody {
    fn default() -> Self {
        ObjectBody::from_chunks(Vec::new())
    }
}

impl ObjectBody {
    /// A body from its chunks.
    pub fn from_chunks(chunks: Vec<Bytes>) -> ObjectBody {
        let len = chunks.iter().map(|c| c.len() as u64).sum();
        ObjectBody::Chunks { chunks, len }
    }

    /// The chunks, in order, when the body is in memory.
    pub fn chunks(&self) -> Option<&[Bytes]> {
        match self {
            ObjectBody::Chunks { chunks, .. } => Some(chunks),
            ObjectBody::File(_) => None,
        }
    }

    /// Total length in bytes.
    pub fn len(&self) -> u64 {
        match self {
            ObjectBody::Chunks { len, .. } => *len,
            ObjectBody::File(f) => f.len(),
        }
    }

    /// True for an empty body.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One complete stored response.
#[derive(Debug)]
pub struct StoredObject {
    /// The primary key text, compared on lookup so a digest collision can never
    /// serve another key's object.
    pub key: String,
    /// The `Vary` names of the response.
    pub vary: VaryNames,
    /// Response status.
    pub status: StatusCode,
    /// Stored header fields (hop-by-hop fields and `Set-Cookie` already removed).
    pub headers: HeaderMap,
    /// The instants needed for age calculation.
    pub times: StoredTimes,
    /// Where the lifetime came from.
    pub lifetime_source: LifetimeSource,
    /// Reuse rules (no-cache, must-revalidate, stale windows).
    pub rules: StoredRules,
    /// The body.
    pub body: ObjectBody,
    /// The object's file, when it is stored in a disk zone.
    pub disk: Option<DiskRef>,
    /// A copy this node keeps of an object another cluster member owns
    /// (held in the store's near tier, see [`crate::store`]).
    pub near: bool,
    /// The same representation in other content codings, made once when
    /// the object was stored (see `hoard_proxy::encode`): parts of this
    /// object, counted in its weight, purged and evicted with it.
    pub parts: Arc<[Part]>,
    /// Its coding is one hoard cannot decode and it varies on
    /// `Accept-Encoding` (`hoard_policy::encoding::coding_varies`): served
    /// only to a request that accepts that coding. Worked out once, from
    /// the stored fields, so that a hit need not look for the field: every
    /// object is made by [`StoredObject::new`] (new fields make a new
    /// object, see [`StoredObject::with_headers`]), and `headers` is not
    /// changed after it.
    pub coding_varies: bool,
    weight: u64,
    /// Hits counted (routes whose headers show `$cache_hits`).
    hits: std::sync::atomic::AtomicU64,
    /// What a layer above works out once from the body and keeps for the
    /// object's life (an ESI page's parsed template, see
    /// `hoard_proxy::esi`); set at most once.
    pub derived: std::sync::OnceLock<Arc<dyn std::any::Any + Send + Sync>>,
    /// What a layer above works out once from the stored fields and keeps
    /// for the object's life (the field lines an HTTP/1.1 hit writes as
    /// they are, see `hoard_proxy::pipeline::hit`); set at most once,
    /// counted in the weight whether it is set or not.
    pub fields_derived: std::sync::OnceLock<Box<dyn std::any::Any + Send + Sync>>,
}

/// The body in another content coding.
#[derive(Debug, Clone)]
pub struct Part {
    /// Its coding.
    pub coding: hoard_policy::encoding::Coding,
    /// The coded bytes: in memory, or a span of the object's file (see
    /// `crate::format::Head::layout`).
    pub body: ObjectBody,
}

impl Part {
    /// A part held in memory.
    pub fn in_memory(coding: hoard_policy::encoding::Coding, body: Bytes) -> Part {
        Part {
            coding,
            body: ObjectBody::from_chunks(if body.is_empty() {
                Vec::new()
            } else {
                vec![body]
            }),
        }
    }
}

impl StoredObject {
    /// Builds an object; its weight counts key, headers and body.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        key: String,
        vary: VaryNames,
        status: StatusCode,
        headers: HeaderMap,
        times: StoredTimes,
        lifetime_source: LifetimeSource,
        rules: StoredRules,
        body: ObjectBody,
    ) -> StoredObject {
        let headers = owned(headers);
        let weight = weigh(&key, &headers, body.len());
        let coding_varies = hoard_policy::encoding::coding_varies(&headers);
        StoredObject {
            key,
            vary,
            status,
            headers,
            times,
            lifetime_source,
            rules,
            body,
            disk: None,
            near: false,
            parts: Arc::from(Vec::new()),
            coding_varies,
            weight,
            hits: std::sync::atomic::AtomicU64::new(0),
            derived: std::sync::OnceLock::new(),
            fields_derived: std::sync::OnceLock::new(),
        }
    }

    /// Counts a hit; the hits so far, this one included.
    pub fn hit(&self) -> u64 {
        self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
    }

    /// The same object with `parts` (its body in other codings), weighed
    /// with them.
    pub fn with_parts(mut self, parts: Vec<Part>) -> StoredObject {
        self.weight = weigh(&self.key, &self.headers, self.body.len())
            + parts.iter().map(|p| p.body.len() + 32).sum::<u64>();
        self.parts = Arc::from(parts);
        self
    }

    /// The part in `coding`, if the object has one.
    pub fn part(&self, coding: hoard_policy::encoding::Coding) -> Option<&Part> {
        self.parts.iter().find(|p| p.coding == coding)
    }

    /// The same object, known to be stored at `disk`.
    pub fn with_disk(mut self, disk: Option<DiskRef>) -> StoredObject {
        self.disk = disk;
        self
    }

    /// The same object, as a near copy (see [`StoredObject::near`]).
    pub fn into_near(mut self) -> StoredObject {
        self.near = true;
        self
    }

    /// A copy with new headers and times (after a 304), sharing the body.
    pub fn with_headers(
        &self,
        headers: HeaderMap,
        times: StoredTimes,
        lifetime_source: LifetimeSource,
        rules: StoredRules,
    ) -> StoredObject {
        let mut o = StoredObject::new(
            self.key.clone(),
            self.vary.clone(),
            self.status,
            headers,
            times,
            lifetime_source,
            rules,
            self.body.clone(),
        )
        .with_disk(self.disk);
        o.near = self.near;
        // The same representation (a 304 keeps it): the same parts.
        if !self.parts.is_empty() {
            o = o.with_parts(self.parts.to_vec());
        }
        // The same body: what was worked out from it holds.
        if let Some(d) = self.derived.get() {
            let _ = o.derived.set(d.clone());
        }
        o
    }

    /// Bytes this object counts against the store's limit.
    pub fn weight(&self) -> u64 {
        self.weight
    }
}

/// The same header fields, each value in memory of its own. A parsed
/// response's values are slices of the connection's read buffer (up to
/// some 400 KiB, shared with the bodies that followed them): kept as they
/// are, one stored object's few hundred header bytes would hold that whole
/// buffer in memory for as long as the object is stored, unseen by the
/// store's byte limit.
fn owned(headers: HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(headers.len());
    let mut last = None;
    for (name, value) in headers {
        let name = match name {
            Some(n) => {
                last = Some(n.clone());
                n
            }
            None => match &last {
                Some(n) => n.clone(),
                None => continue,
            },
        };
        let mut v = http::HeaderValue::from_bytes(value.as_bytes()).unwrap_or(value.clone());
        v.set_sensitive(value.is_sensitive());
        out.append(name, v);
    }
    out
}

/// The weight of an object with this key, headers and body length.
pub fn weigh(key: &str, headers: &HeaderMap, body_len: u64) -> u64 {
    // Each field as the map holds it, and once more as the field line an
    // HTTP/1.1 hit may encode it into (`StoredObject::fields_derived`).
    let header_bytes: usize = headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 32 + (n.as_str().len() + v.len() + 4))
        .sum();
    OBJECT_OVERHEAD + key.len() as u64 + header_bytes as u64 + body_len
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stored object's header values are copies: none points into the
    /// buffer the response was parsed from (which it would keep alive).
    #[test]
    fn stored_header_values_do_not_hold_the_read_buffer() {
        let buffer = Bytes::from(vec![b'a'; 400 << 10]);
        let range = buffer.as_ptr() as usize..buffer.as_ptr() as usize + buffer.len();
        let mut headers = HeaderMap::new();
        for (name, at) in [
            ("etag", 0),
            ("x-one", 100),
            ("x-one", 200),
            ("set-cookie", 300),
        ] {
            let mut v = http::HeaderValue::from_maybe_shared(buffer.slice(at..at + 10)).unwrap();
            v.set_sensitive(name == "set-cookie");
            headers.append(name, v);
        }
        let obj = StoredObject::new(
            "k".into(),
            VaryNames(Vec::new()),
            StatusCode::OK,
            headers.clone(),
            StoredTimes {
                request_time: std::time::UNIX_EPOCH,
                response_time: std::time::UNIX_EPOCH,
                date: std::time::UNIX_EPOCH,
                age_value: None,
                lifetime: std::time::Duration::from_secs(1),
            },
            LifetimeSource::MaxAge,
            StoredRules {
                no_cache: false,
                no_stale: false,
                stale_while_revalidate: std::time::Duration::ZERO,
                stale_if_error: std::time::Duration::ZERO,
            },
            ObjectBody::default(),
        );
        assert_eq!(obj.headers, headers, "the same fields, in order");
        assert_eq!(obj.headers.get_all("x-one").iter().count(), 2);
        assert!(obj.headers["set-cookie"].is_sensitive());
        for v in obj.headers.values() {
            assert!(
                !range.contains(&(v.as_bytes().as_ptr() as usize)),
                "a value still in the read buffer"
            );
        }
    }
}
