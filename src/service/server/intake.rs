//! Group commit for webhook deliveries. Every request still gets its 202 only after its own
//! delivery is durably committed, but deliveries that arrive together share one transaction
//! (one fsync), so intake is bounded by the disk's commit rate divided by the batch size rather
//! than by one fsync per request. One writer also means no contention for SQLite's write lock.

use tokio::sync::{mpsc, oneshot};

use crate::service::store::{Inserted, NewDelivery, Store};

/// Most deliveries committed in one transaction.
const MAX_BATCH: usize = 128;
/// Requests waiting for the writer before new ones wait for room (back-pressure).
const QUEUE: usize = 4096;

struct Pending {
    delivery: NewDelivery,
    reply: oneshot::Sender<Result<Inserted, String>>,
}

/// The handle request handlers use; cheap to clone.
#[derive(Clone)]
pub struct Intake {
    tx: mpsc::Sender<Pending>,
}

impl Intake {
    /// Starts the single writer task on `store`.
    pub fn start(store: Store) -> Intake {
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(writer(store, rx));
        Intake { tx }
    }

    /// Stores one delivery; returns once it is committed (or failed).
    pub async fn insert(&self, delivery: NewDelivery) -> Result<Inserted, String> {
        let (reply, answer) = oneshot::channel();
        self.tx
            .send(Pending { delivery, reply })
            .await
            .map_err(|_| "the intake writer stopped".to_owned())?;
        answer
            .await
            .map_err(|_| "the intake writer stopped".to_owned())?
    }
}

async fn writer(store: Store, mut rx: mpsc::Receiver<Pending>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        metrics::histogram!("infradev_intake_batch").record(batch.len() as f64);
        match commit(&store, &batch).await {
            Ok(results) => {
                for (pending, result) in batch.drain(..).zip(results) {
                    let _ = pending.reply.send(Ok(result));
                }
            }
            Err(e) => {
                let message = e.to_string();
                for pending in batch.drain(..) {
                    let _ = pending.reply.send(Err(message.clone()));
                }
            }
        }
    }
}

async fn commit(
    store: &Store,
    batch: &[Pending],
) -> Result<Vec<Inserted>, crate::service::store::StoreError> {
    let mut tx = store.begin().await?;
    let mut results = Vec::with_capacity(batch.len());
    for pending in batch {
        results.push(tx.insert_delivery(&pending.delivery).await?);
    }
    tx.commit().await?;
    Ok(results)
}
