//! A page assembled from its template and its fragments, streamed in
//! document order.
//!
//! ## Model
//! [`plan`] walks the template once for the request: `esi:choose` is
//! decided, `esi:vars` rendered, and every include met (those inside an
//! `esi:attempt` too) gets its fragment's future through a [`Fetch`]. The
//! page's body ([`EsiBody`]) owns those futures and polls **all** of them
//! each time it is polled, so every fragment of the page is fetched at
//! once, on the page's own task (no task or channel per fragment). It
//! sends its [`Item`]s in order: text at once, a fragment when its future
//! is done. An `esi:attempt` goes out when all its fragments are done;
//! when one failed (without `onerror="continue"`), the `esi:except` is
//! planned and sent instead (its includes start only then).
//!
//! ## Lifecycle
//! Everything ends with the body: a client that goes away drops it, and
//! with it the fragments' futures (fills they joined go on, as every fill
//! does).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hoard_config::esi::OnError;
use hoard_origin::error::BoxError;
use http_body::{Body, Frame, SizeHint};

use super::template::Node;
use super::vars::Values;

/// A fragment, fetched: its body whole, or why it failed; and its cache
/// outcome (for `Cache-Status`).
#[derive(Debug)]
pub struct Fragment {
    /// The body, or why there is none.
    pub body: Result<Bytes, String>,
    /// The cache outcome's name (`hit`, `miss`...; `error`).
    pub outcome: &'static str,
}

/// A fragment being fetched.
pub type FragmentFuture = Pin<Box<dyn Future<Output = Fragment> + Send>>;

/// Starts includes (the pipeline's sub-requests).
pub trait Fetch: Send + Sync + 'static {
    /// The fetch of `src` (then of `alt` when `src` fails).
    fn start(&self, src: String, alt: Option<String>) -> FragmentFuture;
}

/// A fragment's place in the page.
enum Slot {
    /// Being fetched.
    Running(FragmentFuture),
    /// Fetched (its body taken once sent).
    Done(Fragment),
}

/// A part of the planned page.
pub enum Item {
    /// Bytes as they are.
    Text(Bytes),
    /// An include.
    Fragment {
        /// Its URL, for the log.
        src: String,
        /// `onerror="continue"`.
        continue_on_error: bool,
        /// Its slot in the page.
        slot: usize,
    },
    /// `esi:try`: the attempt (started), or the except (not yet).
    Try {
        /// The attempt's items.
        attempt: Vec<Item>,
        /// The except, planned when needed.
        except: Vec<Node>,
    },
}

impl std::fmt::Debug for Item {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Text(b) => f.debug_tuple("Text").field(&b.len()).finish(),
            Item::Fragment { src, slot, .. } => f
                .debug_struct("Fragment")
                .field("src", src)
                .field("slot", slot)
                .finish(),
            Item::Try { attempt, .. } => f.debug_struct("Try").field("attempt", attempt).finish(),
        }
    }
}

/// What a page needs besides its items.
pub struct Assembly {
    /// The request's values (for a late `esi:except`).
    pub values: Values,
    /// Starts the includes.
    pub fetch: Arc<dyn Fetch>,
    /// What a failed include without `onerror` does.
    pub on_error: OnError,
    /// Counts a failed include (`src`, why).
    pub failed: Box<dyn Fn(&str, &str) + Send + Sync>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

/// A planned page: its items and its fragments' fetches.
pub struct Page {
    items: VecDeque<Item>,
    slots: Vec<Slot>,
    a: Assembly,
}

impl std::fmt::Debug for Page {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Page")
            .field("items", &self.items.len())
            .field("fragments", &self.slots.len())
            .finish_non_exhaustive()
    }
}

impl Page {
    /// `nodes` planned for a request: every include started.
    pub fn plan(nodes: &[Node], a: Assembly) -> Page {
        let mut slots = Vec::new();
        let mut items = Vec::new();
        plan(nodes, &a.values, &*a.fetch, &mut slots, &mut items);
        Page {
            items: items.into(),
            slots,
            a,
        }
    }

