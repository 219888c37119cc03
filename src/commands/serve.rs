//! `infradev serve`: the GitHub App until Ctrl-C.

use std::path::Path;

use crate::cli::CliError;
use crate::exit;
use crate::logging::LogFormat;

pub async fn serve(path: &Path, log_format: LogFormat) -> Result<u8, CliError> {
    let config = crate::config::ServerConfig::load(path).map_err(CliError::task)?;
    let secrets = config.secrets().map_err(CliError::task)?;
    let service = crate::app::service::Service::start(config, secrets, Default::default())
        .await
        .map_err(|error| CliError {
            code: exit::INFRA,
            error,
        })?;
    // In JSON, every line is an object: the service logs its address itself ("serving").
    if log_format == LogFormat::Text {
        eprintln!("infradev: listening on http://{}", service.addr());
    }
    tokio::select! {
        _ = service.wait() => Err(CliError { code: exit::INFRA, error: anyhow::anyhow!("a service loop stopped") }),
        _ = tokio::signal::ctrl_c() => Ok(exit::RESOLVED),
    }
}
