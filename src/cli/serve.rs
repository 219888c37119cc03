//! `infradev serve`: the GitHub App until SIGTERM or Ctrl-C, then a drain (see
//! [`Service::drain`](crate::service::app::service::Service::drain)); a second signal stops at once.

use std::path::Path;

use tokio::signal::unix::{SignalKind, signal};

use crate::cli::common::CliError;
use crate::cli::exit;
use crate::cli::logging::LogFormat;

const STOPPED_AT_ONCE: &str =
    "stopped at once by a second signal: running jobs resume once their leases lapse";

pub async fn serve(path: &Path, log_format: LogFormat) -> Result<u8, CliError> {
    let config = crate::service::config::ServerConfig::load(path).map_err(CliError::task)?;
    let secrets = config.secrets().map_err(CliError::task)?;
    let infra = |error| CliError {
        code: exit::INFRA,
        error,
    };
    // Watch for SIGTERM before the service says "serving": a supervisor that stops it right
    // after that line must get a drain, not the default action (killed by the signal).
    let mut terminate = signal(SignalKind::terminate())
        .map_err(|e| infra(anyhow::anyhow!("cannot watch for SIGTERM: {e}")))?;
    let mut service =
        crate::service::app::service::Service::start(config, secrets, Default::default())
            .await
            .map_err(infra)?;
    // In JSON, every line is an object: the service logs its address itself ("serving").
    if log_format == LogFormat::Text {
        eprintln!("infradev: listening on http://{}", service.addr());
    }
    let signal = tokio::select! {
        _ = service.wait() => return Err(infra(anyhow::anyhow!("a service loop stopped"))),
        _ = terminate.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    };
    // The intake refuses and no job is claimed from here on.
    let drain = service.drain();
    tracing::info!(signal, "stopping: draining (a second signal stops at once)");
    tokio::select! {
        summary = drain => {
            tracing::info!(
                finished = summary.finished,
                requeued = summary.requeued,
                outbox_delivered = summary.outbox_delivered,
                "drained: finished {} running grade(s), re-queued {}, outbox flushed ({} delivered)",
                summary.finished,
                summary.requeued,
                summary.outbox_delivered,
            );
            Ok(exit::RESOLVED)
        }
        _ = terminate.recv() => Err(infra(anyhow::anyhow!(STOPPED_AT_ONCE))),
        _ = tokio::signal::ctrl_c() => Err(infra(anyhow::anyhow!(STOPPED_AT_ONCE))),
    }
}
