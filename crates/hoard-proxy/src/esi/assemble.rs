//! A page assembled from its template and its fragments, streamed in
//! document order.
//!
//! ## Model
//! [`plan`] walks the template once for the request: `esi:choose` is
//! decided, `esi:vars` rendered, and every include met (those inside an
//! `esi:attempt` too) is started at once through a [`Fetch`], so all of a
//! page's fragments are fetched in parallel. The resulting [`Item`]s are
//! sent by one task ([`spawn`]) in order: text at once, then each
//! fragment's bytes as they arrive. An `esi:attempt` is held whole until
//! its fragments end; when one fails (without `onerror="continue"`), the
//! `esi:except` is planned and sent instead (its includes start only
//! then).
//!
//! ## Lifecycle
//! The task ends with the page. A client that goes away drops the body,
//! the task's next send fails and it stops; the fragments' tasks stop at
//! their next send (fills they started go on, as every fill does).

use std::sync::Arc;

use bytes::Bytes;
use hoard_config::esi::OnError;
use hoard_origin::error::BoxError;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;

use super::template::Node;
use super::vars::Values;

/// What a fragment's task sends.
#[derive(Debug)]
pub enum FragEvent {
    /// Bytes of the fragment, in order.
    Data(Bytes),
    /// The fragment (and its `alt`) failed: why, for the log.
    Failed(String),
    /// The fragment ended whole.
    Done,
}

/// Starts includes (the pipeline's sub-requests).
pub trait Fetch: Send + Sync + 'static {
    /// Starts the include of `src` (then `alt` when `src` fails); its
    /// events come on the receiver.
    fn start(&self, src: String, alt: Option<String>) -> mpsc::Receiver<FragEvent>;
}

/// A part of the planned page.
#[derive(Debug)]
pub enum Item {
    /// Bytes as they are.
    Text(Bytes),
    /// A started include.
    Fragment {
        /// Its URL, for the log.
        src: String,
        /// `onerror="continue"`.
        continue_on_error: bool,
        /// Its events.
        rx: mpsc::Receiver<FragEvent>,
    },
    /// `esi:try`: the attempt (started), or the except (not yet).
    Try {
        /// The attempt's items.
        attempt: Vec<Item>,
        /// The except, planned when needed.
        except: Vec<Node>,
    },
}

/// `nodes` planned for a request (see the module docs).
pub fn plan(nodes: &[Node], values: &Values, fetch: &dyn Fetch, out: &mut Vec<Item>) {
    for n in nodes {
        match n {
            Node::Text(b) => out.push(Item::Text(b.clone())),
            Node::Vars(t) => out.push(Item::Text(t.render_html(values))),
            Node::Include(i) => {
                let src = i.src.render_url(values);
                let alt = i.alt.as_ref().map(|a| a.render_url(values));
                let rx = fetch.start(src.clone(), alt);
                out.push(Item::Fragment {
                    src,
                    continue_on_error: i.continue_on_error,
                    rx,
                });
            }
            Node::Choose { whens, otherwise } => {
                let branch = whens
                    .iter()
                    .find(|(test, _)| test.holds(values))
                    .map_or(otherwise, |(_, nodes)| nodes);
                plan(branch, values, fetch, out);
            }
            Node::Try { attempt, except } => {
                let mut a = Vec::new();
                plan(attempt, values, fetch, &mut a);
                out.push(Item::Try {
                    attempt: a,
                    except: except.clone(),
                });
            }
        }
    }
}

/// What the task needs besides the items.
pub struct Assembly {
    /// The request's values (for a late `esi:except`).
    pub values: Values,
    /// Starts the late includes.
    pub fetch: Arc<dyn Fetch>,
    /// What a failed include without `onerror` does.
    pub on_error: OnError,
    /// Counts failures.
    pub failed: Box<dyn Fn(&str, &str) + Send + Sync>,
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Assembly")
            .field("on_error", &self.on_error)
            .finish_non_exhaustive()
    }
}

