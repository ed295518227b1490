//! The event log of one test case.
//!
//! Origins, clients, barriers, the clock and the proxy glue append one line per
//! event (`origin s1: rx GET /a HTTP/1.1`, `client c1: rx 200 OK`, ...), each
//! stamped with the real time since the test started. The log is printed only
//! when a case fails (when the [`Test`](crate::Test) is dropped during a panic),
//! or always when `HOARD_TEST_VERBOSE=1` (run with `--nocapture` to see it).

use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// A shared, timestamped event log. Clones append to the same log.
#[derive(Clone)]
pub struct Transcript {
    inner: Arc<Inner>,
}

struct Inner {
    name: String,
    start: Instant,
    events: Mutex<Vec<Event>>,
    /// Number of events already included in a panic message.
    shown: AtomicUsize,
}

struct Event {
    at: Duration,
    source: String,
    text: String,
}

impl Transcript {
    /// An empty log for the case `name`.
    pub fn new(name: &str) -> Self {
        // Real elapsed time for the log's timestamps, not cache time.
        #[allow(clippy::disallowed_methods)]
        let start = Instant::now();
        let inner = Inner {
            name: name.to_owned(),
            start,
            events: Mutex::new(Vec::new()),
            shown: AtomicUsize::new(0),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Appends an event. `source` names the actor (`"origin s1"`, `"client c1"`,
    /// `"proxy v1"`); `event` may span several lines.
    pub fn log(&self, source: &str, event: impl fmt::Display) {
        let at = self.inner.start.elapsed();
        let text = event.to_string();
        self.inner.events.lock().push(Event {
            at,
            source: source.to_owned(),
            text,
        });
    }

    /// The number of events logged so far.
    pub fn len(&self) -> usize {
        self.inner.events.lock().len()
    }

    /// Whether nothing was logged yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every event as `"source: text"`, without timestamps.
    pub fn events(&self) -> Vec<String> {
        self.inner
            .events
            .lock()
            .iter()
            .map(|e| format!("{}: {}", e.source, e.text))
            .collect()
    }

    /// The whole log, one timestamped event per line.
    pub fn render(&self) -> String {
        self.render_from(0)
    }

    /// The whole log for a panic message; marks it as shown so that the
    /// [`Test`](crate::Test) does not print it a second time.
    pub(crate) fn render_for_panic(&self) -> String {
        let events = self.inner.events.lock();
        self.inner.shown.store(events.len(), Ordering::SeqCst);
        render_events(&self.inner.name, &events, 0)
    }

    /// Prints the log to stderr: all of it, or only what no panic message showed.
    pub(crate) fn print(&self, only_unshown: bool) {
        let from = if only_unshown {
            self.inner.shown.load(Ordering::SeqCst)
        } else {
            0
        };
        if from > 0 && from >= self.len() {
            return;
        }
        eprintln!("{}", self.render_from(from));
    }

    fn render_from(&self, from: usize) -> String {
        render_events(&self.inner.name, &self.inner.events.lock(), from)
    }
}

fn render_events(name: &str, events: &[Event], from: usize) -> String {
    let mut out = match from {
        0 => format!("---- transcript {name} ----\n"),
        _ => format!("---- transcript {name} (continued from event {from}) ----\n"),
    };
    for e in events.iter().skip(from) {
        let mut lines = e.text.lines();
        let first = lines.next().unwrap_or("");
        let _ = writeln!(out, "{:>9.4} {}: {}", e.at.as_secs_f64(), e.source, first);
        for line in lines {
            let _ = writeln!(out, "{:>9} {:w$}  {}", "", "", line, w = e.source.len());
        }
    }
    out.push_str("---- end of transcript ----");
    out
}

impl fmt::Debug for Transcript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transcript")
            .field("name", &self.inner.name)
            .field("events", &self.len())
            .finish()
    }
}
