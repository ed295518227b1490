//! Memory tier: byte limit, variants, removal.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use hoard_policy::cache_control::CacheControl;
use hoard_policy::freshness::{LifetimeSource, StoredTimes};
use hoard_policy::key::Digest;
use hoard_policy::reuse::StoredRules;
use hoard_policy::vary::VaryNames;
use hoard_store::object::{ObjectBody, StoredObject};
use hoard_store::{Lookup, MemoryStore as Store};
use http::{HeaderMap, StatusCode};

fn obj(key: &str, vary: &[&str], body_len: usize) -> Arc<StoredObject> {
    let mut h = HeaderMap::new();
    if !vary.is_empty() {
        h.insert("vary", vary.join(",").parse().unwrap());
    }
    let t = SystemTime::UNIX_EPOCH;
    Arc::new(StoredObject::new(
        key.to_string(),
        VaryNames::from_response(&h),
        StatusCode::OK,
        h,
        StoredTimes {
            request_time: t,
            response_time: t,
            date: t,
            age_value: None,
            lifetime: Duration::from_secs(60),
        },
        LifetimeSource::MaxAge,
        StoredRules::new(&CacheControl::default(), None, None),
        ObjectBody::from_chunks(vec![Bytes::from(vec![b'x'; body_len])]),
    ))
}

fn req(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut m = HeaderMap::new();
    for (k, v) in pairs {
        m.append(
            http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    m
}

#[test]
fn e00001_byte_limit_is_never_exceeded() {
    let store = Store::new(1 << 20, 64 << 10);
    for i in 0..2000u32 {
        let key = format!("k{i}");
        let _ = store.insert(
            Digest::of(key.as_bytes()),
            &req(&[]),
            obj(&key, &[], 1000 + (i as usize * 37) % 30_000),
        );
        assert!(
            store.weight() <= store.capacity(),
            "weight {} > capacity",
            store.weight()
        );
    }
    assert!(store.stats().evicted.load(Ordering::Relaxed) > 0);
    assert!(store.weight() > store.capacity() / 2, "the cache is used");
}

#[test]
fn e00002_objects_over_max_size_are_refused() {
    let store = Store::new(1 << 20, 10_000);
    let k = Digest::of(b"big");
    assert!(store.insert(k, &req(&[]), obj("big", &[], 20_000)).is_err());
    assert!(matches!(store.lookup(k, "big", &req(&[])), Lookup::UriMiss));
    assert_eq!(store.stats().rejected_too_large.load(Ordering::Relaxed), 1);
}

#[test]
fn k00001_variants_side_by_side_and_remove_all() {
    let store = Store::new(1 << 20, 64 << 10);
    let k = Digest::of(b"v");
    let gz = req(&[("accept-encoding", "gzip")]);
    let br = req(&[("accept-encoding", "br")]);
    store
        .insert(k, &gz, obj("v", &["accept-encoding"], 10))
        .unwrap();
    store
        .insert(k, &br, obj("v", &["accept-encoding"], 20))
        .unwrap();
    let Lookup::Hit(o) = store.lookup(k, "v", &gz) else {
        panic!("gzip variant")
    };
    assert_eq!(o.body.len(), 10);
    let Lookup::Hit(o) = store.lookup(k, "v", &br) else {
        panic!("br variant")
    };
    assert_eq!(o.body.len(), 20);
    assert!(matches!(
        store.lookup(k, "v", &req(&[])),
        Lookup::VaryMiss(_)
    ));
    assert!(
        matches!(store.lookup(k, "other", &gz), Lookup::VaryMiss(_)),
        "key text is compared"
    );
    assert_eq!(store.remove_all(k), 2);
    assert!(matches!(store.lookup(k, "v", &gz), Lookup::UriMiss));
}

#[test]
fn k00002_variants_of_a_removed_index_never_come_back() {
    let store = Store::new(1 << 20, 64 << 10);
    let k = Digest::of(b"v");
    let gz = req(&[("accept-encoding", "gzip")]);
    let br = req(&[("accept-encoding", "br")]);
    store
        .insert(k, &gz, obj("v", &["accept-encoding"], 10))
        .unwrap();
    // The index alone goes (as eviction could do); the gzip object stays in memory.
    store.remove_index_for_tests(k);
    store
        .insert(k, &br, obj("v", &["accept-encoding"], 20))
        .unwrap();
    assert!(
        matches!(store.lookup(k, "v", &gz), Lookup::VaryMiss(_)),
        "an object from an older index is not served"
    );
    assert!(matches!(store.lookup(k, "v", &br), Lookup::Hit(_)));
}

#[test]
fn e00003_update_replaces_only_the_revalidated_object() {
    let store = Store::new(1 << 20, 64 << 10);
    let k = Digest::of(b"u");
    let old = obj("u", &[], 10);
    store.insert(k, &req(&[]), old.clone()).unwrap();
    let newer = obj("u", &[], 30);
    store.insert(k, &req(&[]), newer).unwrap();
    store.update(k, &req(&[]), &old, obj("u", &[], 11));
    let Lookup::Hit(o) = store.lookup(k, "u", &req(&[])) else {
        panic!()
    };
    assert_eq!(
        o.body.len(),
        30,
        "a newer response is not overwritten by a late 304 refresh"
    );
}

#[test]
fn e00004_a_hot_object_survives_a_scan_of_one_hit_wonders() {
    // S3-FIFO: a scan of objects seen once (a crawler, a backup) three times the
    // size of the cache does not flush an object that was in use, as plain LRU
    // would: one-hit wonders are evicted from the small queue first.
    let store = Store::new(1 << 20, 64 << 10);
    for i in 0..200u32 {
        let key = format!("warm{i}");
        store
            .insert(
                Digest::of(key.as_bytes()),
                &req(&[]),
                obj(&key, &[], 10_000),
            )
            .unwrap();
    }
    let hot = Digest::of(b"hot");
    store
        .insert(hot, &req(&[]), obj("hot", &[], 10_000))
        .unwrap();
    for _ in 0..3 {
        assert!(matches!(
            store.lookup(hot, "hot", &req(&[])),
            Lookup::Hit(_)
        ));
    }
    for i in 0..300u32 {
        let key = format!("scan{i}");
        store
            .insert(
                Digest::of(key.as_bytes()),
                &req(&[]),
                obj(&key, &[], 10_000),
            )
            .unwrap();
    }
    assert!(
        matches!(store.lookup(hot, "hot", &req(&[])), Lookup::Hit(_)),
        "the hot object survived a 3 MB scan of a 1 MB cache"
    );
}
