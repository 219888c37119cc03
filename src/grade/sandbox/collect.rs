//! The official phase's results channel: the host listens on a Unix socket in a directory
//! mounted into the sandbox, and keeps every event frame as it arrives. Nothing sent can be
//! taken back (unlike a results file the sandbox could truncate, replace by a FIFO or a
//! symlink), and nothing the sandbox sends can make the host block or hold more than the caps.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::mpsc;

use super::broker::read_raw;
use crate::grade::results::PhaseResults;

/// One event frame at most.
const MAX_FRAME: usize = 1 << 20;
/// All frames of a phase together.
const MAX_TOTAL: usize = 64 << 20;
/// Connections accepted per phase (the entry script's, the plugin's, and a few more).
const MAX_CONNECTIONS: usize = 16;
/// How long after the sandbox ended frames still in flight are waited for.
const DRAIN: Duration = Duration::from_millis(500);

/// Listens on `path` until `ended` resolves, then returns what arrived.
pub async fn collect(
    path: &Path,
    ended: impl std::future::Future<Output = ()> + Send + 'static,
    progress: Arc<AtomicUsize>,
) -> std::io::Result<Collector> {
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(Collector {
        listener,
        ended: Box::pin(ended),
        progress,
    })
}

pub struct Collector {
    listener: UnixListener,
    ended: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
    progress: Arc<AtomicUsize>,
}

impl Collector {
    pub async fn run(self) -> PhaseResults {
        let Collector {
            listener,
            mut ended,
            progress,
        } = self;
        let (tx, mut rx) = mpsc::channel::<Vec<u8>>(256);
        let mut results = PhaseResults::default();
        let mut connections = 0usize;
        let mut total = 0usize;
        let mut apply = |frame: Vec<u8>, results: &mut PhaseResults| {
            total += frame.len();
            if total <= MAX_TOTAL {
                results.apply_json(&frame);
                progress.store(results.n_results(), Ordering::Relaxed);
            }
        };
        loop {
            tokio::select! {
                accepted = listener.accept(), if connections < MAX_CONNECTIONS => {
                    if let Ok((mut stream, _)) = accepted {
                        connections += 1;
                        let tx = tx.clone();
                        tokio::spawn(async move {
                            while let Ok(frame) = read_raw(&mut stream, MAX_FRAME).await {
                                if tx.send(frame).await.is_err() {
                                    break;
                                }
                            }
                        });
                    }
                }
                Some(frame) = rx.recv() => apply(frame, &mut results),
                _ = &mut ended => break,
            }
        }
        drop(tx);
        // The sandbox is gone: what its connections still held arrives now or never.
        let _ = tokio::time::timeout(DRAIN, async {
            while let Some(frame) = rx.recv().await {
                apply(frame, &mut results);
            }
        })
        .await;
        results
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grade::sandbox::broker::write_frame;
    use serde_json::json;

    #[tokio::test]
    async fn events_arrive_from_several_connections_and_stay() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.sock");
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let progress = Arc::new(AtomicUsize::new(0));
        let collector = collect(
            &path,
            async {
                let _ = done_rx.await;
            },
            progress.clone(),
        )
        .await
        .unwrap();
        let task = tokio::spawn(collector.run());
        let mut a = tokio::net::UnixStream::connect(&path).await.unwrap();
        write_frame(&mut a, &json!({"event": "ready"}))
            .await
            .unwrap();
        let mut b = tokio::net::UnixStream::connect(&path).await.unwrap();
        write_frame(&mut b, &json!({"event": "session_start"}))
            .await
            .unwrap();
        write_frame(&mut b, &json!({"event": "result", "nodeid": "t.py::a", "outcome": "passed", "exc_type": "evil\u{1b}[31m"})).await.unwrap();
        // A frame over the cap ends that connection only.
        tokio::io::AsyncWriteExt::write_all(&mut b, &(u32::MAX).to_be_bytes())
            .await
            .unwrap();
        drop((a, b));
        tokio::time::sleep(Duration::from_millis(100)).await;
        done_tx.send(()).unwrap();
        let results = task.await.unwrap();
        assert!(results.ready());
        assert!(results.started_session);
        assert_eq!(
            results.outcome_of("t.py::a"),
            Some(crate::grading::Outcome::Passed)
        );
        assert_eq!(progress.load(Ordering::Relaxed), 1);
    }
}
