//! Abandon (RFC 4511 §4.11): stops a running search; never answered.

use crate::conn::Conn;
use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

pub fn handle(conn: &Conn, msgid: i32) {
    if let Some((flag, _)) = conn.running.borrow().get(&msgid) {
        flag.raise();
    }
}

/// A running search's Abandon flag (`ops::search::running`), raised by an
/// Abandon, a Cancel, a Bind or the client's going. A search looks at it
/// between steps; one that sleeps until something happens (a persistent
/// search waiting for the next commit) also waits on `raised`, so that it
/// needs no timer to notice.
#[derive(Default)]
pub struct Abandoned {
    raised: Cell<bool>,
    /// The one task waiting on `raised`.
    waiter: Cell<Option<Waker>>,
}

impl Abandoned {
    pub fn get(&self) -> bool {
        self.raised.get()
    }

    pub fn raise(&self) {
        self.raised.set(true);
        if let Some(w) = self.waiter.take() {
            w.wake();
        }
    }

    /// Resolves once the flag is raised.
    pub fn raised(&self) -> Raised<'_> {
        Raised(self)
    }
}

pub struct Raised<'a>(&'a Abandoned);

impl Future for Raised<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0.get() {
            return Poll::Ready(());
        }
        self.0.waiter.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}
