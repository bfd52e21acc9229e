//! Abandon (RFC 4511 §4.11): stops a running search; never answered.

use crate::conn::Conn;
use std::cell::{Cell, RefCell};
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
/// needs no timer to notice. A waker stays listed until the flag is
/// raised: one per task, however often it waits.
#[derive(Default)]
pub struct Abandoned {
    raised: Cell<bool>,
    /// The tasks waiting on `raised`: one per search under the message ID
    /// (a client may run several under one; each must wake).
    waiters: RefCell<Vec<Waker>>,
}

impl Abandoned {
    pub fn get(&self) -> bool {
        self.raised.get()
    }

    pub fn raise(&self) {
        self.raised.set(true);
        for w in self.waiters.take() {
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
        let mut waiters = self.0.waiters.borrow_mut();
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
