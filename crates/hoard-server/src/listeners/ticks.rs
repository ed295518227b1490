//! The watchdog's clock for one connection, which stops while the
//! connection is quiet.
//!
//! A connection's watchdog looks at it every tick (at most a second apart,
//! see `Limits::tick`). A quiet HTTP/2 connection (no stream, nothing read
//! or written for a tick, `Verdict::Park`) has nothing to look at until a
//! byte moves or `keep_alive_timeout` ends it; ticking on would wake its
//! task every second for nothing (2,000 idle connections: 210 ms of CPU in
//! 10 s). So [`Ticks::park`] swaps the ticks for one timer at the idle
//! deadline, and the first poll that sees the connection's progress count
//! move (a read or a write did, in the same task poll) starts the ticks
//! again, a whole tick later.

use std::future::Future as _;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Interval, Sleep};

/// Ticks, or one deadline while parked (see the module documentation).
#[derive(Debug)]
pub struct Ticks {
    interval: Interval,
    /// Parked: the progress count then, and the idle deadline.
    parked: Option<(u64, Pin<Box<Sleep>>)>,
}

impl Ticks {
    /// Ticks every `period`, the first at once.
    pub fn new(period: Duration) -> Ticks {
        Ticks {
            interval: tokio::time::interval(period),
            parked: None,
        }
    }

    /// No ticks until the progress count moves from `progress`, or until
    /// `deadline`, whichever is first.
    pub fn park(&mut self, progress: u64, deadline: Instant) {
        self.parked = Some((progress, Box::pin(tokio::time::sleep_until(deadline))));
    }

    /// Ready at the next tick, or at the deadline while parked; `progress`
    /// is the connection's progress count now.
    pub fn poll_tick(&mut self, cx: &mut Context<'_>, progress: u64) -> Poll<()> {
        if let Some((seen, deadline)) = &mut self.parked {
            if *seen == progress {
                return match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        self.parked = None;
                        Poll::Ready(())
                    }
                    Poll::Pending => Poll::Pending,
                };
            }
            // The connection moved: tick again, from now.
            self.parked = None;
            self.interval.reset();
        }
        self.interval.poll_tick(cx).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(t: &mut Ticks, progress: u64) -> Poll<()> {
        t.poll_tick(&mut Context::from_waker(std::task::Waker::noop()), progress)
    }

    #[tokio::test]
    async fn parked_ticks_wait_for_progress_or_the_deadline() {
        let hour = Duration::from_secs(3600);
        let mut t = Ticks::new(hour);
        std::future::poll_fn(|cx| t.poll_tick(cx, 0)).await;
        assert_eq!(
            poll(&mut t, 0),
            Poll::Pending,
            "the next tick is an hour away"
        );

        t.park(0, Instant::now() + hour);
        assert_eq!(
            poll(&mut t, 0),
            Poll::Pending,
            "parked, before the deadline"
        );
        // Progress: ticking again, the next a whole tick from now (not the
        // ticks missed while parked).
        assert_eq!(poll(&mut t, 1), Poll::Pending);
        assert!(t.parked.is_none());

        // The deadline ends the park with a tick.
        t.park(1, Instant::now());
        std::future::poll_fn(|cx| t.poll_tick(cx, 1)).await;
        assert!(t.parked.is_none());
        assert_eq!(poll(&mut t, 1), Poll::Pending, "ticking again");
    }
}
