//! What filters share within one hoard: shared data (`proxy_get_shared_data`,
//! `proxy_set_shared_data`: a key-value map with compare-and-swap, common
//! to every filter and VM, kept across reloads, gone at a restart), and
//! each plugin's metrics (`proxy_define_metric` and the rest), which
//! `/metrics` shows by filter and name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::OnceLock;

use parking_lot::Mutex;

/// A shared value and its CAS number (1 for a new key, +1 per change).
type Shared = HashMap<Vec<u8>, (Vec<u8>, u32)>;

fn shared() -> &'static Mutex<Shared> {
    static SHARED: OnceLock<Mutex<Shared>> = OnceLock::new();
    SHARED.get_or_init(Mutex::default)
}

/// The value of `key` and its CAS number.
pub(crate) fn get(key: &[u8]) -> Option<(Vec<u8>, u32)> {
    shared().lock().get(key).cloned()
}

/// Sets `key` when `cas` is 0 or the key's current number; false on a
/// mismatch.
pub(crate) fn set(key: &[u8], value: Vec<u8>, cas: u32) -> bool {
    let mut m = shared().lock();
    match m.get_mut(key) {
        Some((v, n)) => {
            if cas != 0 && cas != *n {
                return false;
            }
            *v = value;
            *n = n.wrapping_add(1).max(1);
            true
        }
        None if cas == 0 || cas == 1 => {
            m.insert(key.to_vec(), (value, 1));
            true
        }
        None => false,
    }
}

/// A metric's kind (`proxy_metric_type_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricKind {
    /// Only goes up (`proxy_increment_metric` with a positive offset).
    Counter,
    /// Set (`proxy_record_metric`) or moved (`proxy_increment_metric`).
    Gauge,
    /// Values recorded: `/metrics` shows their sum and count.
    Histogram,
}

impl MetricKind {
    pub(crate) fn from_raw(n: i32) -> Option<MetricKind> {
        match n {
            0 => Some(MetricKind::Counter),
            1 => Some(MetricKind::Gauge),
            2 => Some(MetricKind::Histogram),
            _ => None,
        }
    }
}

/// One metric a filter defined.
#[derive(Debug)]
pub struct Metric {
    /// Its name as the filter gave it.
    pub name: String,
    /// Its kind.
    pub kind: MetricKind,
    /// A counter's or gauge's value; a histogram's sum.
    pub value: AtomicI64,
    /// A histogram's count of values.
    pub count: AtomicI64,
}

/// A plugin's metrics, shared by its VMs (ids are indices).
#[derive(Debug, Default)]
pub struct Metrics {
    all: Mutex<Vec<std::sync::Arc<Metric>>>,
}

/// Most metrics one plugin may define (each is a line in `/metrics`).
pub const MAX_METRICS: usize = 1000;

impl Metrics {
    /// The id of `name` (defined now if new); `None` past `MAX_METRICS` or
    /// for the same name with another kind.
    pub(crate) fn define(&self, kind: MetricKind, name: String) -> Option<u32> {
        let mut all = self.all.lock();
        if let Some(i) = all.iter().position(|m| m.name == name) {
            return (all[i].kind == kind).then_some(i as u32);
        }
        if all.len() >= MAX_METRICS {
            return None;
        }
        all.push(std::sync::Arc::new(Metric {
            name,
            kind,
            value: AtomicI64::new(0),
            count: AtomicI64::new(0),
        }));
        Some(all.len() as u32 - 1)
    }

    pub(crate) fn get(&self, id: i32) -> Option<std::sync::Arc<Metric>> {
        self.all.lock().get(usize::try_from(id).ok()?).cloned()
    }

    /// Every metric, in definition order.
    pub fn snapshot(&self) -> Vec<std::sync::Arc<Metric>> {
        self.all.lock().clone()
    }
}

impl Metric {
    /// `proxy_increment_metric`: a counter never goes down.
    pub(crate) fn increment(&self, by: i64) -> bool {
        match self.kind {
            MetricKind::Counter if by < 0 => false,
            MetricKind::Histogram => false,
            _ => {
                self.value.fetch_add(by, Ordering::Relaxed);
                true
            }
        }
    }

    /// `proxy_record_metric`: a gauge's value, a histogram's observation.
    pub(crate) fn record(&self, v: i64) -> bool {
        match self.kind {
            MetricKind::Gauge => self.value.store(v, Ordering::Relaxed),
            MetricKind::Histogram => {
                self.value.fetch_add(v, Ordering::Relaxed);
                self.count.fetch_add(1, Ordering::Relaxed);
            }
            MetricKind::Counter => return false,
        }
        true
    }
}
