//! The watchdog's clock for one connection, which stops while the
//! connection is quiet.
//!
//! A connection's watchdog looks at it every tick (at most a second apart,
//! see `Limits::tick`). A quiet HTTP/2 connection (no stream, nothing read
//! or written for a tick, `Verdict::Park`) has nothing to look at until a
//! byte moves or `keep_alive_timeout` ends it; ticking on would wake its
//! task every second for nothing (2,000 idle connections: 210 ms of CPU in
//! 10 s). So [`Ticks::park`] moves the next tick to the idle
//! deadline, and the first poll that sees the connection's progress count
//! move (a read or a write did, in the same task poll) starts the ticks
//! again, a whole tick later.
//!
//! One timer serves both: it is reset a tick ahead each time it fires, and
//! to the deadline when parked. `Ticks` is pinned where the connection
//! keeps it: an HTTP/1.x connection in its serving phase's box (a
//! connection back from parking allocates nothing for it), an HTTP/2
//! connection in a box of its own (its state lives as long as it does;
//! with the timer inline it was 88 bytes larger, enough to move it to a
//! larger size class of the allocator: bench/README.md, idle.sh).

use std::future::Future as _;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pin_project_lite::pin_project! {
    /// Ticks, or one deadline while parked (see the module documentation).
    #[derive(Debug)]
    pub struct Ticks {
        // The next tick, or the idle deadline while parked.
        #[pin]
        next: Sleep,
        period: Duration,
        // Parked: the progress count then.
        parked: Option<u64>,
    }
}

impl Ticks {
    /// Ticks every `period`, the first at once.
    pub fn new(period: Duration) -> Ticks {
        Ticks {
            next: tokio::time::sleep_until(Instant::now()),
            period,
            parked: None,
        }
    }

    /// No ticks until the progress count moves from `progress`, or until
    /// `deadline`, whichever is first.
    pub fn park(self: Pin<&mut Self>, progress: u64, deadline: Instant) {
        let this = self.project();
        *this.parked = Some(progress);
        this.next.reset(deadline);
    }

    /// Ready at the next tick, or at the deadline while parked; `progress`
    /// is the connection's progress count now. Ticks keep to their
    /// schedule (a late wake-up does not push the next one back), and
    /// ticks missed while the task was busy are skipped, not fired back
    /// to back.
    pub fn poll_tick(self: Pin<&mut Self>, cx: &mut Context<'_>, progress: u64) -> Poll<()> {
        let mut this = self.project();
        if this.parked.is_some_and(|seen| seen != progress) {
            // The connection moved: tick again, from now.
            *this.parked = None;
            this.next.as_mut().reset(Instant::now() + *this.period);
        }
        ready!(this.next.as_mut().poll(cx));
        *this.parked = None;
        let now = Instant::now();
        let scheduled = this.next.deadline() + *this.period;
        let next = if scheduled > now {
            scheduled
        } else {
            now + *this.period
        };
        this.next.as_mut().reset(next);
        Poll::Ready(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn poll(t: Pin<&mut Ticks>, progress: u64) -> Poll<()> {
        t.poll_tick(&mut Context::from_waker(std::task::Waker::noop()), progress)
    }

    #[tokio::test]
    async fn parked_ticks_wait_for_progress_or_the_deadline() {
        let hour = Duration::from_secs(3600);
        let mut t = std::pin::pin!(Ticks::new(hour));
        std::future::poll_fn(|cx| t.as_mut().poll_tick(cx, 0)).await;
        assert_eq!(
            poll(t.as_mut(), 0),
            Poll::Pending,
            "the next tick is an hour away"
        );

        t.as_mut().park(0, Instant::now() + hour);
        assert_eq!(
            poll(t.as_mut(), 0),
            Poll::Pending,
            "parked, before the deadline"
        );
        // Progress: ticking again, the next a whole tick from now (not the
        // ticks missed while parked).
        assert_eq!(poll(t.as_mut(), 1), Poll::Pending);
        assert!(t.parked.is_none());

        // The deadline ends the park with a tick.
        t.as_mut().park(1, Instant::now());
        std::future::poll_fn(|cx| t.as_mut().poll_tick(cx, 1)).await;
        assert!(t.parked.is_none());
        assert_eq!(poll(t.as_mut(), 1), Poll::Pending, "ticking again");
    }

    #[tokio::test(start_paused = true)]
    async fn ticks_keep_to_their_schedule_and_skip_missed_ones() {
        let tick = Duration::from_millis(100);
        let start = Instant::now();
        let mut t = std::pin::pin!(Ticks::new(tick));
        std::future::poll_fn(|cx| t.as_mut().poll_tick(cx, 0)).await;
        // A wake-up 30 ms late: the next tick is still on the schedule.
        tokio::time::advance(tick + Duration::from_millis(30)).await;
        assert_eq!(poll(t.as_mut(), 0), Poll::Ready(()));
        assert_eq!(t.next.deadline(), start + 2 * tick);
        // Three ticks missed: one fires, the next is a whole tick later.
        tokio::time::advance(3 * tick).await;
        assert_eq!(poll(t.as_mut(), 0), Poll::Ready(()));
        assert_eq!(poll(t.as_mut(), 0), Poll::Pending, "no burst");
        assert_eq!(t.next.deadline(), Instant::now() + tick);
    }
}
