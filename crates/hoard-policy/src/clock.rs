//! Time as the cache sees it.
//!
//! Every freshness and age computation in hoard takes `now` as an argument; the
//! value comes from a [`Clock`]. Production uses [`SystemClock`]; tests use a
//! clock they can advance (see `hoard-testkit`), shared by the proxy and the fake
//! origin so that `Date`, `Age` and expiry move together.
//!
//! Only wall-clock time is abstracted: it is what RFC 9111 reasons about
//! (`Date`, `Expires`, `Age`). Network deadlines (connect and read timeouts) use
//! the runtime's timers and are not affected by a test clock.

use std::fmt;
use std::time::SystemTime;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time, with sub-second precision.
    fn now(&self) -> SystemTime;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[inline]
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}
