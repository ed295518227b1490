//! The model test's generated input: the test clock, the seeded random
//! source, the random configuration (zones, directories, tiers) and the
//! operations of a sequence, with their generator.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use hoard_policy::clock::Clock;

use crate::KEYS;

// ---------------------------------------------------------------- clock

#[derive(Debug)]
pub(crate) struct TestClock(pub(crate) AtomicU64);

impl Clock for TestClock {
    fn now(&self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_nanos(self.0.load(Ordering::Acquire))
    }
}

impl TestClock {
    pub(crate) fn advance(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::AcqRel);
    }
}

// ---------------------------------------------------------------- random

/// xorshift64*: small, seeded, reproducible.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    pub(crate) fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len() as u64) as usize]
    }
}

// ---------------------------------------------------------------- config

#[derive(Debug, Clone, Copy)]
pub(crate) struct Cfg {
    pub(crate) zones: usize,
    /// The first zone spreads over two directories.
    pub(crate) two_dirs: bool,
    pub(crate) zone_size: u64,
    pub(crate) memory: u64,
    /// The near tier's size (0: none).
    pub(crate) near: u64,
}

impl Cfg {
    pub(crate) fn from_seed(seed: u64) -> Cfg {
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
pub(crate) enum Op {
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

pub(crate) fn gen_op(r: &mut Rng, cfg: &Cfg) -> Op {
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