    /// Polls every fragment still being fetched; true when none is.
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        let mut all = true;
        for s in &mut self.slots {
            if let Slot::Running(f) = s {
                match f.as_mut().poll(cx) {
                    Poll::Ready(done) => *s = Slot::Done(done),
                    Poll::Pending => all = false,
                }
            }
        }
        all
    }

    /// Waits until every fragment started so far is fetched: `(src, outcome)`
    /// of each, in document order (for `Cache-Status`, `debug_headers`).
    pub async fn outcomes(&mut self) -> Vec<(String, &'static str)> {
        std::future::poll_fn(|cx| {
            if self.drive(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
        let mut out = Vec::new();
        collect_outcomes(self.items.iter(), &self.slots, &mut out);
        out
    }

    /// The page as a body.
    pub fn into_body(self) -> EsiBody {
        EsiBody {
            page: self,
            done: false,
        }
    }
}

fn collect_outcomes<'a>(
    items: impl Iterator<Item = &'a Item>,
    slots: &[Slot],
    out: &mut Vec<(String, &'static str)>,
) {
    for i in items {
        match i {
            Item::Text(_) => {}
            Item::Fragment { src, slot, .. } => {
                if let Slot::Done(f) = &slots[*slot] {
                    out.push((src.clone(), f.outcome));
                }
            }
            Item::Try { attempt, .. } => collect_outcomes(attempt.iter(), slots, out),
        }
    }
}

/// `nodes` planned for a request (see the module docs).
fn plan(
    nodes: &[Node],
    values: &Values,
    fetch: &dyn Fetch,
    slots: &mut Vec<Slot>,
    out: &mut Vec<Item>,
) {
    for n in nodes {
        match n {
            Node::Text(b) => out.push(Item::Text(b.clone())),
            Node::Vars(t) => out.push(Item::Text(t.render_html(values))),
            Node::Include(i) => {
                let src = i.src.render_url(values);
                let alt = i.alt.as_ref().map(|a| a.render_url(values));
                slots.push(Slot::Running(fetch.start(src.clone(), alt)));
                out.push(Item::Fragment {
                    src,
                    continue_on_error: i.continue_on_error,
                    slot: slots.len() - 1,
                });
            }
            Node::Choose { whens, otherwise } => {
                let branch = whens
                    .iter()
                    .find(|(test, _)| test.holds(values))
                    .map_or(otherwise, |(_, nodes)| nodes);
                plan(branch, values, fetch, slots, out);
            }
            Node::Try { attempt, except } => {
                let mut a = Vec::new();
                plan(attempt, values, fetch, slots, &mut a);
                out.push(Item::Try {
                    attempt: a,
                    except: except.clone(),
                });
            }
        }
    }
}

/// An attempt's state: its fragments not all fetched, all fetched, or one
/// failed (why).
enum Attempt {
    Waiting,
    Whole,
    Failed(String),
}

fn attempt_state(items: &[Item], slots: &[Slot]) -> Attempt {
    let mut state = Attempt::Whole;
    for i in items {
        match i {
            Item::Text(_) => {}
            Item::Fragment {
                src,
                continue_on_error,
                slot,
            } => match &slots[*slot] {
                Slot::Running(_) => state = Attempt::Waiting,
                Slot::Done(f) => {
                    if let (Err(why), false) = (&f.body, continue_on_error) {
                        return Attempt::Failed(format!("{src}: {why}"));
                    }
                }
            },
            Item::Try { attempt, .. } => {
                if let Attempt::Waiting = attempt_state(attempt, slots) {
                    state = Attempt::Waiting;
                }
            }
        }
    }
    state
}

/// An assembled page's body (see the module docs).
pub struct EsiBody {
    page: Page,
    done: bool,
}

impl std::fmt::Debug for EsiBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EsiBody")
            .field("page", &self.page)
            .field("done", &self.done)
            .finish()
    }
}

impl Body for EsiBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let page = &mut self.page;
        page.drive(cx);
        loop {
            let Some(item) = page.items.pop_front() else {
                self.done = true;
                return Poll::Ready(None);
            };
            match item {
                Item::Text(b) => {
                    if !b.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(b))));
                    }
                }
                Item::Fragment {
                    src,
                    continue_on_error,
                    slot,
                } => {
                    let Slot::Done(f) = &mut page.slots[slot] else {
                        page.items.push_front(Item::Fragment {
                            src,
                            continue_on_error,
                            slot,
                        });
                        return Poll::Pending;
                    };
                    match std::mem::replace(&mut f.body, Ok(Bytes::new())) {
                        Ok(b) if b.is_empty() => {}
                        Ok(b) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                        Err(why) => {
                            (page.a.failed)(&src, &why);
                            if continue_on_error {
                                continue;
                            }
                            match page.a.on_error {
                                OnError::Drop => {
                                    tracing::warn!(src, why, "ESI include failed; dropped");
                                }
                                OnError::Abort => {
                                    tracing::warn!(src, why, "ESI include failed; the page is cut");
                                    self.done = true;
                                    return Poll::Ready(Some(Err(format!(
                                        "ESI include {src} failed: {why}"
                                    )
                                    .into())));
                                }
                            }
                        }
                    }
                }
                Item::Try { attempt, except } => match attempt_state(&attempt, &page.slots) {
                    Attempt::Waiting => {
                        page.items.push_front(Item::Try { attempt, except });
                        return Poll::Pending;
                    }
                    Attempt::Whole => {
                        for i in attempt.into_iter().rev() {
                            page.items.push_front(i);
                        }
                    }
                    Attempt::Failed(why) => {
                        tracing::debug!(why, "esi:attempt failed; esi:except sent");
                        // Count the attempt's failures (the except answers
                        // for them).
                        count_failures(&attempt, &page.slots, &*page.a.failed);
                        let mut items = Vec::new();
                        plan(
                            &except,
                            &page.a.values,
                            &*page.a.fetch,
                            &mut page.slots,
                            &mut items,
                        );
                        for i in items.into_iter().rev() {
                            page.items.push_front(i);
                        }
                        // The except's own includes start now.
                        page.drive(cx);
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

fn count_failures(items: &[Item], slots: &[Slot], failed: &(dyn Fn(&str, &str) + Send + Sync)) {
    for i in items {
        match i {
            Item::Text(_) => {}
            Item::Fragment { src, slot, .. } => {
                if let Slot::Done(Fragment { body: Err(why), .. }) = &slots[*slot] {
                    failed(src, why);
                }
            }
            Item::Try { attempt, .. } => count_failures(attempt, slots, failed),
        }
    }
}