/// Chunks of the page in flight between the task and the body.
const QUEUE: usize = 16;

/// The page's body: its task started on the runtime.
pub fn spawn(items: Vec<Item>, a: Assembly) -> EsiBody {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(async move {
        let mut sink = Sink::Send(&tx);
        if let Err(Cut(why)) = emit(items, &a, &mut sink).await {
            let _ = tx.send(Err(why.into())).await;
        }
    });
    EsiBody { rx, done: false }
}

/// The page was cut (`on_error = "abort"`), or the client went away.
struct Cut(String);

/// Where emitted bytes go: to the client, or held (an attempt's).
enum Sink<'a> {
    Send(&'a mpsc::Sender<Result<Bytes, BoxError>>),
    Hold(Vec<Bytes>),
}

impl Sink<'_> {
    async fn put(&mut self, b: Bytes) -> Result<(), Cut> {
        match self {
            Sink::Send(tx) => tx
                .send(Ok(b))
                .await
                .map_err(|_| Cut("the client went away".into())),
            Sink::Hold(v) => {
                v.push(b);
                Ok(())
            }
        }
    }
}

/// Sends `items` in order. In a held sink (an attempt), a failed include
/// fails the whole: `Err(None)`.
fn emit<'a>(
    items: Vec<Item>,
    a: &'a Assembly,
    sink: &'a mut Sink<'_>,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), Cut>> + Send + 'a>> {
    Box::pin(async move {
        for item in items {
            match item {
                Item::Text(b) => sink.put(b).await?,
                Item::Fragment {
                    src,
                    continue_on_error,
                    mut rx,
                } => {
                    let why = loop {
                        match rx.recv().await {
                            Some(FragEvent::Data(b)) => sink.put(b).await?,
                            Some(FragEvent::Done) => break None,
                            Some(FragEvent::Failed(why)) => break Some(why),
                            None => break Some("the fragment's task ended".to_owned()),
                        }
                    };
                    if let Some(why) = why {
                        (a.failed)(&src, &why);
                        if continue_on_error {
                            continue;
                        }
                        if matches!(sink, Sink::Hold(_)) {
                            return Err(Cut(format!("attempt failed: {src}: {why}")));
                        }
                        match a.on_error {
                            OnError::Drop => {
                                tracing::warn!(src, why, "ESI include failed; dropped");
                            }
                            OnError::Abort => {
                                tracing::warn!(src, why, "ESI include failed; the page is cut");
                                return Err(Cut(format!("ESI include {src} failed: {why}")));
                            }
                        }
                    }
                }
                Item::Try { attempt, except } => {
                    let mut held = Sink::Hold(Vec::new());
                    match emit(attempt, a, &mut held).await {
                        Ok(()) => {
                            if let Sink::Hold(v) = held {
                                for b in v {
                                    sink.put(b).await?;
                                }
                            }
                        }
                        Err(Cut(why)) => {
                            tracing::debug!(why, "esi:attempt failed; esi:except sent");
                            let mut items = Vec::new();
                            plan(&except, &a.values, &*a.fetch, &mut items);
                            emit(items, a, sink).await?;
                        }
                    }
                }
            }
        }
        Ok(())
    })
}

/// An assembled page's body (see [`spawn`]).
#[derive(Debug)]
pub struct EsiBody {
    rx: mpsc::Receiver<Result<Bytes, BoxError>>,
    done: bool,
}

impl Body for EsiBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.done {
            return std::task::Poll::Ready(None);
        }
        match std::task::ready!(self.rx.poll_recv(cx)) {
            Some(Ok(b)) => std::task::Poll::Ready(Some(Ok(Frame::data(b)))),
            Some(Err(e)) => {
                self.done = true;
                std::task::Poll::Ready(Some(Err(e)))
            }
            None => {
                self.done = true;
                std::task::Poll::Ready(None)
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
