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

mod gen;
mod keys;
mod world;

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::gen::{gen_op, Cfg, Op, Rng, TestClock};
use crate::world::{Check, World};

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
