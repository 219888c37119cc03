//! Draining a stopping server (SIGTERM, Ctrl-C): the workers stop claiming, running grades get
//! a grace period to finish, and past it they hand their jobs back (lease released, the job
//! queued again) so that the next start, or another server on the store, grades them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Serving,
    /// No new claims; running grades finish.
    Draining,
    /// The grace period is over: running grades give their jobs back.
    HandBack,
}

/// What a drain did, for its one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainSummary {
    /// Grades that were running at the signal and finished (result committed).
    pub finished: usize,
    /// Jobs handed back to the queue.
    pub requeued: usize,
    /// Outbox rows the final flush delivered.
    pub outbox_delivered: usize,
}

/// The workers' side: read the phase, count what happened to their jobs.
#[derive(Clone)]
pub struct Drain {
    phase: watch::Receiver<Phase>,
    finished: Arc<AtomicUsize>,
    requeued: Arc<AtomicUsize>,
}

/// The service's side: move the phase on, read the counts.
pub struct DrainControl {
    phase: watch::Sender<Phase>,
    drain: Drain,
}

impl Default for DrainControl {
    fn default() -> DrainControl {
        let (phase, rx) = watch::channel(Phase::Serving);
        DrainControl {
            phase,
            drain: Drain {
                phase: rx,
                finished: Arc::default(),
                requeued: Arc::default(),
            },
        }
    }
}

impl DrainControl {
    pub fn drain(&self) -> Drain {
        self.drain.clone()
    }

    pub fn set(&self, phase: Phase) {
        self.phase.send_replace(phase);
    }

    /// (finished, requeued) so far.
    pub fn counts(&self) -> (usize, usize) {
        (
            self.drain.finished.load(Ordering::SeqCst),
            self.drain.requeued.load(Ordering::SeqCst),
        )
    }
}

impl Drain {
    /// True once the server is stopping: claim nothing new.
    pub fn stopping(&self) -> bool {
        *self.phase.borrow() != Phase::Serving
    }

    /// Resolves once the server is stopping.
    pub async fn stopped(&self) {
        let mut phase = self.phase.clone();
        let _ = phase.wait_for(|p| *p != Phase::Serving).await;
    }

    /// Resolves once running grades must give their jobs back.
    pub async fn hand_back(&self) {
        let mut phase = self.phase.clone();
        let _ = phase.wait_for(|p| *p == Phase::HandBack).await;
    }

    /// A job's result was committed; counted when the server is stopping.
    pub fn note_finished(&self) {
        if self.stopping() {
            self.finished.fetch_add(1, Ordering::SeqCst);
        }
    }

    pub fn note_requeued(&self) {
        self.requeued.fetch_add(1, Ordering::SeqCst);
    }
}
